// A backend runs one case and returns every stage it produces (DESIGN.md "Backends").
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "harness/case.hpp"
#include "reference/result.hpp"

namespace dsa {

struct BackendRun {
  Result result;        // tensors left empty were not produced: reported "not checked", never a pass
  double seconds = 0;   // wall time of the run
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // injected: the indices the attention must use (the case injects them), else nullopt.
  // Throws std::runtime_error when the implementation fails (a "crash" bucket).
  virtual BackendRun run(const Case& c, const Inputs& in, const std::optional<TensorI>& injected) = 0;
};

// reference | lowp | cuda | auto | mutant:NAME | exec:CMD. Throws InvalidInput for an unknown
// name and Unavailable when the environment cannot run it (e.g. cuda without a device).
std::unique_ptr<Backend> make_backend(const std::string& spec);

}  // namespace dsa

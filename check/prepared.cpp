#include "check/prepared.hpp"

#include <algorithm>
#include <atomic>

#include "core/errors.hpp"

namespace dsa {

bool PreparedCase::checks(Stage s) const { return std::find(stages.begin(), stages.end(), s) != stages.end(); }

PreparedCase prepare(Problem p, Inputs in, std::optional<TensorI> injected, std::vector<Stage> stages) {
  validate(p);
  PreparedCase c;
  c.layout = make_layout(p.seqlens, p.cp, p.pad_rows);
  c.width = topk_width(p.topk, c.layout.tp);
  check_shapes(in, p.dims, c.layout.tp);
  if (injected) {
    const Shape want = shape_of(tensor_spec("indices"), p.dims, c.layout.tp, p.topk);
    require(injected->shape == want, "indices",
            "must have shape " + shape_str(want) + ", got " + shape_str(injected->shape));
  }
  c.problem = std::move(p);
  c.inputs = std::move(in);
  c.injected = std::move(injected);
  c.stages = std::move(stages);
  static std::atomic<uint64_t> next_id{1};
  c.id = next_id++;
  return c;
}

}  // namespace dsa

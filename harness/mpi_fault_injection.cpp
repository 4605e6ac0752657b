#include "harness/mpi_fault_injection.hpp"

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "core/errors.hpp"

namespace dsa::mpi {

namespace {
constexpr const char* kVar = "DSA_TEST_MPI_FAULT";
const char* const kKinds[] = {"exit", "abort", "segv", "kill", "hang", "error", "seed", "hello"};
}  // namespace

std::vector<PlantedFault> planted_faults() {
  std::vector<PlantedFault> out;
  const char* v = std::getenv(kVar);
  if (!v || !*v) return out;
  std::stringstream all(v);
  std::string item;
  while (std::getline(all, item, ',')) {
    PlantedFault f;
    char colon1 = 0, colon2 = 0;
    std::stringstream one(item);
    one >> f.rank >> colon1 >> f.seq >> colon2 >> f.kind;
    bool known = false;
    for (const char* k : kKinds) known = known || f.kind == k;
    require(one && colon1 == ':' && colon2 == ':' && f.rank >= 0 && f.seq >= 0 && known, kVar,
            "must be RANK:CASE:KIND[,...] with KIND one of exit|abort|segv|kill|hang|error|seed|hello, got '" + item + "'");
    out.push_back(f);
  }
  return out;
}

bool planted(const std::vector<PlantedFault>& faults, int rank, int64_t seq, const std::string& kind) {
  for (const auto& f : faults)
    if (f.rank == rank && f.kind == kind && (kind == "hello" || f.seq == seq)) return true;
  return false;
}

void act_planted(const std::vector<PlantedFault>& faults, int rank, int64_t seq) {
  if (planted(faults, rank, seq, "exit")) std::exit(3);
  if (planted(faults, rank, seq, "abort")) std::abort();
  if (planted(faults, rank, seq, "segv")) std::raise(SIGSEGV);
  if (planted(faults, rank, seq, "kill")) std::raise(SIGKILL);
  if (planted(faults, rank, seq, "error")) throw std::runtime_error("planted error (DSA_TEST_MPI_FAULT)");
  if (planted(faults, rank, seq, "hang"))
    for (;;) pause();
}

}  // namespace dsa::mpi

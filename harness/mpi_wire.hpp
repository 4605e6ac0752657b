// What travels between the ranks of `--comm mpi` besides the collectives' data: one rank's
// RankResult as bytes (rank 0 assembles the global Result from them) and the hashes the ranks
// compare before each case. MPI-free, so that it is plain code to test.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "check/prepared.hpp"
#include "reference/core.hpp"

namespace dsa::mpi {

// Every tensor of r (shape, then values as their bits) and the loss, in a fixed order: rank 0
// unpacks exactly what the rank computed, bit for bit.
std::string pack_rank_result(const RankResult& r);
// Throws std::runtime_error when bytes are not a packed RankResult (truncated, trailing bytes).
RankResult unpack_rank_result(const std::string& bytes);

// FNV-1a (harness/philox.hpp's) over the case's inputs and injected indices, tensor by tensor:
// two ranks that generated different inputs for one case disagree on it.
uint64_t inputs_digest(const PreparedCase& pc);
// The same over any inputs (a rank's shard) and injected indices.
uint64_t inputs_digest(const Inputs& in, const std::optional<TensorI>& injected);
// FNV-1a of text (the case JSON every rank re-serializes from what it received).
uint64_t text_digest(const std::string& text);

}  // namespace dsa::mpi

// --shard I/N (fuzz, replay): N jobs of one run (a CI matrix, a Slurm array) cover disjoint cases
// of one seed. Random case number i and the case file at position i of the sorted corpus list
// belong to shard i % N, so the N shards together run exactly the cases of the unsharded run,
// each once, and `dsa-parity merge` puts their reports back together. --cases M is the total over
// all shards: shard I runs the random cases i < M with i % N == I.
#pragma once

#include <cstdint>
#include <string>

namespace dsa {

struct Shard {
  int64_t index = 0, count = 1;  // 0 <= index < count; 0/1 is the whole run

  bool sharded() const { return count > 1; }
  bool owns(int64_t i) const { return i % count == index; }
  // How many of the numbers 0 ... total-1 this shard owns.
  int64_t share(int64_t total) const { return total > index ? (total - index + count - 1) / count : 0; }
  std::string text() const { return std::to_string(index) + "/" + std::to_string(count); }  // "1/4"
};

// "I/N" with decimal integers 0 <= I < N; anything else is InvalidInput(field, ...) naming the rule.
Shard parse_shard(const std::string& text, const std::string& field = "--shard");

}  // namespace dsa

#include "harness/shard.hpp"

#include <gtest/gtest.h>

#include "core/errors.hpp"

namespace dsa {
namespace {

TEST(Shard, ParsesIOfNAndRefusesEverythingElseNamingTheRule) {
  const Shard s = parse_shard("3/4");
  EXPECT_EQ(s.index, 3);
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.text(), "3/4");
  EXPECT_TRUE(s.sharded());
  EXPECT_FALSE(parse_shard("0/1").sharded());
  for (const char* bad : {"3/2", "4/4", "0/0", "a/b", "-1/4", "1/4/5", "", "1", "1/", "/4", " 1/4", "1/4 ", "+1/4",
                          "1.0/4", "99999999999999999999/100000000000000000000"}) {
    try {
      parse_shard(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidInput& e) {
      EXPECT_EQ(e.field, "--shard") << bad;
      EXPECT_NE(e.rule.find("0 \u2264 I < N"), std::string::npos) << e.rule;
      EXPECT_NE(e.rule.find(std::string("got '") + bad + "'"), std::string::npos) << e.rule;
    }
  }
}

TEST(Shard, TheSharesPartitionTheCaseNumbers) {
  for (int64_t n : {1, 2, 3, 4, 7}) {
    for (int64_t total : {0, 1, 5, 12, 13}) {
      int64_t sum = 0;
      std::vector<int> owners(total, 0);
      for (int64_t i = 0; i < n; ++i) {
        const Shard s{i, n};
        int64_t mine = 0;
        for (int64_t k = 0; k < total; ++k) {
          owners[k] += s.owns(k);
          mine += s.owns(k);
        }
        EXPECT_EQ(s.share(total), mine) << s.text() << " of " << total;
        sum += s.share(total);
      }
      EXPECT_EQ(sum, total);
      for (int64_t k = 0; k < total; ++k) EXPECT_EQ(owners[k], 1) << k;  // each case number in exactly one shard
    }
  }
}

}  // namespace
}  // namespace dsa

// `dsa-parity layout` as a user runs it: the JSON of SPEC.md §1's worked example, and bad input
// exiting 2 with one line naming the field.
#include <gtest/gtest.h>

#include "tools/shell_testing.hpp"


#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace {

using CliRun = dsa::cli_testing::ShellRun;

// stdout and stderr together.
CliRun run_cli(const std::string& args) {
  return dsa::cli_testing::run_shell(std::string(DSA_PARITY_BIN) + " " + args + " 2>&1");
}

using nlohmann::json;

TEST(LayoutCli, WorkedExampleZigzagJson) {
  const CliRun r = run_cli("layout --seqlens 5,11 --cp 2 --layout zigzag --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.size(), 3u);  // exactly tp, cu_padded, ranks
  EXPECT_EQ(j.at("tp"), 20);
  EXPECT_EQ(j.at("cu_padded"), json({0, 8, 20}));
  ASSERT_EQ(j.at("ranks").size(), 2u);
  const json& r0 = j["ranks"][0];
  const json& r1 = j["ranks"][1];
  EXPECT_EQ(r0.size(), 5u);
  EXPECT_EQ(r0.at("rank"), 0);
  EXPECT_EQ(r1.at("rank"), 1);
  EXPECT_EQ(r0.at("rows"), json({0, 1, 6, 7, 8, 9, 10, 17, 18, 19}));
  EXPECT_EQ(r1.at("rows"), json({2, 3, 4, 5, 11, 12, 13, 14, 15, 16}));
  EXPECT_EQ(r0.at("real"), json({true, true, false, false, true, true, true, true, true, false}));
  EXPECT_EQ(r1.at("real"), json({true, true, true, false, true, true, true, true, true, true}));
  // [key_start, key_end) under pad_rows: attend; query 17 (rank 0, local 7) sees keys 8 … 17.
  EXPECT_EQ(r0.at("key_start"), json({0, 0, 0, 0, 8, 8, 8, 8, 8, 8}));
  EXPECT_EQ(r0.at("key_end"), json({1, 2, 7, 8, 9, 10, 11, 18, 19, 20}));
  EXPECT_EQ(r1.at("key_start"), json({0, 0, 0, 0, 8, 8, 8, 8, 8, 8}));
  EXPECT_EQ(r1.at("key_end"), json({3, 4, 5, 6, 12, 13, 14, 15, 16, 17}));
}

TEST(LayoutCli, WorkedExampleContiguousJson) {
  const CliRun r = run_cli("layout --seqlens 5,11 --cp 2 --layout contiguous --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("tp"), 16);
  EXPECT_EQ(j.at("ranks")[0].at("rows"), json({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(j.at("ranks")[1].at("rows"), json({8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(LayoutCli, TextTableNamesEveryRow) {
  const CliRun r = run_cli("layout --seqlens 5,11 --cp 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("Tp = 20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("pad"), std::string::npos) << r.out;
}

TEST(LayoutCli, BadPadMultipleExitsTwoNamingTheField) {
  const CliRun r = run_cli("layout --seqlens 5,11 --cp 3 --pad-multiple 4");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cp.pad_multiple"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one line: " << r.out;
}

TEST(LayoutCli, OtherBadInputExitsTwo) {
  for (const char* args : {"layout --seqlens 5,-1", "layout --seqlens 5 --cp 0", "layout --seqlens 5 --layout zig",
                           "layout --cp 2", "layout --seqlens 5 --bogus 1"}) {
    const CliRun r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("error"), std::string::npos) << args << ": " << r.out;
  }
}

}  // namespace

// A fresh folder per test, for tests (header only, not installed): TMPDIR/prefix-<who>-suite-test,
// emptied first. <who> is the pid, so that ctest's parallel processes never share one; a death
// test's child is another process that must write where its parent reads, so those name the
// user instead (Who::user).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

namespace dsa::test_dirs {

enum class Who { process, user };

inline std::string scratch_dir(const std::string& prefix, Who who = Who::process) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string id = who == Who::process ? std::to_string(getpid()) : std::to_string(getuid());
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / (prefix + "-" + id + "-" + info->test_suite_name() + "-" + info->name());
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace dsa::test_dirs

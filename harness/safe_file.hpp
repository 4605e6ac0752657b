// Reading files that come from outside (case files, a backend's outputs.safetensors) without
// trusting them: only a regular file is read (a FIFO, device, socket or directory is refused, and
// a FIFO never blocks: it is opened with O_NONBLOCK and checked with fstat before any read), a
// symlink must resolve inside a given folder, the size is capped, and a deadline bounds the read.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace dsa {

// Why a file was not read, in words ("is a FIFO, not a regular file"); what() names the path.
struct FileRefused : std::runtime_error {
  std::string path, rule;
  FileRefused(std::string p, std::string r);
};

struct SafeRead {
  uint64_t max_bytes = 1 << 20;
  std::string confine_to;  // a symlink must resolve inside this folder ("" = any target)
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

inline constexpr uint64_t kMaxCaseFileBytes = 1 << 20;  // 1 MiB

std::string read_file_safely(const std::string& path, const SafeRead& opt);

// "a FIFO", "a directory", ... for a file type (st_mode).
std::string file_kind(unsigned mode);

}  // namespace dsa

#include "harness/safe_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "harness/text.hpp"

namespace dsa {

FileRefused::FileRefused(std::string p, std::string r)
    : std::runtime_error(text::one_line(p, 200) + ": " + r), path(std::move(p)), rule(std::move(r)) {}

std::string file_kind(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symlink";
  return "not a regular file";
}

namespace {

std::string real_path(const std::string& p) {
  char buf[PATH_MAX];
  if (!realpath(p.c_str(), buf)) return "";
  return buf;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

std::string read_file_safely(const std::string& path, const SafeRead& opt) {
  struct stat ls {};
  if (lstat(path.c_str(), &ls) != 0)
    throw FileRefused(path, errno == ENOENT ? "does not exist" : std::string("cannot be read: ") + std::strerror(errno));
  if (S_ISLNK(ls.st_mode) && !opt.confine_to.empty()) {
    const std::string target = real_path(path), root = real_path(opt.confine_to);
    if (target.empty()) throw FileRefused(path, "is a symlink that resolves nowhere");
    if (root.empty() || target.compare(0, root.size(), root) != 0 ||
        (target.size() > root.size() && target[root.size()] != '/'))
      throw FileRefused(path, "is a symlink to " + text::quoted(target) + ", outside its folder");
  }
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
  Fd f;
  f.fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (f.fd < 0) throw FileRefused(path, std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st {};
  if (fstat(f.fd, &st) != 0) throw FileRefused(path, std::string("cannot be examined: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw FileRefused(path, "is " + file_kind(st.st_mode) + ", not a regular file");
  if (uint64_t(st.st_size) > opt.max_bytes)
    throw FileRefused(path, "holds " + std::to_string(st.st_size) + " bytes, more than the " +
                                std::to_string(opt.max_bytes) + " a file of its kind can need");
  std::string out;
  out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    if (opt.deadline && std::chrono::steady_clock::now() > *opt.deadline)
      throw FileRefused(path, "timed out while reading it");
    const ssize_t n = read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FileRefused(path, std::string("cannot be read: ") + std::strerror(errno));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
    if (out.size() > opt.max_bytes)
      throw FileRefused(path, "grew past " + std::to_string(opt.max_bytes) + " bytes while being read");
  }
  return out;
}

}  // namespace dsa

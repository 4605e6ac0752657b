#include "core/tensor_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace dsa {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr std::align_val_t kSmallAlign{64};  // what a small block is aligned to (header)

size_t rounded_to_huge_pages(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// Freed large blocks by size, and the size of every block handed out (a block may be larger than
// the request it served). Process-wide; blocks kept are never given back before exit.
class BlockCache {
 public:
  static BlockCache& get() {
    static BlockCache* c = new BlockCache;  // never destroyed: tensors may be freed during exit
    return *c;
  }

  void* take(size_t bytes) {
    const size_t want = rounded_to_huge_pages(bytes);
    void* p = nullptr;
    size_t size = want;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // The smallest kept block that fits, if it wastes at most a quarter of itself.
      auto it = free_.lower_bound(want);
      if (it != free_.end() && it->first - want <= it->first / 4) {
        p = it->second;
        size = it->first;
        kept_ -= size;
        free_.erase(it);
      }
    }
    if (!p) {
      p = std::aligned_alloc(kHugePage, size);
      if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      // Advice only: where the kernel has no huge pages to give, the block keeps 4 KiB pages.
      madvise(p, size, MADV_HUGEPAGE);
#endif
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_[p] = size;
    return p;
  }

  void give(void* p) noexcept {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = live_.find(p);
    const size_t size = it->second;
    live_.erase(it);
    if (kept_ + size <= cap_) {
      try {
        free_.emplace(size, p);
        kept_ += size;
        return;
      } catch (...) {
      }
    }
    lock.unlock();
    std::free(p);
  }

  size_t kept() {
    std::lock_guard<std::mutex> lock(mu_);
    return kept_;
  }

 private:
  // At most an eighth of the host's memory, and 16 GiB, stays kept.
  BlockCache() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const size_t host = pages > 0 && page > 0 ? size_t(pages) * size_t(page) : size_t(8) << 30;
    cap_ = std::min(host / 8, size_t(16) << 30);
  }
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  std::unordered_map<void*, size_t> live_;
  size_t kept_ = 0, cap_ = 0;
};

}  // namespace

bool tensor_memory_plain() {
  static const bool plain = [] {
    const char* v = std::getenv("DSA_TENSOR_MEMORY");
    return v && std::string(v) == "plain";
  }();
  return plain;
}

void* tensor_allocate(size_t bytes) {
  if (bytes < kHugeBlockBytes || tensor_memory_plain()) return ::operator new(bytes, kSmallAlign);
  return BlockCache::get().take(bytes);
}

void tensor_deallocate(void* p, size_t bytes) noexcept {
  if (bytes < kHugeBlockBytes || tensor_memory_plain())
    ::operator delete(p, kSmallAlign);
  else
    BlockCache::get().give(p);
}

size_t tensor_blocks_kept() { return BlockCache::get().kept(); }

}  // namespace dsa

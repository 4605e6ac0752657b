// Where tensor values live. At production shapes a case allocates tens of gigabytes of fresh
// tensors (inputs, every backend output and both oracles', as doubles), and with 4 KiB pages the
// first touch of each is a page fault every 4 KiB: zero-filling 2 GiB took 11.8 s on a 2-core VM,
// 3.1 s with transparent huge pages. So blocks from kHugeBlockBytes up are 2 MiB aligned and
// marked MADV_HUGEPAGE (the kernel's default "madvise" mode then backs them with huge pages), and
// a freed one is kept for the next case's tensors of about its size (up to a cap), which then
// touch memory that is already mapped. Smaller blocks come from operator new. Every block is at
// least 64-byte aligned: Eigen's vectorized sums over a block (the reference's matrices live here,
// reference/rank.hpp Held) start at its first aligned element, so the rounding must not depend on
// where a run's block lands.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace dsa {

inline constexpr size_t kHugeBlockBytes = size_t(16) << 20;

void* tensor_allocate(size_t bytes);
void tensor_deallocate(void* p, size_t bytes) noexcept;
// DSA_TENSOR_MEMORY=plain: every block from operator new, no huge pages asked for (to measure what
// they are worth, or to rule them out). Read once.
bool tensor_memory_plain();
// Bytes of freed blocks kept for reuse now (what the cache holds beyond the live tensors).
size_t tensor_blocks_kept();

template <class T>
struct TensorAllocator {
  using value_type = T;
  TensorAllocator() = default;
  template <class U>
  TensorAllocator(const TensorAllocator<U>&) noexcept {}
  T* allocate(size_t n) {
    if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(tensor_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { tensor_deallocate(p, n * sizeof(T)); }
  // resize(n) and the size constructor default-initialize: numbers are left as the block holds
  // them, not zeroed. A production case's outputs are gigabytes that a conversion loop on every
  // core writes next; zeroing them first, on one thread, took longer than that loop. Code that
  // wants zeros says so (Tensor(shape), resize(n, 0)).
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  template <class U>
  bool operator==(const TensorAllocator<U>&) const noexcept { return true; }
};

}  // namespace dsa

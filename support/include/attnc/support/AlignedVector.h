//===- AlignedVector.h - std::vector on cache-line boundaries ---*- C++ -*-===//
//
// A std::vector whose elements start on a 64-byte boundary. glibc's malloc
// gives 16-byte alignment (a large block sits 16 bytes into its page), so a
// std::vector<float>'s 64-byte row slices straddle two cache lines: every
// 32- or 64-byte vector load of them is a split load. The kernels' scratch
// (Q^T, P^T, ...) is of this type; the tensors a framework passes are
// 64-byte aligned already.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_SUPPORT_ALIGNEDVECTOR_H
#define ATTNC_SUPPORT_ALIGNEDVECTOR_H

#include <cstddef>
#include <new>
#include <vector>

namespace attnc::support {

inline constexpr std::size_t kCacheLine = 64;

/// std::allocator's interface on operator new's aligned form.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() noexcept = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U> &) noexcept {}
  T *allocate(std::size_t count) {
    if (count > static_cast<std::size_t>(-1) / sizeof(T)) // (as std::allocator: no wrapped size)
      throw std::bad_array_new_length();
    return static_cast<T *>(::operator new(count * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T *p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kCacheLine}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U> &) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

} // namespace attnc::support

#endif // ATTNC_SUPPORT_ALIGNEDVECTOR_H

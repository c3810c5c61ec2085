// Owned, aligned, zero-initialised byte buffer. O_DIRECT needs 4 KiB alignment
// of address, offset and length; SIMD kernels want 64-byte alignment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace moe {

inline constexpr size_t kDirectIoAlign = 4096;

inline size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Allocates AlignUp(size, alignment) bytes; size() reports the requested size.
  explicit AlignedBuffer(size_t size, size_t alignment = kDirectIoAlign)
      : size_(size), capacity_(AlignUp(size == 0 ? 1 : size, alignment)) {
    void* p = std::aligned_alloc(alignment, capacity_);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, capacity_);
    data_.reset(static_cast<uint8_t*>(p));
  }
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace moe

// SPDX-License-Identifier: Apache-2.0
// Counting malloc and friends, process-wide, by defining them in the executable and
// forwarding to glibc's own entry points. See alloc_counter.h.
#include "alloc_counter.h"

#include <cerrno>
#include <cstddef>
#include <cstdlib>

#include <atomic>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#error "alloc_counter.cpp replaces malloc; sanitizers replace it too. Build the benchmarks without sanitizers."
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#error "alloc_counter.cpp replaces malloc; sanitizers replace it too. Build the benchmarks without sanitizers."
#endif
#endif

// glibc's allocator under its own names (exported by libc.so.6 for exactly this use).
extern "C" {
void* __libc_malloc(std::size_t size) noexcept;
void* __libc_calloc(std::size_t count, std::size_t size) noexcept;
void* __libc_realloc(void* pointer, std::size_t size) noexcept;
void* __libc_memalign(std::size_t alignment, std::size_t size) noexcept;
void* __libc_valloc(std::size_t size) noexcept;
void* __libc_pvalloc(std::size_t size) noexcept;
}

namespace {

// Zero-initialised before any code runs (constinit): malloc may be called before main and
// before any constructor of this file.
constinit std::atomic<std::uint64_t> g_calls{0};
constinit std::atomic<std::uint64_t> g_bytes{0};

void count(std::size_t bytes) noexcept {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  g_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace

namespace bench {

AllocCount alloc_count() noexcept {
  return {g_calls.load(std::memory_order_relaxed), g_bytes.load(std::memory_order_relaxed)};
}

}  // namespace bench

// Default visibility: shared libraries (libstdc++, hiredis, libuv, libc) must bind to these.
#define BENCH_EXPORT extern "C" __attribute__((visibility("default")))

BENCH_EXPORT void* malloc(std::size_t size) noexcept {
  count(size);
  return __libc_malloc(size);
}

BENCH_EXPORT void* calloc(std::size_t count_of, std::size_t size) noexcept {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count_of, size, &bytes)) bytes = SIZE_MAX;  // glibc refuses it; still a call
  count(bytes);
  return __libc_calloc(count_of, size);
}

BENCH_EXPORT void* realloc(void* pointer, std::size_t size) noexcept {
  if (pointer == nullptr || size != 0) count(size);  // realloc(p, 0) frees
  return __libc_realloc(pointer, size);
}

// glibc's own reallocarray calls its realloc internally, not through the symbol: wrapped so
// that its calls are counted (once, by the realloc below).
BENCH_EXPORT void* reallocarray(void* pointer, std::size_t count_of, std::size_t size) noexcept {
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(count_of, size, &bytes)) {
    errno = ENOMEM;
    return nullptr;
  }
  return realloc(pointer, bytes);
}

BENCH_EXPORT void* memalign(std::size_t alignment, std::size_t size) noexcept {
  count(size);
  return __libc_memalign(alignment, size);
}

BENCH_EXPORT void* aligned_alloc(std::size_t alignment, std::size_t size) noexcept {
  count(size);
  return __libc_memalign(alignment, size);  // glibc's aligned_alloc is the same function
}

BENCH_EXPORT int posix_memalign(void** out, std::size_t alignment, std::size_t size) noexcept {
  // What glibc checks: a power of two that is a multiple of sizeof(void*).
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0 || alignment == 0) return EINVAL;
  count(size);
  const int saved = errno;  // posix_memalign reports through its result, never errno
  void* memory = __libc_memalign(alignment, size);
  errno = saved;
  if (memory == nullptr) return ENOMEM;
  *out = memory;
  return 0;
}

BENCH_EXPORT void* valloc(std::size_t size) noexcept {
  count(size);
  return __libc_valloc(size);
}

BENCH_EXPORT void* pvalloc(std::size_t size) noexcept {
  count(size);
  return __libc_pvalloc(size);
}

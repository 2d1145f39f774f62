// SPDX-License-Identifier: Apache-2.0
// bench/alloc_counter.h — how many heap allocations this process made, every thread.
//
// alloc_counter.cpp defines malloc, calloc, realloc, reallocarray, aligned_alloc, memalign,
// posix_memalign, valloc and pvalloc in the benchmark executable. The dynamic linker binds
// every caller in the process to them (the executable comes first in symbol lookup): our
// code, libstdc++ (so global operator new, which allocates with malloc / aligned_alloc),
// hiredis (its reply objects, its reader buffer), libuv, OpenSSL, and glibc itself (strdup,
// getaddrinfo, ...). Each counts one call and the bytes asked for, then forwards to glibc's
// allocator (__libc_malloc and friends), so memory is still glibc's and free() needs no
// wrapper.
//
// Counted: every call of those functions from any thread, once each (operator new is not
// replaced, so it is counted once, through the malloc it calls). realloc and reallocarray
// count as one allocation per call whatever they do (grow, shrink or move), except a call
// that frees (size 0 with a pointer), which counts nothing.
// Not counted: free; memory from mmap/sbrk called directly (e.g. thread stacks); what the
// dynamic loader allocates before libc is relocated; allocations of other processes
// (redis-server).
//
// Not for sanitizer builds (ASan and TSan bring their own malloc): the file refuses to
// compile there.
#pragma once

#include <cstdint>

namespace bench {

struct AllocCount {
  std::uint64_t calls = 0;  // allocation calls
  std::uint64_t bytes = 0;  // bytes asked for by those calls
};

// Totals since the process started (all threads).
AllocCount alloc_count() noexcept;

}  // namespace bench

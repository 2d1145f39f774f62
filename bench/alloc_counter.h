// SPDX-License-Identifier: Apache-2.0
// bench/alloc_counter.h — how many times global operator new ran, process-wide.
//
// alloc_counter.cpp replaces the global operator new/delete of the benchmark binary with
// versions that count calls and bytes (relaxed atomics) and forward to malloc/free. Only C++
// allocations are counted: malloc calls made inside C libraries (hiredis reply objects,
// libuv) are not, and neither are allocations of other processes (redis-server).
#pragma once

#include <cstdint>

namespace bench {

struct AllocCount {
  std::uint64_t calls = 0;
  std::uint64_t bytes = 0;
};

// Totals since the process started (all threads).
AllocCount alloc_count() noexcept;

}  // namespace bench

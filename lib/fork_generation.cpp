// SPDX-License-Identifier: Apache-2.0
#include "detail/fork_generation.h"

#include <pthread.h>

#include <atomic>

namespace redlock::detail {
namespace {

std::atomic<std::uint64_t> generation{0};

void in_child() noexcept { generation.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

std::uint64_t fork_generation() noexcept {
  // Registered once, before the first Client exists: a fork before that has nothing to guard.
  static const bool registered = pthread_atfork(nullptr, nullptr, &in_child) == 0;
  (void)registered;
  return generation.load(std::memory_order_relaxed);
}

}  // namespace redlock::detail

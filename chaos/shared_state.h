// SPDX-License-Identifier: Apache-2.0
// chaos/shared_state.h — what the harness and its client processes share: one struct in
// MAP_SHARED memory, lock-free atomics only (processes never share a mutex).
#pragma once

#include <atomic>
#include <cstdint>

#include "config.h"

namespace redlock::chaos {

struct Slot {
  std::atomic<int> pid{0};
  std::atomic<int> inside{0};             // 1 while this client is inside the oracle
  std::atomic<std::int64_t> entered_ns{0};
};

struct Shared {
  std::atomic<bool> stop{false};
  std::atomic<long> grants{0};
  std::atomic<long> failures{0};
  std::atomic<long> live_conflicts{0};
  std::atomic<int> inside{0};        // the oracle: how many holders are inside now
  std::atomic<int> inside_last{-1};  // who entered last
  std::atomic<int> master_port{0};   // hiredis strategies: where clients go
  std::atomic<bool> long_hold{false};    // a grant made while this is set holds long_hold_ms
  std::atomic<long> long_hold_ms{0};
  std::atomic<bool> gate_closed{false};  // failover: clients do not try to acquire
  std::atomic<int> holding{0};           // failover: clients busy acquiring or holding
  std::atomic<bool> crash_next{false};   // setnx-expire: the next winner dies before EXPIRE
  std::atomic<int> crashed{-1};          // setnx-expire: which client did
  std::atomic<bool> proxy_stop{false};   // slow-minority: the proxy process returns
  std::atomic<std::int64_t> delay_ns[kMaxMasters]{};  // slow-minority: one-way delay per master
  Slot slots[kMaxWorkers];
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");
static_assert(std::atomic<int>::is_always_lock_free, "shared-memory atomics must be lock-free");
static_assert(std::atomic<long>::is_always_lock_free, "shared-memory atomics must be lock-free");

// Maps a zeroed Shared into MAP_SHARED anonymous memory (inherited by fork) and unmaps it.
class SharedMapping {
 public:
  SharedMapping();
  ~SharedMapping();
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  Shared& get() { return *shared_; }

 private:
  void* memory_ = nullptr;
  Shared* shared_ = nullptr;
};

}  // namespace redlock::chaos

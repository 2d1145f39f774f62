// SPDX-License-Identifier: Apache-2.0
// detail/lock_state.h — what a Client remembers about a lock it granted: which masters
// (in which incarnation) vouch for it, and whether it is known lost. Shared by the copies
// of a Lock (its private part) and the restart guard's list of live locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "detail/small_array.h"
#include "redlock/lock.h"

namespace redlock::detail {

class LeaseCore;

class LockState {
 public:
  explicit LockState(std::size_t masters) : epochs(masters, 0) {}

  // The ClientImpl (its id(): never reused, unlike its address once it is freed) that granted
  // the lock (acquire) or extended it from another Client's or an adopted Lock. Set once
  // before the Lock is handed out, read-only after (any thread). The deadline and the epochs
  // below mean something only on that Client.
  std::uint64_t granted_by = 0;

  // Any thread.
  std::atomic<bool> lost{false};

  // Loop thread only. Per master: the incarnation (Client-local epoch of its run_id) that
  // granted the lock, 0 if it did not. `votes` counts the non-zero entries.
  SmallArray<std::uint32_t> epochs;
  std::uint32_t votes = 0;
  // Called once when the restart guard sets `lost` (Leases hook it to learn at once). It
  // must not call back into the restart guard: it posts to the loop.
  std::function<void()> on_lost;
  // Loop thread only. The leases keeping this lock that on_lost tells; expired entries are
  // dropped whenever one is added, so it holds no more than the leases alive then.
  std::vector<std::weak_ptr<LeaseCore>> leases;
};

// The library's way into a Lock's private part.
struct LockAccess {
  static const std::shared_ptr<LockState>& state(const Lock& lock) noexcept { return lock.state_; }
  static void set_state(Lock& lock, std::shared_ptr<LockState> state) noexcept { lock.state_ = std::move(state); }
  static void set_adopted(Lock& lock, bool adopted) noexcept { lock.adopted_ = adopted; }
};

}  // namespace redlock::detail

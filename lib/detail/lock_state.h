// SPDX-License-Identifier: Apache-2.0
// detail/lock_state.h — what a Client remembers about a lock it granted: which masters
// (in which incarnation) vouch for it, and whether it is known lost. Shared by the copies
// of a Lock (its private part) and the restart guard's list of live locks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "detail/small_array.h"
#include "redlock/lease.h"
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
  // owner_of(key, token) of the lock this state was made for, set with granted_by: a Lock whose
  // public key or token were changed does not carry this state's word (ClientImpl::granted_here).
  std::uint64_t owner = 0;
  // Round::never_sent of the acquire that granted it, set with granted_by: the masters its
  // release is not sent to.
  std::uint64_t never_sent = 0;
  // Loop thread only. The masters (bit i: master i) that answered the lock's SET with BUSY or
  // LOADING (it did not run there; a late answer too): a release they answer so is not kept
  // for them (Round::on_reply), as nothing of the lock is there.
  std::uint64_t not_run = 0;
  // Loop thread only. The masters (bit i) that granted the lock's SET (a vote, in time or late:
  // Round::keep_late_grants). Not `epochs[i] != 0`: an epoch is 0 also where no run_id was ever
  // read (INFO denied, docs/permissions.md) and once the restart guard forgot a restarted
  // master's vote (review 70: a stand-in that read grants from the epochs kept no late BUSY
  // release with INFO denied, and 50 of 50 released locks' keys stayed on a quorum).
  std::uint64_t granted_on = 0;

  // Any thread.
  std::atomic<bool> lost{false};
  // Set when a release of the lock is submitted on the granting Client (any thread): from then
  // on the holder has given it up, whatever the release's outcome (remaining() is 0).
  std::atomic<bool> released{false};

  // The latest deadline (on the granting Client's validity clock) this Client granted the lock
  // (acquire, extend); raised on the loop thread, read anywhere. A Lock's public `deadline` is
  // the caller's copy: an edited one must not be believed (the Client uses the earlier of the
  // two: an older copy keeps its own).
  void raise_deadline(std::chrono::steady_clock::time_point to) noexcept {
    const auto ns = to.time_since_epoch().count();
    auto seen = deadline_ns_.load(std::memory_order_relaxed);
    while (seen < ns && !deadline_ns_.compare_exchange_weak(seen, ns, std::memory_order_release)) {
    }
  }
  [[nodiscard]] std::chrono::steady_clock::time_point deadline() const noexcept {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(deadline_ns_.load(std::memory_order_acquire)));
  }

  // Loop thread only. Per master: the incarnation (Client-local epoch of its run_id) that
  // granted the lock, 0 if it did not. `votes` counts the non-zero entries.
  SmallArray<std::uint32_t> epochs;
  std::uint32_t votes = 0;
  // Loop thread only. Marks the lock lost (every copy's Lock::lost() says so from now on) and,
  // the first time, calls on_lost: the restart guard left it below quorum (restarted), or an
  // extend found its key gone or another owner's on more than N - quorum masters (taken).
  void mark_lost(LossReason reason) {
    if (lost.load(std::memory_order_acquire)) return;
    lost_because_.store(reason, std::memory_order_relaxed);
    lost.store(true, std::memory_order_release);
    if (on_lost) on_lost(reason);
  }
  // Any thread, once `lost` reads true: why (mark_lost's reason).
  [[nodiscard]] LossReason lost_because() const noexcept { return lost_because_.load(std::memory_order_relaxed); }
  // Called by mark_lost (Leases hook it to learn at once). It must not call back into the
  // restart guard: it posts to the loop.
  std::function<void(LossReason)> on_lost;
  // Loop thread only. The leases keeping this lock that on_lost tells; expired entries are
  // dropped whenever one is added, so it holds no more than the leases alive then.
  std::vector<std::weak_ptr<LeaseCore>> leases;

 private:
  std::atomic<LossReason> lost_because_{LossReason::restarted};
  std::atomic<std::chrono::steady_clock::rep> deadline_ns_{std::chrono::steady_clock::time_point::min().time_since_epoch().count()};
};

// A digest of a lock's key and token (not a secret: it only tells a state which Lock it was
// made for).
[[nodiscard]] inline std::uint64_t owner_of(std::string_view key, std::string_view token) noexcept {
  const std::uint64_t k = std::hash<std::string_view>{}(key);
  const std::uint64_t t = std::hash<std::string_view>{}(token);
  return k ^ (t + 0x9e3779b97f4a7c15ULL + (k << 6) + (k >> 2));
}

// The library's way into a Lock's private part.
struct LockAccess {
  static const std::shared_ptr<LockState>& state(const Lock& lock) noexcept { return lock.state_; }
  static void set_state(Lock& lock, std::shared_ptr<LockState> state) noexcept { lock.state_ = std::move(state); }
  static void set_adopted(Lock& lock, bool adopted) noexcept { lock.adopted_ = adopted; }
};

}  // namespace redlock::detail

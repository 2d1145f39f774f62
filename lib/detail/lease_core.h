// SPDX-License-Identifier: Apache-2.0
// detail/lease_core.h — the shared inside of a redlock::Lease (include/redlock/lease.h): the
// lock being kept, its renewal and loss timers on the Client's event loop, and the loss signal.
//
// Shared, not owned by the Lease handle: a renewal in flight, a timer and a posted task each
// hold a shared_ptr, so a Lease destroyed (or a Client shut down) while a renewal is in flight
// leaves them a live object that is merely stopped. The Client keeps only weak_ptrs (to stop
// its leases when it shuts down); the lock's LockState keeps a weak_ptr in its list of leases.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>

#include "detail/event_loop.h"
#include "redlock/lease.h"
#include "redlock/options.h"

namespace redlock::detail {

class ClientImpl;

// What a lease does, from LeaseOptions and the Client's options (validated).
struct LeaseSettings {
  Milliseconds ttl{0};                   // of each renewal
  double renew_fraction = 1.0 / 3;       // of the granted lock's ttl, after its round was sent
  std::chrono::microseconds margin{0};   // loss is signalled at deadline - margin
  Milliseconds retry_after{0};           // a failed renewal is retried this much later (command_timeout)
  std::function<void(LossReason, const Lock&)> on_lost;
  std::function<void(const Result&)> on_renewed;
};

// Throws ConfigError naming the bad LeaseOptions value. `lock_ttl`: the kept lock's own ttl
// (the default renewal ttl); the margin and the checks use the shorter of it and the renewals'.
[[nodiscard]] LeaseSettings lease_settings(const ClientOptions& client, Milliseconds lock_ttl,
                                           const LeaseOptions& options);

class LeaseCore : public std::enable_shared_from_this<LeaseCore> {
 public:
  // Any thread (Client::keep): validates, builds and hands the lease to the loop.
  static std::shared_ptr<LeaseCore> keep(ClientImpl& client, Lock lock, const LeaseOptions& options);

  LeaseCore(ClientImpl& client, Lock lock, LeaseSettings settings);

  // Any thread. active(): neither released, stopped nor known lost (the flags the loop acts on).
  [[nodiscard]] bool active() const noexcept {
    return !lost_.load(std::memory_order_acquire) && !stopped_.load(std::memory_order_acquire);
  }
  // Any thread: lost, or the Lock released through another copy (taken), or the validity clock
  // has reached deadline - margin. The loop may be
  // late to run the loss timer (a callback that blocks, a flood of input to read), and the
  // holder must never hear "held" past that moment. The first caller to see the moment pass
  // declares the loss (LossReason::deadline); the loop then requests stop and calls on_lost
  // when it gets there. Nothing is renewed after the declaration.
  [[nodiscard]] bool lost() noexcept;
  [[nodiscard]] std::optional<LossReason> loss() const;
  [[nodiscard]] std::stop_token stop_token() const noexcept { return stop_.get_token(); }
  [[nodiscard]] Lock lock() const;
  // Stops renewal, then releases (also after a loss). `done` may be empty.
  void release(Callback done);
  // Loop thread: begins the release asked for by release(), unless it has begun (its task or
  // the Client's shutdown, whichever runs first).
  void begin_release(ClientImpl& client);
  // Runs `task` on the Client's loop; false when the Client is gone or closing.
  bool post(EventLoop::Task task);
  [[nodiscard]] bool on_loop_thread() const;
  // This process is a child of a fork() made after the lease's Client was: the lease is the
  // parent's, and nothing of it may be touched here (the parent's loop thread may have held
  // mutex_ at the fork; the child then waited for ever). Lease answers as if it held nothing.
  // (A lease kept in the child on such a Client is the parent's too: nothing renews it here.)
  [[nodiscard]] bool forked() const noexcept { return made_before_fork(generation_); }

  // Loop thread. start(): the Client registered it (arms the timers, hooks the restart guard).
  // client_gone(): the Client is shutting down: stop, request stop, never touch it again.
  void start();
  void client_gone();

 private:
  void arm();                         // timers for the current lock_
  void renew();
  void renewed(Result result);
  void signal_loss(LossReason reason);  // loop thread: declare (unless declared) and announce
  // Any thread: records the loss once; true for the call that recorded it, with the lock as of
  // then. With `only_if_due`, only once it is due: the Lock released through another copy
  // (then `reason` becomes taken), or the validity clock at deadline - margin.
  bool declare_loss(LossReason& reason, Lock& lock, bool only_if_due);
  void announce_loss(LossReason reason, const Lock& lock);  // loop thread
  void cancel_timers(EventLoop& loop) noexcept;
  void cancel_release();  // the release cannot begin (the Client is gone): done gets cancelled
  // Loop time (now_ns) of an instant on the Client's validity clock.
  [[nodiscard]] static std::uint64_t loop_time_of(const ClientImpl& client, std::chrono::steady_clock::time_point at);
  // The Client, if it is still there (loop thread: it cannot go away while we run).
  [[nodiscard]] ClientImpl* client() const;

  const LeaseSettings settings_;
  const std::uint64_t generation_;  // the Client's loop's (EventLoop::generation)
  std::stop_source stop_;
  std::atomic<bool> lost_{false};
  std::atomic<bool> stopped_{false};  // released, or the Client gone

  mutable std::mutex mutex_;
  ClientImpl* client_;                // guarded by mutex_; null once the Client shut down
  Lock lock_;                         // guarded by mutex_; as of the last grant
  std::optional<LossReason> loss_;    // guarded by mutex_
  bool released_ = false;             // guarded by mutex_
  Callback release_done_;             // guarded by mutex_; taken by whoever begins or cancels it
  std::atomic<bool> release_begun_{false};

  // Loop thread only.
  EventLoop::TimerId renew_timer_ = 0;
  EventLoop::TimerId loss_timer_ = 0;
  bool in_flight_ = false;
};

}  // namespace redlock::detail

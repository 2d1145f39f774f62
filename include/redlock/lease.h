// SPDX-License-Identifier: Apache-2.0
// redlock/lease.h — a held lock renewed in the background until released, that tells its
// holder it is lost before its validity deadline.
//
//   redlock::Result r = client.acquire("jobs/nightly");
//   if (r) {
//     redlock::Lease lease = client.keep(*r.lock);  // renews on the Client's event loop
//     work(lease.stop_token());                     // stop when stop is requested
//   }                                               // ~Lease: stops renewing, releases
//
// Renewal. After each grant (the acquire, then every successful renewal) the lease extends
// the lock once renew_fraction * ttl has passed since that grant's round was sent, through
// the same extend as Client::extend: a quorum compare-and-PEXPIRE that never recreates a
// missing key and never shortens a master's PTTL, so the lock's deadline only moves later.
// A renewal that fails without proving the lock lost (a timeout, masters unreachable, an
// answer too late) is retried every command_timeout while the deadline minus loss_margin has
// not come. No renewal is sent once that moment, or a loss, or a release has come: each
// renewal checks on the loop, in the step that sends it, that the lease is neither lost nor
// released and that deadline - loss_margin is still ahead; a late loop signals the loss
// (LossReason::deadline) instead. ("Sent" is handed to the connections: a renewal queued just
// before that moment may still run on the masters after it, see docs/leases.md.)
//
// Loss. The lease is lost, and says so once, when
//   - a renewal (or any extend of the Lock on this Client) finds the key gone or held by another
//     owner on enough masters that no quorum can hold it, or the Lock is released through another
//     copy (Client::release, another Lease; lost() says so from the release's submission; for
//     a copy rebuilt by Client::adopt on the granting Client, once the release begins on its
//     loop) (LossReason::taken);
//   - the restart guard learns that masters which granted the lock restarted without their
//     keys, or were made replicas (a resync replaces their keys), leaving fewer than a quorum
//     (LossReason::restarted; told at once, not at the next renewal);
//   - deadline - loss_margin arrives without a successful renewal (LossReason::deadline).
// Then, on the Client's loop thread and in this order: stop is requested on stop_token()
// (std::stop_callbacks registered on it run there and then; on a caller's loop one may destroy
// the Client, as a completion callback may), and on_lost is called (at most once). lost() and loss() say so from then
// on, on any thread. Each signal is raised before the lock's deadline: the deadline case by loss_margin, the others as
// soon as the Client knows, provided the loop thread runs the lease's timer within the margin: stop and on_lost come
// as late as the loop does (a callback that blocks; a review saw on_lost up to 96 ms after the deadline with a 100 ms
// margin while thousands of keys with waiters on the same Client were flooded with release announcements). lost()
// asked on the holder's own thread does not wait for the loop. docs/leases.md gives the timing argument and what the
// margin must cover.
//
// Defaults. renew_fraction 1/3; ttl: the lock's own. loss_margin: max(2 * command_timeout,
// ttl / 10), but never more than half of the time between the first renewal and the deadline
// (ttl - drift - renew_fraction * ttl), so that at least half of that time is left for
// renewal attempts. Client::keep throws ConfigError naming the value when renew_fraction is
// not in (0, 1), the ttl is refused by the Client (Client::extend's rules), a given
// loss_margin is not positive, or renew_fraction * ttl + loss_margin is not below
// ttl - drift (the first renewal would come after the loss signal). Where the kept lock's
// ttl and LeaseOptions::ttl differ, "ttl" above is the shorter of the two.
//
// Fencing: the lock's token and fence stay the same across renewals.
//
// Clients. A Lock is kept by the Client that granted it (acquired it, or extended it from an
// adopted Lock or another Client's): its deadline is on that Client's validity clock
// (ClientOptions::clock). Client::keep throws UsageError naming the resource for a Lock
// granted by another Client: extend it on this Client first and keep the extend's Lock.
//
// Threading. Every member function is thread-safe. release() blocks (UsageError on the loop
// thread, like Client::release); release_async and the destructor never block, so a Lease may
// be created and destroyed inside callbacks on the loop thread. Destroying the Client stops its
// live leases: renewal ends and stop is requested (lost() stays false and on_lost is not
// called: the lock is simply no longer kept; its keys expire at their ttl).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>

#include "redlock/lock.h"
#include "redlock/options.h"
#include "redlock/result.h"

namespace redlock {

namespace detail {
class LeaseCore;
}

using Callback = std::function<void(Result)>;

enum class LossReason {
  taken,      // a renewal found the key gone or another owner's token on a quorum, or the Lock
              // released through another copy of it (Client::release, another Lease)
  restarted,  // restart guard: masters that granted it restarted (or became replicas); below
              // quorum now (Lock::lost())
  deadline,   // deadline - loss_margin arrived without a successful renewal
};

[[nodiscard]] std::string_view to_string(LossReason reason) noexcept;

struct LeaseOptions {
  // Renew when this fraction of the ttl has passed since the last grant. In (0, 1).
  double renew_fraction = 1.0 / 3;
  // Signal loss this long before the deadline. Default: max(2 * command_timeout, ttl / 10),
  // capped at half of (ttl - drift - renew_fraction * ttl). Must cover the holder's time to
  // stop its work after the signal, plus the loop's delay in running the timer.
  std::optional<Milliseconds> loss_margin;
  // Ttl of each renewal (default: the lock's ttl).
  std::optional<Milliseconds> ttl;
  // Called on the loop thread, at most once, before the deadline when the loop is not held
  // up past loss_margin (see "Loss" above). Must not block; its
  // exceptions are caught and discarded.
  // It must not destroy the Client.
  std::function<void(LossReason, const Lock&)> on_lost;
  // Called on the loop thread after each successful renewal, with that extend's Result
  // (result.lock holds the new deadline; lock() already returns it). Never called after a
  // loss or a release. Must not block; its exceptions are caught and discarded. It must not
  // destroy the Client.
  std::function<void(const Result&)> on_renewed;
};

// Move-only handle on a lease: destroying it stops renewal and releases.
// fork(): a Lease belongs to the process of its Client (which renews it). In a child it holds
// nothing: false, no loss, a default lock(), release() answers `cancelled` saying why, and its
// destructor touches nothing; the parent keeps the lease. A std::stop_callback registered
// before the fork on its stop_token() must not be destroyed in the child (_exit, or leave it):
// libstdc++'s destructor waits for a callback the parent's loop thread may have been running,
// and no such thread exists there (review 71: 22 to 25 of 200 children hung, callbacks of 2 ms).
class Lease {
 public:
  Lease() = default;  // holds nothing
  ~Lease();           // stops renewal and releases asynchronously (best effort, never throws)
  Lease(Lease&& other) noexcept = default;
  Lease& operator=(Lease&& other) noexcept;  // releases what this one held first
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;

  // Started and neither released nor lost (nor its Client destroyed).
  explicit operator bool() const noexcept;
  // lost() (and operator bool) also read the validity clock while the Client exists: from
  // deadline - loss_margin on they say "lost" (LossReason::deadline) even while the Client's
  // loop is too busy to run the loss timer (a blocking callback, a flood of input); the loop
  // requests stop and calls on_lost when it gets there. The holder that asks never hears
  // "held" past that moment. (Once the Client is destroyed, lost() stays false: stop was
  // requested and operator bool is false.)
  [[nodiscard]] bool lost() const noexcept;
  [[nodiscard]] std::optional<LossReason> loss() const;
  // Stop is requested at loss, at release and when the Client is destroyed. A default
  // Lease's token can never be stopped.
  [[nodiscard]] std::stop_token stop_token() const noexcept;
  // The lock as of the last successful renewal (its deadline moves on; token and fence do
  // not). A default Lease returns a default Lock.
  [[nodiscard]] Lock lock() const;
  [[nodiscard]] std::chrono::steady_clock::time_point deadline() const;

  // Stops renewal, then releases on every master (Client::release), also after a loss (the
  // compare-and-delete only removes our own token). Blocks; UsageError on the loop thread.
  // A second release, or a release of a default Lease, returns Outcome::invalid_argument;
  // after the Client is gone, Outcome::cancelled.
  Result release();
  // The same without blocking; `done` is called exactly once, on the loop thread (or at once
  // on this thread when the Client is gone or nothing is held).
  void release_async(Callback done);

 private:
  friend class Client;
  explicit Lease(std::shared_ptr<detail::LeaseCore> core) : core_(std::move(core)) {}
  std::shared_ptr<detail::LeaseCore> core_;
};

}  // namespace redlock

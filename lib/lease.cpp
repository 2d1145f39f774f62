// SPDX-License-Identifier: Apache-2.0
// redlock::Lease and its shared inside (detail/lease_core.h): renewal through the Client's
// extend on the Client's event loop, and the loss signal (include/redlock/lease.h,
// docs/leases.md).
#include "detail/lease_core.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <string>

#include "detail/client_impl.h"
#include "detail/lock_state.h"
#include "detail/loop_time.h"
#include "detail/ms_text.h"
#include "detail/sweep.h"
#include "detail/validation.h"
#include "redlock/client.h"
#include "redlock/errors.h"

namespace redlock {

namespace detail {

using std::chrono::microseconds;

namespace {

Result refused(Outcome outcome, std::string message) {
  Result result;
  result.outcome = outcome;
  result.message = std::move(message);
  return result;
}

std::string ms_of(Milliseconds value) { return std::to_string(value.count()) + " ms"; }

}  // namespace

LeaseSettings lease_settings(const ClientOptions& client, Milliseconds lock_ttl, const LeaseOptions& options) {
  LeaseSettings settings;
  settings.ttl = options.ttl.value_or(lock_ttl);
  if (auto why = check_ttl(client, settings.ttl)) throw ConfigError("LeaseOptions." + *why);
  if (client.restart_guard && client.max_lock_ttl.count() > 0 && settings.ttl > client.max_lock_ttl) {
    throw ConfigError("LeaseOptions.ttl " + ms_of(settings.ttl) + " exceeds max_lock_ttl " +
                      ms_of(client.max_lock_ttl) + ", which the restart guard waits out");
  }
  const double fraction = options.renew_fraction;
  if (!(fraction > 0.0 && fraction < 1.0)) {
    throw ConfigError("LeaseOptions.renew_fraction must be in (0, 1) (got " + std::to_string(fraction) + ")");
  }
  settings.renew_fraction = fraction;
  // From the first renewal to the deadline: the time renewal attempts have, margin included.
  // The shorter of the kept lock's ttl and the renewals' decides (the first grant is the lock's).
  const Milliseconds shorter = lock_ttl.count() > 0 ? std::min(lock_ttl, settings.ttl) : settings.ttl;
  const microseconds ttl = shorter;
  const auto drift = drift_for(shorter, client.drift_factor, client.drift_constant);
  const auto renew_after = microseconds(static_cast<microseconds::rep>(std::ceil(fraction * static_cast<double>(ttl.count()))));
  const microseconds room = ttl - drift - renew_after;
  if (room <= microseconds{0}) {
    throw ConfigError("LeaseOptions.renew_fraction " + std::to_string(fraction) + " of ttl " + ms_of(shorter) +
                      " renews after " + ms_text(renew_after) + ", not before the deadline (ttl - drift allowance " +
                      ms_text(drift) + ")");
  }
  if (options.loss_margin) {
    const microseconds margin = *options.loss_margin;
    if (margin <= microseconds{0}) {
      throw ConfigError("LeaseOptions.loss_margin must be positive (got " + ms_of(*options.loss_margin) + ")");
    }
    if (margin >= room) {
      throw ConfigError("LeaseOptions.loss_margin " + ms_of(*options.loss_margin) +
                        " leaves no time to renew: the first renewal comes " + ms_text(room) +
                        " before the deadline (ttl " + ms_of(shorter) + " - drift allowance " + ms_text(drift) +
                        " - renew_fraction * ttl)");
    }
    settings.margin = margin;
  } else {
    const microseconds wanted = std::max<microseconds>(2 * client.command_timeout, ttl / 10);
    settings.margin = std::min(wanted, room / 2);
  }
  settings.retry_after = client.command_timeout;
  settings.on_lost = options.on_lost;
  settings.on_renewed = options.on_renewed;
  return settings;
}

std::shared_ptr<LeaseCore> LeaseCore::keep(ClientImpl& client, Lock lock, const LeaseOptions& options) {
  if (lock.key.empty() || lock.token.empty()) {
    throw UsageError("Client::keep: the Lock has no key or token (was it default-constructed?)");
  }
  if (lock.adopted()) {
    throw UsageError("Client::keep: the Lock of '" + lock.resource +
                     "' was adopted and its validity is unknown here; extend it once and keep the extend's Lock");
  }
  if (!client.granted_here(lock)) {
    throw UsageError("Client::keep: the Lock of '" + lock.resource +
                     "' was granted by another Client (its deadline is on that Client's clock); adopt or extend "
                     "it on this Client first and keep the extend's Lock");
  }
  auto settings = lease_settings(client.options(), lock.ttl, options);
  lock.deadline = client.deadline_of(lock);  // an edited copy's is not believed
  auto core = std::make_shared<LeaseCore>(client, std::move(lock), std::move(settings));
  if (!client.loop().post([&client, core] { client.keep_lease(core); })) core->client_gone();
  return core;
}

LeaseCore::LeaseCore(ClientImpl& client, Lock lock, LeaseSettings settings)
    : settings_(std::move(settings)),
      generation_(client.loop().generation()),
      client_(&client),
      lock_(std::move(lock)) {}

std::optional<LossReason> LeaseCore::loss() const {
  const std::lock_guard guard(mutex_);
  return loss_;
}

Lock LeaseCore::lock() const {
  const std::lock_guard guard(mutex_);
  return lock_;
}

bool LeaseCore::post(EventLoop::Task task) {
  const std::lock_guard guard(mutex_);
  // While client_ is set the Client has not closed its loop (it clears client_ first); a post
  // it refuses (its shutdown has begun) returns false.
  return client_ != nullptr && client_->loop().post(std::move(task));
}

bool LeaseCore::on_loop_thread() const {
  const std::lock_guard guard(mutex_);
  return client_ != nullptr && client_->loop().in_loop_thread();
}

ClientImpl* LeaseCore::client() const {
  const std::lock_guard guard(mutex_);
  return client_;
}

std::uint64_t LeaseCore::loop_time_of(const ClientImpl& client, std::chrono::steady_clock::time_point at) {
  const auto now_loop = now_ns();
  const auto left = at - client.clock().now();
  if (left <= std::chrono::steady_clock::duration::zero()) return now_loop;
  return deadline_after(now_loop, static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(left).count()));
}

void LeaseCore::start() {
  ClientImpl* const client = this->client();
  if (client == nullptr || !active()) return;
  Lock lock = this->lock();
  // The restart guard tells us at once (on the loop thread) when it marks the lock lost: one
  // hook per lock, over the leases alive on it. (A hook per keep(), each wrapping the one
  // before, grew without bound with keeps of one Lock, and running or destroying the chain
  // recursed once per keep: AttackLeaseTest.KeepingOneLockManyTimesDoesNotChainHooks.)
  if (const auto& state = LockAccess::state(lock)) {
    std::erase_if(state->leases, [](const std::weak_ptr<LeaseCore>& lease) { return lease.expired(); });
    state->leases.push_back(weak_from_this());
    if (!state->on_lost) {
      // Declared here, in the step that marks the Lock lost (a holder's lost() agrees with
      // Lock::lost() at once); announced in a task of its own (on_lost may call back in).
      state->on_lost = [owner = state.get()](LossReason reason) {  // the hook lives in the state it reads
        for (const auto& weak : owner->leases) {
          auto lease = weak.lock();
          Lock lost;
          LossReason said = reason;
          if (lease && lease->declare_loss(said, lost, false)) {
            lease->post([lease, lost, reason] { lease->announce_loss(reason, lost); });
          }
        }
      };
    }
  }
  if (lock.lost()) {  // restarted, or taken (an extend found it gone): as marked
    signal_loss(LockAccess::state(lock)->lost_because());
    return;
  }
  if (client->given_up(lock)) {  // released (through any copy): the keys are gone or going
    signal_loss(LossReason::taken);
    return;
  }
  arm();
}

void LeaseCore::arm() {
  ClientImpl* const client = this->client();
  if (client == nullptr || !active()) return;
  cancel_timers(client->loop());
  const Lock lock = this->lock();
  const auto now = client->clock().now();
  const auto loss_at = lock.deadline - settings_.margin;
  if (loss_at <= now) {
    signal_loss(LossReason::deadline);
    return;
  }
  auto self = shared_from_this();
  loss_timer_ = client->loop().schedule_at(loop_time_of(*client, loss_at), [self] {
    self->loss_timer_ = 0;
    self->signal_loss(LossReason::deadline);
  });
  const auto renew_after = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double, std::milli>(settings_.renew_fraction * static_cast<double>(lock.ttl.count())));
  auto renew_at = lock.started + renew_after;
  if (renew_at >= loss_at) renew_at = now;  // a lock kept late: renew now, while validity remains
  renew_timer_ = client->loop().schedule_at(loop_time_of(*client, renew_at), [self] {
    self->renew_timer_ = 0;
    self->renew();
  });
}

void LeaseCore::renew() {
  ClientImpl* const client = this->client();
  if (client == nullptr || !active() || in_flight_) return;
  // Checked and sent in one step on the loop: a late loop may run this timer in the same pass
  // as the loss timer, or past deadline - margin; then the loss is signalled and nothing is
  // sent (a renewal after the signal would keep the keys a full ttl for a holder told to stop).
  Lock lock = this->lock();
  if (client->clock().now() >= lock.deadline - settings_.margin) {
    signal_loss(LossReason::deadline);
    return;
  }
  in_flight_ = true;
  const auto loss_moment = lock.deadline - settings_.margin;
  client->extend_now(std::move(lock), [self = shared_from_this()](Result result) { self->renewed(std::move(result)); },
                     settings_.ttl, loss_moment);
}

void LeaseCore::renewed(Result result) {
  in_flight_ = false;
  ClientImpl* const client = this->client();
  if (client == nullptr || !active()) return;  // released, lost or the Client gone meanwhile: nothing to do
  if (result.outcome == Outcome::extended && result.lock) {
    {
      const std::lock_guard guard(mutex_);
      // A holder's lost() may have declared the loss since active() above: the lock stays as
      // it was when the loss was declared (what on_lost gets, and lock()/deadline() report).
      if (loss_ || stopped_.load(std::memory_order_acquire)) return;
      lock_ = *result.lock;
    }
    arm();  // may find the new deadline already too close and signal the loss
    if (settings_.on_renewed && active()) {
      try {
        settings_.on_renewed(result);
      } catch (...) {
      }
    }
    return;
  }
  // Marked lost: by the restart guard, or by an extend that found it gone (this renewal's own,
  // whose mark already declared the loss as taken through the hook). An extend of a lost lock
  // is refused.
  if (const Lock held = this->lock(); held.lost()) {
    signal_loss(LockAccess::state(held)->lost_because());
    return;
  }
  if (client->given_up(this->lock())) {  // released through another copy (its extend is refused)
    signal_loss(LossReason::taken);
    return;
  }
  // Taken only when so many masters answered "no key" or "another owner" that no quorum can
  // hold it. (The extend's Outcome::lost also covers one such answer against one timeout,
  // where the lock may still stand: that is retried like any failed renewal.)
  const auto gone = result.count(MasterStatus::not_found) + result.count(MasterStatus::held_by_other);
  if (result.outcome == Outcome::lost && gone > client->size() - client->quorum()) {
    signal_loss(LossReason::taken);
    return;
  }
  // Not proof of loss (timeouts, masters unreachable, a quorum answering too late): again
  // shortly, while the loss signal's moment has not come (its timer stays armed).
  const auto retry_at = deadline_after(now_ns(), settings_.retry_after);
  const auto loss_at = loop_time_of(*client, this->lock().deadline - settings_.margin);
  if (retry_at >= loss_at) return;
  renew_timer_ = client->loop().schedule_at(retry_at, [self = shared_from_this()] {
    self->renew_timer_ = 0;
    self->renew();
  });
}

bool LeaseCore::declare_loss(LossReason& reason, Lock& lock, bool only_if_due) {
  const std::lock_guard guard(mutex_);
  if (loss_ || stopped_.load(std::memory_order_acquire) || client_ == nullptr) return false;
  if (only_if_due) {
    // Released through another copy (Client::release, another Lease: the state is shared by
    // the copies): taken, from the moment the release was submitted (a review: the holder heard
    // "held" until the next renewal while another Client was granted).
    const auto& state = LockAccess::state(lock_);
    if (state && state->lost.load(std::memory_order_acquire)) {
      // Marked lost by the loop, which declares it to each Lease in turn: a holder asking in
      // between hears it from the Lock (review 46).
      reason = state->lost_because();
    } else if (state && state->released.load(std::memory_order_acquire)) {
      reason = LossReason::taken;
    } else if (client_->clock().now() < lock_.deadline - settings_.margin) {
      // Checked under the mutex, with the deadline of the last grant (a renewal the loop just
      // read moves it; declared against the old one, the loss would be needless).
      return false;
    }
  }
  loss_ = reason;
  lost_.store(true, std::memory_order_release);
  lock = lock_;
  return true;
}

bool LeaseCore::lost() noexcept {
  if (lost_.load(std::memory_order_acquire)) return true;
  if (stopped_.load(std::memory_order_acquire)) return false;
  try {
    Lock lock;
    // Declared here, announced by the loop (stop callbacks and on_lost run there). post()
    // reaches the loop only while the Client is there (under the mutex); if it is closing, the
    // post is refused and client_gone() requests stop instead.
    LossReason reason = LossReason::deadline;
    if (declare_loss(reason, lock, true)) {
      (void)post([self = shared_from_this(), lock, reason] { self->announce_loss(reason, lock); });
    }
  } catch (...) {
    // A clock or a post that threw: the flag below still says what was declared.
  }
  return lost_.load(std::memory_order_acquire);
}

void LeaseCore::signal_loss(LossReason reason) {
  Lock lock;
  if (declare_loss(reason, lock, false)) announce_loss(reason, lock);
}

void LeaseCore::announce_loss(LossReason reason, const Lock& lock) {
  ClientImpl* const client = this->client();
  // A loss a holder's lost() declared just before the Client closed is announced by the
  // close's drain: stop is requested (as at any Client shutdown), on_lost is not called.
  if (client == nullptr) {
    stop_.request_stop();
    return;
  }
  cancel_timers(client->loop());
  // Stop callbacks run here; one may destroy the Client (on a caller's loop), as a completion
  // callback may. Outside such a scope ~Client freed the Client while this timer pass (or
  // task) was still running on its loop.
  client->run_as_callback([&] {
    stop_.request_stop();
    if (settings_.on_lost) {
      try {
        settings_.on_lost(reason, lock);
      } catch (...) {
      }
    }
  });
}

void LeaseCore::cancel_timers(EventLoop& loop) noexcept {
  if (renew_timer_ != 0) loop.cancel(std::exchange(renew_timer_, 0));
  if (loss_timer_ != 0) loop.cancel(std::exchange(loss_timer_, 0));
}

void LeaseCore::release(Callback done) {
  Lock lock;
  bool posted = false;
  bool twice = false;
  {
    const std::lock_guard guard(mutex_);
    twice = released_;
    released_ = true;
    stopped_.store(true, std::memory_order_release);
    lock = lock_;
    if (!twice) release_done_ = std::move(done);
    // While client_ is set the Client has not begun to shut down. Its task begins the release
    // on the loop (release_now: queued at once, so the shutdown's close writes it). A shutdown
    // may still run before the task (a ~Client on a caller's loop or in a callback runs it at
    // once; on the Client's own loop it is posted behind this): it begins the releases noted
    // here first (begin_lease_releases), and whichever comes first begins it.
    if (!twice && client_ != nullptr) {
      try {
        client_->note_lease_release(shared_from_this());
      } catch (...) {  // bad_alloc: the task alone begins it (inside ~Lease, nothing may throw)
      }
      posted = client_->loop().post([self = shared_from_this()] {
        if (ClientImpl* const client = self->client()) {
          self->begin_release(*client);
        } else {
          self->cancel_release();
        }
      });
    }
  }
  stop_.request_stop();
  if (twice) {
    call_user(done, refused(Outcome::invalid_argument, "the lease of '" + lock.resource + "' was already released"));
  } else if (!posted) {
    cancel_release();
  }
}

void LeaseCore::begin_release(ClientImpl& client) {
  if (release_begun_.exchange(true, std::memory_order_acq_rel)) return;
  Lock lock;
  Callback done;
  {
    const std::lock_guard guard(mutex_);
    lock = lock_;
    done = std::move(release_done_);
  }
  cancel_timers(client.loop());
  client.release_now(std::move(lock), std::move(done));
}

void LeaseCore::cancel_release() {
  if (release_begun_.exchange(true, std::memory_order_acq_rel)) return;
  Callback done;
  {
    const std::lock_guard guard(mutex_);
    done = std::move(release_done_);
  }
  call_user(done, refused(Outcome::cancelled, "the client is shutting down"));
}

void LeaseCore::client_gone() {
  ClientImpl* client = nullptr;
  {
    const std::lock_guard guard(mutex_);
    client = std::exchange(client_, nullptr);
    stopped_.store(true, std::memory_order_release);
  }
  if (client != nullptr) cancel_timers(client->loop());
  stop_.request_stop();
}

// --- ClientImpl's side.

void ClientImpl::keep_lease(const std::shared_ptr<LeaseCore>& lease) {
  if (shutting_down_) {
    lease->client_gone();
    return;
  }
  sweep_when_doubled(leases_, leases_sweep_at_, 64, [](const std::weak_ptr<LeaseCore>& weak) { return weak.expired(); });
  leases_.push_back(lease);
  lease->start();
  arm_sleep_check();
}

// A machine that slept (suspend to RAM or disk): the validity clock (SteadyClock reads
// CLOCK_BOOTTIME) counted the sleep, the loop's timers (CLOCK_MONOTONIC) did not, so each
// lease's loss and renewal timers would run late by the time slept, and on_lost with them
// (a holder that asks lost() hears it at once anyway). Looked at once a second while leases
// live: when the validity clock moved further than the loop's clock since the last look, every
// lease checks its loss moment now (LeaseCore::lost declares a loss that is due and posts its
// announcement). LeaseTest.OnLostComesWithinASecondWhenTheValidityClockJumpsPastTheDeadline.
constexpr std::chrono::milliseconds kSleepCheckInterval{1000};
constexpr std::chrono::milliseconds kSleepCheckSlack{10};

void ClientImpl::arm_sleep_check() {
  if (sleep_check_timer_ != 0 || shutting_down_) return;
  sleep_check_validity_ = clock().now();
  sleep_check_loop_ns_ = now_ns();
  sleep_check_timer_ = loop_->schedule_after(kSleepCheckInterval, [this] { check_for_sleep(); });
}

void ClientImpl::check_for_sleep() {
  sleep_check_timer_ = 0;
  std::erase_if(leases_, [](const std::weak_ptr<LeaseCore>& weak) { return weak.expired(); });
  if (leases_.empty()) return;  // keep_lease arms it again
  const auto validity_moved = clock().now() - sleep_check_validity_;
  const auto loop_moved = std::chrono::nanoseconds(now_ns() - sleep_check_loop_ns_);
  if (validity_moved - loop_moved > kSleepCheckSlack) {
    for (const auto& weak : leases_) {
      if (auto lease = weak.lock()) (void)lease->lost();
    }
  }
  arm_sleep_check();
}

void ClientImpl::note_lease_release(const std::shared_ptr<LeaseCore>& lease) {
  const std::lock_guard guard(releasing_mutex_);
  sweep_when_doubled(releasing_, releasing_sweep_at_, 64,
                     [](const std::weak_ptr<LeaseCore>& weak) { return weak.expired(); });
  releasing_.push_back(lease);
}

// LeaseTest.ALeaseDestroyedJustBeforeItsClientOnACallersLoopStillReleases.
void ClientImpl::begin_lease_releases() {
  std::vector<std::weak_ptr<LeaseCore>> releasing;
  {
    const std::lock_guard guard(releasing_mutex_);
    releasing.swap(releasing_);
  }
  for (const auto& weak : releasing) {
    if (auto lease = weak.lock()) lease->begin_release(*this);
  }
}

void ClientImpl::stop_leases() {
  if (sleep_check_timer_ != 0) loop_->cancel(std::exchange(sleep_check_timer_, 0));
  for (const auto& weak : leases_) {
    if (auto lease = weak.lock()) lease->client_gone();
  }
  leases_.clear();
}

}  // namespace detail

// --- the public handle.

std::string_view to_string(LossReason reason) noexcept {
  switch (reason) {
    case LossReason::taken:
      return "taken";
    case LossReason::restarted:
      return "restarted";
    case LossReason::deadline:
      return "deadline";
  }
  return "unknown";
}

Lease Client::keep(Lock lock, LeaseOptions options) {
  return Lease(detail::LeaseCore::keep(*impl_, std::move(lock), options));
}

namespace {

// The lease's core, unless there is none or it is its parent's (detail::LeaseCore::forked): in
// a child of a fork() a Lease kept before it holds nothing, and its destructor touches nothing.
detail::LeaseCore* here(const std::shared_ptr<detail::LeaseCore>& core) noexcept {
  return core && !core->forked() ? core.get() : nullptr;
}

}  // namespace

Lease::~Lease() {
  if (auto* core = here(core_)) core->release(nullptr);
}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (auto* core = here(core_)) core->release(nullptr);
    core_ = std::move(other.core_);
  }
  return *this;
}

Lease::operator bool() const noexcept {
  auto* core = here(core_);
  return core && core->active() && !core->lost();
}
bool Lease::lost() const noexcept {
  auto* core = here(core_);
  return core && core->lost();
}
std::optional<LossReason> Lease::loss() const {
  auto* core = here(core_);
  return core ? core->loss() : std::nullopt;
}
std::stop_token Lease::stop_token() const noexcept {
  auto* core = here(core_);
  return core ? core->stop_token() : std::stop_token{};
}
Lock Lease::lock() const {
  auto* core = here(core_);
  return core ? core->lock() : Lock{};
}
std::chrono::steady_clock::time_point Lease::deadline() const { return lock().deadline; }

Result Lease::release() {
  if (!core_) return detail::refused(Outcome::invalid_argument, "release() of a Lease that holds nothing");
  if (core_->forked()) return detail::refused(Outcome::cancelled, detail::kMadeBeforeFork);
  if (core_->on_loop_thread()) {
    throw UsageError("Lease::release() on the client's loop thread would wait for itself forever; use release_async");
  }
  auto promise = std::make_shared<std::promise<Result>>();
  auto future = promise->get_future();
  release_async([promise](Result result) { promise->set_value(std::move(result)); });
  return future.get();
}

void Lease::release_async(Callback done) {
  if (!core_) {
    detail::call_user(done, detail::refused(Outcome::invalid_argument, "release of a Lease that holds nothing"));
    return;
  }
  if (core_->forked()) {
    detail::call_user(done, detail::refused(Outcome::cancelled, detail::kMadeBeforeFork));
    return;
  }
  core_->release(std::move(done));
}

}  // namespace redlock

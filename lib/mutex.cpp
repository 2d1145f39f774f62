// SPDX-License-Identifier: Apache-2.0
#include "redlock/mutex.h"

#include "detail/event_loop.h"
#include "detail/fork_generation.h"
#include "detail/lease_core.h"
#include "detail/validation.h"
#include "redlock/errors.h"

namespace redlock {
namespace {

// unlock() and destructors must not throw; a blocking call can (UsageError on the loop
// thread), so failures become a Result instead.
template <class F>
Result no_throw(F&& operation) noexcept {
  try {
    return operation();
  } catch (const std::exception& error) {
    Result result;
    result.outcome = Outcome::cancelled;
    result.message = error.what();
    return result;
  } catch (...) {
    Result result;
    result.outcome = Outcome::cancelled;
    result.message = "unknown exception";
    return result;
  }
}

// A release that does not wait on the loop thread, where blocking calls are refused (a
// Mutex unlocked, a LockGuard ended, inside a callback): there `background` begins it, and
// its Result is not known here.
template <class Blocking, class Background>
Result release_from_any_thread(Blocking blocking, Background background) noexcept {
  return no_throw([&] {
    try {
      return blocking();
    } catch (const UsageError&) {
      background();
      Result result;
      result.outcome = Outcome::cancelled;
      result.message = "release begun in the background: on the Client's loop thread its answer cannot be waited for";
      return result;
    }
  });
}

Result release_from_any_thread(Client& client, const Lock& lock) noexcept {
  return release_from_any_thread([&] { return client.release(lock); },
                                 [&] { client.release_async(lock, [](const Result&) {}); });
}

// Waiting at the Mutex's gate on the loop thread would stop the loop that the holder's
// unlock() needs: refused at once, like any blocking call there.
void refuse_on_loop_thread(const Client& client, const char* call) {
  if (client.on_loop_thread()) {
    throw UsageError(std::string("redlock::Mutex::") + call +
                     " on the Client's loop thread (inside a callback): it blocks; use acquire_async");
  }
}

}  // namespace

Mutex::Mutex(Client& client, std::string resource, AcquireOptions options, std::optional<LeaseOptions> renew)
    : client_(client),
      resource_(std::move(resource)),
      options_(options),
      renew_(std::move(renew)),
      generation_(detail::fork_generation()) {
  auto why = detail::check_resource(resource_);
  if (!why) why = detail::check_not_fence_key(client_.options(), resource_);
  if (why) throw ConfigError("redlock::Mutex: " + *why);
  // The same checks Client::keep makes at each lock(), made once here so lock() cannot throw them.
  if (renew_) (void)detail::lease_settings(client_.options(), options_.ttl.value_or(client_.options().ttl), *renew_);
}

Mutex::~Mutex() {
  if (owns_lock()) unlock();
}

bool Mutex::attempt(AcquireOptions options) {
  Result result = client_.acquire(resource_, options);
  Lease lease;
  if (result.ok() && renew_) {
    try {
      lease = client_.keep(*result.lock, *renew_);
    } catch (...) {
      (void)release_from_any_thread(client_, *result.lock);  // not held: nothing left locked
      throw;
    }
  }
  const std::lock_guard guard(state_mutex_);
  if (result.ok()) {
    held_ = result.lock;
    lease_ = std::move(lease);
  }
  last_result_ = std::move(result);
  return held_.has_value();
}

// With the gate held: on failure, or an exception (a blocking call refused on the loop
// thread, memory), the gate opens again (MutexTest.ATryLockThatThrowsLeavesTheMutexUsable).
bool Mutex::attempt_behind_gate(AcquireOptions options) {
  bool acquired = false;
  try {
    acquired = attempt(options);
  } catch (...) {
    gate_unlock();
    throw;
  }
  if (!acquired) gate_unlock();
  return acquired;
}

bool Mutex::gate_lock_until(std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::unique_lock guard(gate_mutex_);
  const auto free = [this] { return !gate_held_; };
  if (!deadline) {
    gate_released_.wait(guard, free);
  } else if (!gate_released_.wait_until(guard, *deadline, free)) {
    return false;
  }
  gate_held_ = true;
  return true;
}

void Mutex::gate_unlock() {
  {
    const std::lock_guard guard(gate_mutex_);
    gate_held_ = false;
  }
  gate_released_.notify_one();
}

void Mutex::lock() {
  refuse_on_loop_thread(client_, "lock");
  gate_lock_until(std::nullopt);
  AcquireOptions options = options_;
  options.retry_count = -1;  // until acquired: std::mutex::lock() semantics
  options.wait.reset();
  if (!attempt_behind_gate(options)) {
    throw LockError("redlock::Mutex::lock('" + resource_ + "'): " +
                    std::string(to_string(last_result().outcome)) + ": " + last_result().message);
  }
}

bool Mutex::try_lock() {
  refuse_on_loop_thread(client_, "try_lock");
  if (!gate_lock_until(std::chrono::steady_clock::now())) return false;
  AcquireOptions options = options_;
  options.retry_count = 0;
  options.wait.reset();
  return attempt_behind_gate(options);
}

bool Mutex::try_lock_within(Milliseconds timeout) {
  refuse_on_loop_thread(client_, "try_lock_for");
  // A timeout beyond what steady_clock can add without overflow waits without a deadline.
  std::optional<std::chrono::steady_clock::time_point> deadline = detail::steady_deadline_after(timeout);
  if (*deadline == std::chrono::steady_clock::time_point::max()) deadline.reset();
  if (!gate_lock_until(deadline)) return false;
  AcquireOptions options = options_;
  options.retry_count = -1;
  if (deadline) {
    options.wait = std::max(Milliseconds{0}, std::chrono::duration_cast<Milliseconds>(*deadline - std::chrono::steady_clock::now()));
  } else {
    options.wait.reset();
  }
  return attempt_behind_gate(options);
}

void Mutex::unlock() noexcept {
  std::optional<Lock> lock;
  Lease lease;
  {
    const std::lock_guard guard(state_mutex_);
    lock.swap(held_);
    std::swap(lease, lease_);
    if (!lock) {
      last_result_ = Result{};
      last_result_.outcome = Outcome::invalid_argument;
      last_result_.message = "unlock() of a redlock::Mutex that is not held";
      return;
    }
  }
  // A renewed lock: the lease stops renewing, then releases its (latest) lock.
  Result result = lease.lock().token.empty() ? release_from_any_thread(client_, *lock)
                                             : release_from_any_thread([&] { return lease.release(); },
                                                                       [&] { lease.release_async([](const Result&) {}); });
  {
    const std::lock_guard guard(state_mutex_);
    last_result_ = std::move(result);
  }
  gate_unlock();
}

bool Mutex::extend(std::optional<Milliseconds> ttl) {
  const auto lock = held();
  if (!lock) return false;
  // A renewing Mutex whose lease was lost (by its deadline too, which Lock::lost() does not
  // record): the holder was told to stop, and the keys must not outlive that by another ttl.
  if (lost()) {
    Result result;
    result.outcome = Outcome::lost;
    result.message = "the held lock of '" + resource_ + "' was lost; a lost lock is never extended";
    const std::lock_guard guard(state_mutex_);
    last_result_ = std::move(result);
    return false;
  }
  Result result = client_.extend(*lock, ttl);
  const std::lock_guard guard(state_mutex_);
  if (result.ok() && held_ && held_->token == lock->token) held_ = result.lock;
  const bool ok = result.ok();
  last_result_ = std::move(result);
  return ok;
}

bool Mutex::owns_lock() const {
  if (detail::made_before_fork(generation_)) return false;
  const std::lock_guard guard(state_mutex_);
  return held_.has_value();
}

std::optional<Lock> Mutex::held() const {
  if (detail::made_before_fork(generation_)) return std::nullopt;
  const std::lock_guard guard(state_mutex_);
  if (held_ && !lease_.lock().token.empty()) return lease_.lock();  // as of its last renewal
  return held_;
}

std::stop_token Mutex::stop_token() const {
  const std::lock_guard guard(state_mutex_);
  return lease_.stop_token();
}

bool Mutex::lost() const {
  if (detail::made_before_fork(generation_)) return false;
  const std::lock_guard guard(state_mutex_);
  // Without renew, the held Lock's own mark (a restarted majority, or an extend that found the
  // key gone on a quorum); with it, the lease's loss, which includes that mark.
  return held_.has_value() && (held_->lost() || lease_.lost());
}

std::chrono::microseconds Mutex::remaining() const {
  const auto lock = held();
  // Asked after held(): a loss signalled before this call is seen here.
  if (!lock || lost()) return std::chrono::microseconds{0};
  return client_.remaining(*lock);
}

Result Mutex::last_result() const {
  const std::lock_guard guard(state_mutex_);
  return last_result_;
}

LockGuard::LockGuard(Client& client, std::string_view resource, AcquireOptions options)
    : client_(client), generation_(detail::fork_generation()) {
  result_ = client_.acquire(resource, options);
  if (result_.ok()) lock_ = result_.lock;
}

LockGuard::~LockGuard() { release(); }

bool LockGuard::owns_lock() const noexcept { return lock_.has_value() && !detail::made_before_fork(generation_); }

const std::optional<Lock>& LockGuard::lock() const noexcept {
  static const std::optional<Lock> none;
  return detail::made_before_fork(generation_) ? none : lock_;
}

const Result& LockGuard::release() noexcept {
  if (!lock_) return result_;
  result_ = release_from_any_thread(client_, *lock_);
  lock_.reset();
  return result_;
}

}  // namespace redlock

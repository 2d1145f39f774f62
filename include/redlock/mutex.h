// SPDX-License-Identifier: Apache-2.0
// redlock/mutex.h — a distributed lock with the std::mutex interface.
//
// redlock::Mutex names one resource on one Client and meets the standard TimedLockable
// requirements (lock, try_lock, try_lock_for, try_lock_until, unlock), so std::unique_lock,
// std::scoped_lock and std::lock_guard work with it. Threads of one process that share a
// Mutex are first serialised locally, so only one of them contends in Redis at a time.
//
// By default the lock is not renewed: a holder must finish (or extend()) before remaining()
// reaches zero. Opt in with `renew` (redlock/lease.h): while locked, the lock is then kept by
// a Lease that renews it in the background; held(), remaining() and owns_lock() reflect the
// renewals, stop_token() and lost() tell the holder of a loss (before the deadline), and
// unlock() stops renewal and releases. owns_lock() stays true after a loss until unlock(),
// as a std::mutex's would. unlock() and the destructor never throw; what happened is in
// last_result().
//
// redlock::LockGuard is the RAII form for a single acquire attempt with retries.
//
// fork(): a Mutex or LockGuard made before it is the parent's. In the child it holds nothing:
// owns_lock() false, held() and lock() empty, remaining() zero, lost() false; its destructor
// releases nothing, and lock() throws LockError (the Client answers `cancelled` there). A
// std::stop_callback registered before the fork on stop_token() must not be destroyed in the
// child (_exit, or leave it): libstdc++'s destructor waits for a callback the parent's loop
// thread may have been running, and no such thread exists there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

#include "redlock/client.h"
#include "redlock/lease.h"

namespace redlock {

class Mutex {
 public:
  // Throws ConfigError if `resource` is empty or longer than kMaxResourceSize, or naming a
  // bad `renew` value (Client::keep's rules, checked here against the acquire's ttl).
  // `client` must outlive the Mutex. `renew`: keep the lock renewed while locked.
  Mutex(Client& client, std::string resource, AcquireOptions options = {},
        std::optional<LeaseOptions> renew = std::nullopt);
  ~Mutex();  // releases if still held; never throws
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // lock, try_lock and try_lock_for/until block: on the Client's loop thread (inside a
  // callback; Client::on_loop_thread) they throw UsageError at once, before waiting for another thread of this
  // process that holds the Mutex (which would stop the loop its unlock() needs).
  //
  // Blocks until acquired, retrying for as long as it takes. Throws LockError only if it
  // can never succeed (the Client is shutting down, or the request is invalid).
  // Acquired means a quorum granted it with validity left at the decision; a thread that
  // wakes after that validity ran out (a stop, a loaded machine) owns an expired lock:
  // remaining() says 0 and last_result().validity, taken at the return, too. Check remaining()
  // before work that needs the lock, or give `renew`.
  void lock();
  // One attempt, no retries. Blocks for about one command deadline at most (two with fencing,
  // plus up to yield_to_waiters when set).
  bool try_lock();
  // Retries until acquired or the time is up. A timeout too long to represent in
  // milliseconds (hours::max(), 1000 years) means "no time limit", never "already over".
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& timeout) {
    return try_lock_within(saturating_ms(timeout));
  }
  template <class ClockT, class Duration>
  bool try_lock_until(const std::chrono::time_point<ClockT, Duration>& deadline) {
    using Ms = std::chrono::duration<long double, std::milli>;  // no common type to overflow in
    return try_lock_within(saturating_ms(Ms(deadline.time_since_epoch()) - Ms(ClockT::now().time_since_epoch())));
  }
  // Releases on every master. Never throws; see last_result(). On the Client's loop thread
  // (inside a callback) the release is begun in the background: last_result() then says so.
  void unlock() noexcept;

  // Extends the held lease by `ttl` (default: the acquire's ttl). False if not held or the
  // extend failed (see last_result()); a lost lock stays lost.
  bool extend(std::optional<Milliseconds> ttl = {});

  [[nodiscard]] bool owns_lock() const;
  // The held lock (with `renew`: as of its last renewal), until unlock(). After a loss it is
  // still returned, with its last deadline, so that unlock() releases it: check lost().
  [[nodiscard]] std::optional<Lock> held() const;
  // Remaining validity of the held lease; zero when not held and once lost() is true.
  [[nodiscard]] std::chrono::microseconds remaining() const;
  // With `renew`: stop is requested when the held lock is lost (or unlocked); a Mutex that
  // does not renew, or is not held, returns a token that is never stopped.
  [[nodiscard]] std::stop_token stop_token() const;
  // The held lock was lost: with `renew`, as redlock/lease.h says (a deadline too near, the
  // key gone, a restarted majority); without, once the Lock says so (Lock::lost(): a restarted
  // majority, or an extend that found the key gone on a quorum). False when not held.
  [[nodiscard]] bool lost() const;
  // The Result of the last acquire, extend or release.
  [[nodiscard]] Result last_result() const;
  [[nodiscard]] const std::string& resource() const noexcept { return resource_; }

 private:
  bool try_lock_within(Milliseconds timeout);
  bool attempt(AcquireOptions options);
  bool attempt_behind_gate(AcquireOptions options);

  Client& client_;
  const std::string resource_;
  const AcquireOptions options_;
  const std::optional<LeaseOptions> renew_;
  const std::uint64_t generation_;  // detail::fork_generation() when made (see fork() above)
  // Serialises this process's threads before they go to Redis. A flag under a mutex and a
  // condition variable rather than std::timed_mutex: ThreadSanitizer does not see
  // pthread_mutex_clocklock, which timed_mutex::try_lock_until uses.
  bool gate_lock_until(std::optional<std::chrono::steady_clock::time_point> deadline);
  // `d` rounded up to whole milliseconds, clamped to [0, Milliseconds::max()]: converted
  // through floating point, so no duration type overflows on the way.
  template <class Rep, class Period>
  static Milliseconds saturating_ms(const std::chrono::duration<Rep, Period>& d) {
    const std::chrono::duration<long double, std::milli> ms = d;
    if (!(ms.count() > 0)) return Milliseconds{0};
    if (ms.count() >= static_cast<long double>(Milliseconds::max().count())) return Milliseconds::max();
    return std::chrono::ceil<Milliseconds>(ms);
  }
  void gate_unlock();
  std::mutex gate_mutex_;
  std::condition_variable gate_released_;
  bool gate_held_ = false;  // guarded by gate_mutex_

  mutable std::mutex state_mutex_;
  std::optional<Lock> held_;  // guarded by state_mutex_
  Lease lease_;               // guarded by state_mutex_; renews held_ when renew_ is set
  Result last_result_;        // guarded by state_mutex_
};

// Acquires in the constructor (with the Client's retries, or `options`), releases in the
// destructor. Check owns_lock() before relying on it. Never throws from the destructor.
class LockGuard {
 public:
  LockGuard(Client& client, std::string_view resource, AcquireOptions options = {});
  ~LockGuard();
  LockGuard(const LockGuard&) = delete;
  LockGuard& operator=(const LockGuard&) = delete;

  [[nodiscard]] bool owns_lock() const noexcept;
  explicit operator bool() const noexcept { return owns_lock(); }
  // The acquire's Result (or the release's, after release()).
  [[nodiscard]] const Result& result() const noexcept { return result_; }
  [[nodiscard]] const std::optional<Lock>& lock() const noexcept;
  // Releases now instead of at scope exit. Returns the release's Result.
  const Result& release() noexcept;

 private:
  Client& client_;
  std::optional<Lock> lock_;
  Result result_;
  const std::uint64_t generation_;  // detail::fork_generation() when made (see fork() above)
};

}  // namespace redlock

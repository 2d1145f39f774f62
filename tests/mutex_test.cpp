// SPDX-License-Identifier: Apache-2.0
// redlock::Mutex and redlock::LockGuard: the standard TimedLockable interface on a
// distributed lock, against real masters. Mirrors include/redlock/mutex.h.
#include "redlock/mutex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "test_util.h"

namespace redlock::testing {
namespace {

class MutexTest : public ::testing::Test {
 protected:
  MutexTest() : masters_(3), client_(options_for(masters_)), other_(options_for(masters_)) {}
  RedisServerGroup masters_;
  Client client_;
  Client other_;

  // Runs `work` inside one of client_'s callbacks (on its loop thread), and waits for it.
  void inside_a_callback(const std::function<void()>& work) {
    std::promise<void> done;
    client_.acquire_async("callback-carrier", [&](Result r) {
      if (r) client_.release_async(*r.lock, [](Result) {});
      work();
      done.set_value();
    });
    done.get_future().get();
  }

  // unlock() inside a callback cannot wait for the masters: the release must still reach
  // them, and last_result() say that it went on in the background.
  void expect_unlock_inside_a_callback_releases(Mutex& mutex, const std::string& key) {
    mutex.lock();
    inside_a_callback([&] { mutex.unlock(); });
    EXPECT_FALSE(mutex.owns_lock());
    EXPECT_TRUE(eventually([&] { return with_key(masters_, key) == 0; }, 2s)) << "the key stayed on the masters";
    EXPECT_NE(mutex.last_result().message.find("in the background"), std::string::npos)
        << mutex.last_result().message;
  }
};

TEST_F(MutexTest, WorksWithUniqueLock) {
  Mutex mutex(client_, "shared-report");
  {
    std::unique_lock<Mutex> guard(mutex);
    ASSERT_TRUE(guard.owns_lock());
    ASSERT_TRUE(mutex.owns_lock());
    const auto held = mutex.held();
    ASSERT_TRUE(held.has_value());
    EXPECT_GE(holding(masters_, "redlock:shared-report", held->token), client_.quorum());
    EXPECT_GT(mutex.remaining().count(), 0);
  }
  EXPECT_FALSE(mutex.owns_lock());
  EXPECT_EQ(mutex.last_result().outcome, Outcome::released);
  EXPECT_TRUE(eventually([&] { return with_key(masters_, "redlock:shared-report") == 0; }));
}

TEST_F(MutexTest, WorksWithScopedLockOverTwoResources) {
  Mutex a(client_, "account:1");
  Mutex b(client_, "account:2");
  {
    std::scoped_lock both(a, b);
    EXPECT_TRUE(a.owns_lock());
    EXPECT_TRUE(b.owns_lock());
  }
  EXPECT_FALSE(a.owns_lock());
  EXPECT_FALSE(b.owns_lock());
}

TEST_F(MutexTest, TryLockFailsWhileAnotherClientHoldsIt) {
  const Result held = other_.acquire("busy");
  ASSERT_TRUE(held);
  Mutex mutex(client_, "busy");
  EXPECT_FALSE(mutex.try_lock());
  EXPECT_EQ(mutex.last_result().outcome, Outcome::taken);
  EXPECT_FALSE(mutex.try_lock_for(std::chrono::milliseconds(60)));
  EXPECT_FALSE(mutex.try_lock_until(std::chrono::system_clock::now() + std::chrono::milliseconds(30)));
  EXPECT_FALSE(mutex.owns_lock());
  ASSERT_TRUE(other_.release(*held.lock));
  EXPECT_TRUE(mutex.try_lock_for(std::chrono::seconds(5)));
  mutex.unlock();
}

TEST_F(MutexTest, TryLockForWaitsForTheHolderToLetGo) {
  auto options = options_for(masters_);
  options.ttl = 200ms;  // the holder never releases: its lease runs out
  Client holder(options);
  ASSERT_TRUE(holder.acquire("handover"));
  Mutex mutex(client_, "handover");
  std::unique_lock<Mutex> guard(mutex, std::defer_lock);
  EXPECT_TRUE(guard.try_lock_for(std::chrono::seconds(10)));
}

// A timeout too long for steady_clock arithmetic means "no limit", never "already over":
// each of these waits for the holder's 300 ms lease to run out instead of giving up at once.
TEST_F(MutexTest, TryLockForWithAnEnormousTimeoutWaitsInsteadOfGivingUp) {
  auto options = options_for(masters_);
  options.ttl = 300ms;
  Client holder(options);
  using Years = std::chrono::duration<long long, std::ratio<31'556'952>>;
  const auto hold = [&](const std::string& resource) { ASSERT_TRUE(holder.acquire(resource)); };

  Mutex years(client_, "forever-1");
  hold("forever-1");
  EXPECT_TRUE(years.try_lock_for(Years(1000))) << format_result(years.last_result());
  years.unlock();

  Mutex hours(client_, "forever-2");
  hold("forever-2");
  EXPECT_TRUE(hours.try_lock_for(std::chrono::hours::max())) << format_result(hours.last_result());
  hours.unlock();

  Mutex until(client_, "forever-3");
  hold("forever-3");
  EXPECT_TRUE(until.try_lock_until(std::chrono::time_point<std::chrono::system_clock, std::chrono::hours>::max()))
      << format_result(until.last_result());
  until.unlock();

  // And a deadline in the past is one attempt, not a wait that wrapped around.
  Mutex past(client_, "forever-4");
  hold("forever-4");
  EXPECT_FALSE(past.try_lock_until(std::chrono::time_point<std::chrono::system_clock, std::chrono::hours>::min()));
}

TEST_F(MutexTest, UnlockWhenNotHeldNeitherThrowsNorTouchesRedis) {
  Mutex mutex(client_, "idle");
  // (The handshakes' permission probes run scripts: counted once they are done.)
  ASSERT_TRUE(client_.wait_connected(3, 5s));
  ASSERT_TRUE(other_.wait_connected(3, 5s));
  std::vector<long long> before;
  for (std::size_t i = 0; i < masters_.size(); ++i) before.push_back(scripts_run(masters_[i]));
  mutex.unlock();
  EXPECT_EQ(mutex.last_result().outcome, Outcome::invalid_argument);
  EXPECT_TRUE(mutex.last_result().masters.empty()) << format_result(mutex.last_result());
  for (std::size_t i = 0; i < masters_.size(); ++i)
    EXPECT_EQ(scripts_run(masters_[i]), before[i]) << "a release was sent";
  static_assert(noexcept(mutex.unlock()));
}

// Inside a callback (the loop thread) try_lock is refused with UsageError, and the Mutex stays
// usable: a try_lock that threw there left its local gate closed, and every later lock()
// waited forever (an outside review).
TEST_F(MutexTest, ATryLockThatThrowsLeavesTheMutexUsable) {
  Mutex mutex(client_, "thrown");
  bool threw = false;
  inside_a_callback([&] {
    try {
      (void)mutex.try_lock();
    } catch (const UsageError&) {
      threw = true;
    }
  });
  ASSERT_TRUE(threw) << "a blocking call on the loop thread must be refused";
  EXPECT_FALSE(mutex.owns_lock());
  ASSERT_TRUE(mutex.try_lock_for(2s)) << format_result(mutex.last_result());
  mutex.unlock();
}

// unlock() on the loop thread cannot wait for the masters; it must still release there. It
// reported the lock gone (owns_lock() false) and left the key on every master for its ttl.
TEST_F(MutexTest, UnlockInsideACallbackStillReleases) {
  Mutex mutex(client_, "unlocked-in-callback");
  expect_unlock_inside_a_callback_releases(mutex, "redlock:unlocked-in-callback");
}

// The same with renewal: the lease releases its latest lock.
TEST_F(MutexTest, UnlockOfARenewedMutexInsideACallbackStillReleases) {
  Mutex mutex(client_, "renewed-unlocked-in-callback", {}, LeaseOptions{});
  expect_unlock_inside_a_callback_releases(mutex, "redlock:renewed-unlocked-in-callback");
}

// Waiting at the Mutex's local gate inside a callback stops the loop the holder's unlock()
// needs: lock() there hung the Client for good, try_lock_for blocked the loop for its whole
// timeout (an outside review). Refused at once instead, like any blocking call there.
TEST_F(MutexTest, WaitingForTheMutexInsideACallbackIsRefused) {
  Mutex mutex(client_, "gated");
  mutex.lock();  // another thread of this process holds it
  std::string what;
  inside_a_callback([&] {
    what = client_.on_loop_thread() ? "" : "not on the loop thread; ";
    try {
      what += mutex.try_lock_for(300ms) ? "granted" : "not granted";
    } catch (const UsageError&) {
      what += "refused";
      try {
        mutex.lock();  // reached only if try_lock_for is refused: it would hang before the fix
        what += "; lock() returned";
      } catch (const UsageError&) {
      }
    }
  });
  EXPECT_EQ(what, "refused");
  EXPECT_FALSE(client_.on_loop_thread());
  mutex.unlock();
  EXPECT_EQ(mutex.last_result().outcome, Outcome::released) << format_result(mutex.last_result());
}

// The same for LockGuard: released at scope exit inside a callback.
TEST_F(MutexTest, LockGuardEndedInsideACallbackStillReleases) {
  std::optional<LockGuard> guard;
  guard.emplace(client_, "guarded-in-callback");
  ASSERT_TRUE(guard->owns_lock()) << format_result(guard->result());
  inside_a_callback([&] { guard.reset(); });
  EXPECT_TRUE(eventually([&] { return with_key(masters_, "redlock:guarded-in-callback") == 0; }, 2s))
      << "the key stayed on the masters";
}

TEST_F(MutexTest, DestructorReleasesAHeldLock) {
  std::string token;
  {
    Mutex mutex(client_, "forgotten");
    mutex.lock();
    token = mutex.held()->token;
  }
  EXPECT_TRUE(eventually([&] { return with_key(masters_, "redlock:forgotten") == 0; }));
}

TEST_F(MutexTest, ExtendKeepsTheLeaseAndALostLockStaysLost) {
  AcquireOptions shortlived;
  shortlived.ttl = 1000ms;
  Mutex mutex(client_, "extend-me", shortlived);
  mutex.lock();
  EXPECT_TRUE(mutex.extend(30000ms));
  EXPECT_GT(mutex.remaining(), 20000ms);
  // lock() and extend() return at the quorum: the third master's SET may land after a DEL
  // sent now (seen on a loaded machine: the key came back on one master). Wait for it.
  ASSERT_TRUE(eventually([&] { return with_key(masters_, "redlock:extend-me") == masters_.size(); }));
  for (std::size_t i = 0; i < masters_.size(); ++i) masters_[i].command({"DEL", "redlock:extend-me"});
  EXPECT_FALSE(mutex.extend());
  EXPECT_EQ(mutex.last_result().outcome, Outcome::lost);
  EXPECT_EQ(with_key(masters_, "redlock:extend-me"), 0u);
  // Without renew too, the Mutex says what its Lock says (review 47: lost() stayed false).
  EXPECT_TRUE(mutex.held()->lost());
  EXPECT_TRUE(mutex.lost());
  EXPECT_EQ(mutex.remaining(), 0us);
  mutex.unlock();
}

TEST_F(MutexTest, ThreadsSharingOneMutexAreSerialised) {
  Mutex mutex(client_, "shared");
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  int counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 25; ++i) {
        const std::lock_guard<Mutex> guard(mutex);
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        ++counter;
        inside.fetch_sub(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, 100);
}

TEST_F(MutexTest, LockThrowsLockErrorWhenItCanNeverSucceed) {
  // A ttl that leaves no validity after the drift allowance is rejected every time.
  AcquireOptions impossible;
  impossible.ttl = 1ms;
  Mutex mutex(client_, "never", impossible);
  EXPECT_THROW(mutex.lock(), LockError);
  EXPECT_EQ(mutex.last_result().outcome, Outcome::invalid_argument);
  EXPECT_FALSE(mutex.owns_lock());
  // The local gate was released: a later try does not deadlock.
  EXPECT_FALSE(mutex.try_lock());
}

TEST_F(MutexTest, LockGuardReleasesAtScopeExit) {
  std::string key;
  {
    LockGuard guard(client_, "guarded");
    ASSERT_TRUE(guard.owns_lock()) << format_result(guard.result());
    key = guard.lock()->key;
    EXPECT_GE(holding(masters_, key, guard.lock()->token), client_.quorum());
    const LockGuard second(other_, "guarded");
    EXPECT_FALSE(second.owns_lock());
    EXPECT_EQ(second.result().outcome, Outcome::taken);
  }
  EXPECT_TRUE(eventually([&] { return with_key(masters_, key) == 0; }));
}

TEST_F(MutexTest, LockGuardEarlyReleaseReportsTheRelease) {
  LockGuard guard(client_, "early");
  ASSERT_TRUE(guard);
  EXPECT_EQ(guard.release().outcome, Outcome::released);
  EXPECT_FALSE(guard.owns_lock());
  EXPECT_EQ(guard.release().outcome, Outcome::released);  // idempotent
}

// What a process forked while this one holds locks is told (review 71: the child heard
// owns_lock() true and remaining() counting down the parent's validity, 2 of 2: two processes
// inside one critical section). Nothing in the child holds anything, says so, or reaches a
// master; the parent keeps every lock.
TEST_F(MutexTest, AChildOfForkIsNeverToldItHoldsTheParentsLocks) {
  AcquireOptions lasting;
  lasting.ttl = 20s;
  const Result plain = client_.acquire("forked-plain", lasting);
  ASSERT_TRUE(plain) << format_result(plain);
  Mutex mutex(client_, "forked-mutex", lasting);
  Mutex renewed(client_, "forked-renewed", lasting, LeaseOptions{});
  mutex.lock();
  renewed.lock();
  LockGuard guard(client_, "forked-guard", lasting);
  ASSERT_TRUE(guard.owns_lock()) << format_result(guard.result());
  // Each waits until the loop thread sleeps: GCC 12's libasan is not fork-safe
  // (AsyncTest.AChildOfForkLeavesTheParentsClientWorking).
  ASSERT_TRUE(eventually(other_threads_asleep));
  const std::string how = in_a_child([&] {
    std::string wrong;  // what the child was told that it must not be, written to stderr
    const auto expect = [&](bool ok, const char* what) {
      if (!ok) wrong += std::string(" ") + what + ";";
    };
    expect(client_.remaining(*plain.lock) == 0us, "remaining(lock) > 0");
    for (const Mutex* each : {&mutex, &renewed}) {
      expect(!each->owns_lock(), "owns_lock()");
      expect(!each->held().has_value(), "held()");
      expect(each->remaining() == 0us, "Mutex::remaining() > 0");
      expect(!each->lost(), "lost()");
    }
    expect(!guard.owns_lock() && !guard.lock().has_value(), "LockGuard owns the lock");
    const FleetStatus status = client_.status();
    expect(status.size == 3 && status.reason.find("fork") != std::string::npos, "status does not say fork");
    Lease kept = client_.keep(*plain.lock);
    expect(!kept, "a lease kept in the child holds");
    const Result released = kept.release();
    expect(released.outcome == Outcome::cancelled && released.message.find("fork") != std::string::npos,
           "the child's lease release not cancelled for the fork");
    if (!wrong.empty()) std::fprintf(stderr, "the child was told:%s\n", wrong.c_str());
    return wrong.empty();
  });
  EXPECT_EQ(how, "exit 0");
  // Nothing the child did (its Mutexes, LockGuard and Lease destroyed at its exit, its
  // release) reached a master: the parent holds all four.
  EXPECT_TRUE(mutex.owns_lock() && renewed.owns_lock() && guard.owns_lock());
  EXPECT_GT(client_.remaining(*plain.lock), 0us);
  EXPECT_EQ(holding(masters_, "redlock:forked-plain", plain.lock->token), masters_.size());
  EXPECT_EQ(holding(masters_, "redlock:forked-mutex", mutex.held()->token), masters_.size());
  EXPECT_EQ(holding(masters_, "redlock:forked-renewed", renewed.held()->token), masters_.size());
  EXPECT_EQ(holding(masters_, "redlock:forked-guard", guard.lock()->token), masters_.size());
  mutex.unlock();
  renewed.unlock();
}
}  // namespace
}  // namespace redlock::testing

// SPDX-License-Identifier: Apache-2.0
// Review attacks on leases (h-lease): a holder who works past its deadline without being told,
// a renewal sent after the loss signal, a lost lock that still reports validity left. Each
// test FAILS when the hole it names is real; the "held up" ones pass and say why.
#include "redlock/lease.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "redlock/clock.h"
#include "redlock/errors.h"
#include "redlock/mutex.h"
#include "test_util.h"

namespace redlock::testing {
namespace {

using std::chrono::duration_cast;
using std::chrono::steady_clock;

long long pttl(const RedisServer& server, const std::string& key) { return server.command({"PTTL", key}).integer; }

long long evalsha_calls(const RedisServer& server) {
  const Reply info = server.command({"INFO", "commandstats"});
  const auto at = info.str.find("cmdstat_evalsha:calls=");
  if (at == std::string::npos) return 0;
  return std::stoll(info.str.substr(at + std::string("cmdstat_evalsha:calls=").size()));
}

// A valid validity clock (monotonic, thread-safe) that reads an hour ahead of steady_clock:
// what ClientOptions::clock allows.
class HourAheadClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const override { return steady_clock::now() + std::chrono::hours(1); }
};

struct Loss {
  std::atomic<int> calls{0};
  std::atomic<bool> set{false};
  std::mutex mutex;
  std::optional<LossReason> reason;
  std::function<void(LossReason, const Lock&)> callback() {
    return [this](LossReason why, const Lock&) {
      {
        const std::lock_guard guard(mutex);
        reason = why;
      }
      ++calls;
      set = true;
    };
  }
};

// FAILS (hole): keep() (and extend) accept a Lock granted by another Client, whose
// `started`/`deadline` are on THAT Client's validity clock. With a ClientOptions::clock on the
// granting Client (valid: monotonic, thread-safe) the keeping Client reads the deadline as an
// hour away: it neither renews nor signals loss, the keys expire after the ttl, a third
// Client acquires, and the lease holder is never told. Two holders.
TEST(AttackLeaseTest, ALockFromAClientWithAnotherClockIsNotKeptPastItsRealDeadline) {
  RedisServerGroup masters(3);
  auto granting_options = options_for(masters);
  granting_options.clock = std::make_shared<HourAheadClock>();
  granting_options.ttl = 1500ms;
  Client granting(granting_options);
  auto keeping_options = options_for(masters);
  keeping_options.ttl = 1500ms;
  Client keeping(keeping_options);
  Client other(options_for(masters));
  ASSERT_TRUE(granting.wait_connected(3, 5s));
  ASSERT_TRUE(keeping.wait_connected(3, 5s));
  ASSERT_TRUE(other.wait_connected(3, 5s));

  const Result held = granting.acquire("cross-client");
  ASSERT_TRUE(held) << format_result(held);
  Loss loss;
  LeaseOptions lease_options;
  lease_options.on_lost = loss.callback();
  // keep() refuses another Client's Lock (its deadline is on that Client's clock); the way
  // in is an extend on the keeping Client, whose deadline is on the keeping Client's clock.
  EXPECT_THROW((void)keeping.keep(*held.lock, lease_options), UsageError);
  const Result here = keeping.extend(*held.lock);
  ASSERT_EQ(here.outcome, Outcome::extended) << format_result(here);
  Lease lease = keeping.keep(*here.lock, lease_options);
  std::printf("[figure] keeping Client's remaining() of the kept lock: %.1f s (ttl 1.5 s)\n",
              static_cast<double>(keeping.remaining(lease.lock()).count()) / 1e6);

  // Past the ttl: the lease either renewed (the keys are still ours) or said it is lost.
  std::this_thread::sleep_for(2500ms);
  const Result second = other.acquire("cross-client");
  if (second) {
    EXPECT_TRUE(loss.set.load()) << "another Client holds the lock while the lease holder was never told: "
                                 << format_result(second);
    other.release(*second.lock);
  }
  EXPECT_TRUE(!second.ok() || lease.lost());
  EXPECT_LE(keeping.remaining(lease.lock()), std::chrono::microseconds(1500ms))
      << "the keeping Client believes more validity than any master granted";
}

// The same confusion through Client::extend: the extend's deadline is max(old, new) with
// `old` on the other Client's clock.
TEST(AttackLeaseTest, AnExtendOnAnotherClientNeverReportsMoreThanItsTtl) {
  RedisServerGroup masters(3);
  auto granting_options = options_for(masters);
  granting_options.clock = std::make_shared<HourAheadClock>();
  Client granting(granting_options);
  Client extending(options_for(masters));
  ASSERT_TRUE(granting.wait_connected(3, 5s));
  ASSERT_TRUE(extending.wait_connected(3, 5s));
  AcquireOptions ttl;
  ttl.ttl = 2000ms;
  const Result held = granting.acquire("cross-extend", ttl);
  ASSERT_TRUE(held) << format_result(held);
  const Result extended = extending.extend(*held.lock, 2000ms);
  ASSERT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  std::printf("[figure] extend on another Client: validity %.1f s for a 2 s ttl; masters' PTTL %lld ms\n",
              static_cast<double>(extended.validity.count()) / 1e6, pttl(masters[0], held.lock->key));
  EXPECT_LE(extended.validity, std::chrono::microseconds(2000ms)) << format_result(extended);
  EXPECT_LE(extending.remaining(*extended.lock), std::chrono::microseconds(2000ms));
}

// FAILS (hole, low): "after loss no renewal is sent". renew() posts its extend to the loop;
// when the renew timer and the loss timer are due in the same pass (the loop was late: a
// busy machine, a slow callback), renew() runs first, then the loss is signalled, and only
// then does the posted extend go out: the masters' PTTL is refreshed for a full ttl after the
// holder was told the lock is lost (and nobody releases it until the Lease is destroyed).
TEST(AttackLeaseTest, NoRenewalGoesOutAfterTheLossSignal) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.command_timeout = 100ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  AcquireOptions ttl;
  ttl.ttl = 3000ms;
  const Result held = client.acquire("late-loop", ttl);
  ASSERT_TRUE(held) << format_result(held);
  const auto t0 = held.lock->started;
  Loss loss;
  LeaseOptions lease_options;
  lease_options.loss_margin = 500ms;  // loss at ~2.47 s; the first renewal is due at 1 s
  lease_options.on_lost = loss.callback();
  Lease lease = client.keep(*held.lock, lease_options);
  // The loop is held up from 0.5 s to 2.7 s (a callback that blocks; on a loaded machine the
  // loop can be just as late), past the renewal and the loss moment, before the deadline.
  std::this_thread::sleep_until(t0 + 500ms);
  client.acquire_async("blocker", [t0](Result) { std::this_thread::sleep_until(t0 + 2700ms); });
  ASSERT_TRUE(eventually([&] { return loss.set.load(); }, 5s));
  EXPECT_EQ(lease.loss(), LossReason::deadline);
  std::this_thread::sleep_for(300ms);
  for (std::size_t i = 0; i < masters.size(); ++i) {
    const long long left = pttl(masters[i], held.lock->key);
    std::printf("[figure] master %zu: PTTL %lld ms after the loss signal (the key's own expiry is ~0)\n", i, left);
    EXPECT_LT(left, 1000) << "master " << i << " was renewed after the loss was signalled";
  }
}

// FAILS (hole, low): a Mutex that renews, after its renewal found the key taken (stop
// requested, lost() true), still reports remaining() > 0 and held() with the last deadline
// until unlock(): a holder that checks remaining() (the Mutex's documented way to know how
// long it may work) goes on working on a lock another Client may now hold.
TEST(AttackLeaseTest, AMutexWhoseLockWasTakenReportsNoValidityLeft) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.command_timeout = 100ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  AcquireOptions acquire;
  acquire.ttl = 3000ms;
  LeaseOptions renew;
  renew.renew_fraction = 0.2;
  Mutex mutex(client, "taken-mutex", acquire, renew);
  mutex.lock();
  const auto lock = mutex.held();
  ASSERT_TRUE(lock);
  for (std::size_t i = 0; i < masters.size(); ++i) masters[i].command({"SET", lock->key, "someone-else", "PX", "60000"});
  ASSERT_TRUE(eventually([&] { return mutex.lost(); }, 3s));
  EXPECT_TRUE(mutex.stop_token().stop_requested());
  std::printf("[figure] after loss (taken): remaining() = %.3f s\n", static_cast<double>(mutex.remaining().count()) / 1e6);
  EXPECT_EQ(mutex.remaining(), std::chrono::microseconds(0)) << "a lost lock still reports validity left";
  mutex.unlock();
}

// HELD UP: keep() of a lock whose deadline has already passed signals loss (deadline) at once
// and sends no renewal: renewal never runs past a passed deadline.
TEST(AttackLeaseTest, KeepingALockPastItsDeadlineSignalsAtOnceAndRenewsNothing) {
  RedisServerGroup masters(3);
  Client client(options_for(masters));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  AcquireOptions ttl;
  ttl.ttl = 500ms;
  const Result held = client.acquire("expired", ttl);
  ASSERT_TRUE(held) << format_result(held);
  std::this_thread::sleep_until(held.lock->deadline + 50ms);
  long long before = 0;
  for (std::size_t i = 0; i < masters.size(); ++i) before += evalsha_calls(masters[i]);
  Loss loss;
  LeaseOptions lease_options;
  lease_options.on_lost = loss.callback();
  Lease lease = client.keep(*held.lock, lease_options);
  ASSERT_TRUE(eventually([&] { return loss.set.load(); }, 2s));
  EXPECT_EQ(lease.loss(), LossReason::deadline);
  std::this_thread::sleep_for(300ms);
  long long after = 0;
  for (std::size_t i = 0; i < masters.size(); ++i) after += evalsha_calls(masters[i]);
  EXPECT_EQ(after, before) << "a renewal was sent for a lock past its deadline";
  EXPECT_EQ(loss.calls.load(), 1);
}

// HELD UP: a renewal whose reply arrives after the loss timer fired (majority frozen past the
// loss moment, then thawed) does not un-lose the lease nor call on_lost twice.
TEST(AttackLeaseTest, ALateRenewalReplyDoesNotReviveALostLease) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.command_timeout = 2000ms;  // the renewal is still waiting when the loss timer fires
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  AcquireOptions ttl;
  ttl.ttl = 4000ms;
  const Result held = client.acquire("late-reply", ttl);
  ASSERT_TRUE(held) << format_result(held);
  Loss loss;
  LeaseOptions lease_options;
  lease_options.renew_fraction = 0.5;  // renew at 2 s; loss at deadline - 1 s ~ 2.96 s
  lease_options.loss_margin = 1000ms;
  lease_options.on_lost = loss.callback();
  masters[0].freeze();
  masters[1].freeze();
  const long long before = evalsha_calls(masters[2]);
  Lease lease = client.keep(*held.lock, lease_options);
  ASSERT_TRUE(eventually([&] { return loss.set.load(); }, 5s));
  const auto signalled_at = steady_clock::now();
  EXPECT_GT(evalsha_calls(masters[2]), before) << "no renewal was in flight";
  // The renewal (sent at 2 s, deadline 4 s) is answered now, successfully, after the loss.
  masters[0].thaw();
  masters[1].thaw();
  std::this_thread::sleep_for(700ms);
  EXPECT_TRUE(lease.lost());
  EXPECT_FALSE(lease);
  EXPECT_EQ(loss.calls.load(), 1);
  EXPECT_LT(signalled_at, held.lock->deadline) << "loss came after the deadline";
}

}  // namespace
}  // namespace redlock::testing

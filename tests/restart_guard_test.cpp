// The restart guard against real masters restarted without persistence: a restarted master's
// grants are not votes for one max_lock_ttl, and a run_id change takes its votes away from
// held locks. With the guard off the same scenario gives two holders: both are kept.
#include <gtest/gtest.h>

#include <thread>

#include "test_util.h"

namespace redlock::testing {
namespace {

ClientOptions guarded(const RedisServerGroup& masters, bool guard) {
  auto options = options_for(masters);
  options.restart_guard = guard;
  options.ttl = 2000ms;
  options.max_lock_ttl = 2000ms;
  return options;
}

// Every master must have been up longer than max_lock_ttl before the guard counts it.
void wait_until_counted(Client& client, const std::string& probe) {
  ASSERT_TRUE(eventually(
      [&] {
        const Result r = client.acquire(probe);
        if (r) client.release(*r.lock);
        return r.ok() && r.count(MasterStatus::not_counted) == 0;
      },
      10s));
}

TEST(RestartGuardTest, AFreshMasterIsConnectedButNotCounted) {
  RedisServerGroup masters(3);
  Client client(guarded(masters, true));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const Result early = client.acquire("fresh");
  EXPECT_EQ(early.outcome, Outcome::quorum_unreachable) << format_result(early);
  EXPECT_GE(early.count(MasterStatus::not_counted), 2u) << format_result(early);
  for (const auto& master : early.masters) {
    if (master.status == MasterStatus::pending) continue;  // decided before it answered
    EXPECT_EQ(master.status, MasterStatus::not_counted);
    EXPECT_NE(master.error.find("restart guard"), std::string::npos) << master.error;
  }
  // Not counted, but sent the SET and then the release: nothing of ours is left.
  EXPECT_TRUE(eventually([&] { return with_key(masters, "redlock:fresh") == 0; }));
  wait_until_counted(client, "later");
}

// The scenario: N = 5, the lock held on exactly 3 masters, one of the 3 killed and
// restarted without persistence. The 2 others must not take the SET while it is granted, yet
// stay up (so the guard counts them): a stale owner's key, expiring 300 ms later, refuses it
// there. (Freezing them would not do: the SET waits in the socket and lands at the thaw,
// which makes k = 5.)
void hold_on_three_then_restart_one(bool guard, bool expect_second_holder) {
  RedisServerGroup masters(5);
  Client first(guarded(masters, guard));
  Client second(guarded(masters, guard));
  ASSERT_TRUE(first.wait_connected(5, 5s));
  ASSERT_TRUE(second.wait_connected(5, 5s));
  if (guard) {
    wait_until_counted(first, "warm-up-1");
    wait_until_counted(second, "warm-up-2");
  }
  for (const std::size_t i : {3u, 4u}) masters[i].command({"SET", "redlock:ledger", "stale-owner", "PX", "300"});
  const Result held = first.acquire("ledger");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  ASSERT_TRUE(eventually([&] {
    return holding(masters, held.lock->key, held.lock->token) == 3u && with_key(masters, held.lock->key) == 3u;
  })) << "the lock must live on exactly masters 0, 1 and 2";

  masters[0].kill();
  masters[0].restart();  // no persistence: it has forgotten the key
  ASSERT_TRUE(second.wait_connected(5, 5s));

  const Result other = second.acquire("ledger");
  if (expect_second_holder) {
    EXPECT_EQ(other.outcome, Outcome::acquired)
        << "with the guard off a restarted master gives a second holder\n" << format_result(other);
  } else {
    EXPECT_NE(other.outcome, Outcome::acquired) << format_result(other);
    EXPECT_EQ(other.masters[0].status, MasterStatus::not_counted) << format_result(other);
    // The first client learns of the restart when it reconnects: its lock has 2 of 3 votes.
    EXPECT_TRUE(eventually([&] { return held.lock->lost(); }));
    const Result extended = first.extend(*held.lock);
    EXPECT_EQ(extended.outcome, Outcome::lost) << format_result(extended);
    EXPECT_TRUE(extended.masters.empty());
  }
  EXPECT_GT(first.remaining(*held.lock).count(), 0) << "the scenario must run while the first lock is valid";
}

TEST(RestartGuardTest, WithTheGuardARestartedMasterDoesNotHandOutAHeldLock) {
  hold_on_three_then_restart_one(true, false);
}

TEST(RestartGuardTest, WithoutTheGuardTheSameRestartGivesTwoHolders) {
  hold_on_three_then_restart_one(false, true);
}

TEST(RestartGuardTest, ALockSurvivesAsLongAsAQuorumOfItsGrantorsHasNotRestarted) {
  RedisServerGroup masters(3);
  Client client(guarded(masters, true));
  wait_until_counted(client, "warm-up");
  AcquireOptions long_lived;
  long_lived.ttl = 2000ms;
  const Result held = client.acquire("k3");
  ASSERT_TRUE(held);
  // Wait for the straggler's grant too: k = 3 of N = 3.
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3u; }));
  std::this_thread::sleep_for(50ms);  // let the late OK reach the client's bookkeeping

  masters[0].kill();
  masters[0].restart();
  ASSERT_TRUE(client.wait_connected(3, 5s));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(held.lock->lost()) << "2 of 3 grantors remain: still a quorum";

  masters[1].kill();
  masters[1].restart();
  EXPECT_TRUE(eventually([&] { return held.lock->lost(); })) << "1 of 3 grantors remains";
}

TEST(RestartGuardTest, WithDurableMastersTheGuardCanBeOffAndKeysSurviveARestart) {
  support::RedisServerOptions durable;
  durable.persistence = true;  // appendonly yes, appendfsync always
  RedisServerGroup masters(3, durable);
  Client first(guarded(masters, false));
  Client second(guarded(masters, false));
  const Result held = first.acquire("durable");
  ASSERT_TRUE(held);
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3u; }));
  masters[0].kill();
  masters[0].restart();
  ASSERT_TRUE(second.wait_connected(3, 5s));
  EXPECT_EQ(get(masters[0], held.lock->key), held.lock->token);
  const Result other = second.acquire("durable");
  EXPECT_EQ(other.outcome, Outcome::taken) << format_result(other);
}

TEST(RestartGuardTest, ATtlLongerThanTheGuardWindowIsRefused) {
  RedisServerGroup masters(1);
  Client client(guarded(masters, true));
  AcquireOptions too_long;
  too_long.ttl = 5000ms;
  const Result result = client.acquire("long", too_long);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument);
  EXPECT_NE(result.message.find("max_lock_ttl"), std::string::npos) << result.message;
}

}  // namespace
}  // namespace redlock::testing

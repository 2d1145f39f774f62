// SPDX-License-Identifier: Apache-2.0
// The restart guard against real masters restarted without persistence: a restarted master's
// grants are not votes for one max_lock_ttl, and a run_id change takes its votes away from
// held locks. With the guard off the same scenario gives two holders: both are kept.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "clock_control.h"
#include "detail/lock_commands.h"
#include "support/hiredis_handle.h"
#include "tcp_proxy.h"
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

// Makes `server` a replica of `upstream` and waits until its link is up: the full sync has
// replaced its keys by then.
void make_replica(const support::RedisServer& server, const support::RedisServer& upstream) {
  server.command({"REPLICAOF", "127.0.0.1", std::to_string(upstream.port())});
  ASSERT_TRUE(eventually(
      [&] {
        return server.command({"INFO", "replication"}).str.find("master_link_status:up") != std::string::npos;
      },
      10s));
}

// Master 0 behind a proxy whose requests can be held (role reads then wait, neither refused
// nor lost), and guarded options that reach it through the proxy.
struct HeldMaster0 {
  explicit HeldMaster0(const RedisServerGroup& masters)
      : proxy(masters[0].port(),
              [this](std::string_view) {
                while (hold.load()) std::this_thread::sleep_for(1ms);
              }),
        options(guarded(masters, true)) {
    options.masters = {proxy.uri(), masters[1].uri(), masters[2].uri()};
    options.retry_count = 0;
    options.stall_timeout = 20s;  // the held reads must not end in a reconnect: a gap of its own
  }
  std::atomic<bool> hold{false};
  TcpProxy proxy;
  ClientOptions options;
};

// Acquires `key` once every master counts and is clear of the age rule (uptime, read again at
// a reconnect, may say the server is up to 1 s younger than the first reading did).
Result acquire_when_counted(Client& client, const std::string& key) {
  EXPECT_TRUE(every_master_counts(client, "warm-up"));
  std::this_thread::sleep_for(1500ms);
  return client.acquire(key);
}

// Gives `upstream` the keyspace mark `server` holds, so that a full sync from it keeps the mark:
// the test then sees what the role and replication ID reads catch on their own (without it the
// mark, wiped by the sync, catches it first: KeyspaceMarkTest).
void copy_mark(const support::RedisServer& server, const support::RedisServer& upstream) {
  const auto mark = get(server, "redlock:__redlock_mark");
  ASSERT_TRUE(mark.has_value());
  upstream.command({"SET", "redlock:__redlock_mark", *mark});
}

// Promotes a replica and waits until its backlog is freed (repl-backlog-ttl 1): master_replid2,
// which a promotion sets to the ID it had as a replica, is back to zeros then.
void promote_and_free_backlog(const support::RedisServer& server) {
  server.command({"REPLICAOF", "NO", "ONE"});
  server.command({"CONFIG", "SET", "repl-backlog-ttl", "1"});
  ASSERT_TRUE(eventually(
      [&] {
        return server.command({"INFO", "replication"})
                   .str.find("master_replid2:0000000000000000000000000000000000000000") != std::string::npos;
      },
      10s));
}

// Master 0 is not counted, and its row says why (`why`): with master 2 frozen, the decision
// waits for master 0's row.
void expect_master_0_not_counted(Client& client, RedisServerGroup& masters, const std::string& key,
                                 const std::string& why) {
  masters[2].freeze();
  const Result after = client.acquire(key);
  masters[2].thaw();
  if (after.ok()) client.release(*after.lock);
  EXPECT_EQ(after.masters[0].status, MasterStatus::not_counted) << format_result(after);
  EXPECT_NE(after.masters[0].error.find(why), std::string::npos) << format_result(after);
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
  ASSERT_TRUE(every_master_counts(client, "later"));
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
    ASSERT_TRUE(every_master_counts(first, "warm-up-1"));
    ASSERT_TRUE(every_master_counts(second, "warm-up-2"));
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
    EXPECT_EQ(first.remaining(*held.lock).count(), 0) << "a lost lock has no validity left to act on";
    const Result extended = first.extend(*held.lock);
    EXPECT_EQ(extended.outcome, Outcome::lost) << format_result(extended);
    EXPECT_TRUE(extended.masters.empty());
  }
  EXPECT_GT(held.lock->deadline, first.now()) << "the scenario must run while the first lock is valid";
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
  ASSERT_TRUE(every_master_counts(client, "warm-up"));
  const Result held = client.acquire("k3");
  ASSERT_TRUE(held);
  // Wait for the straggler's grant too: k = 3 of N = 3.
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3u; }));
  // A grant still in flight at the decision is counted when its reply is read, which a
  // loaded machine may delay past any sleep. So restart that straggler first (its vote may
  // or may not have been counted: either way 2 counted grantors remain), then one whose
  // grant was counted at the decision: 1 remains.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < 3; ++i) {
    if (held.masters[i].status != MasterStatus::ok) order.insert(order.begin(), i);
    else order.push_back(i);
  }
  ASSERT_EQ(held.masters[order[1]].status, MasterStatus::ok) << format_result(held);

  masters[order[0]].kill();
  masters[order[0]].restart();
  ASSERT_TRUE(client.wait_connected(3, 5s));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(held.lock->lost()) << "2 of 3 grantors remain: still a quorum";

  masters[order[1]].kill();
  masters[order[1]].restart();
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

// Polls acquires (N = 1 masters: one vote decides) until the master's grant is counted;
// returns when that happened on the steady clock, or nullopt after `limit`.
std::optional<std::chrono::steady_clock::time_point> first_counted(Client& client, std::chrono::milliseconds limit) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < give_up) {
    const Result r = client.acquire("probe");
    const auto at = std::chrono::steady_clock::now();
    if (r) {
      client.release(*r.lock);
      return at;
    }
    std::this_thread::sleep_for(10ms);
  }
  return std::nullopt;
}

// Redis computes uptime_in_seconds from whole wall-clock seconds, so a server started at
// x.9 s reads "1" about 0.1 s later. A Client that trusted it would count a restarted master
// ~0.9 s early, while the lock it forgot may still be held elsewhere. Started just before a
// wall-clock second turns over, the master must still not be counted before max_lock_ttl
// has passed since it restarted.
TEST(RestartGuardTest, UptimeRoundedUpNeverCountsAMasterEarly) {
  RedisServer master;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("restart " + std::to_string(round));
    // Restart at ~x.8 s on the wall clock, and make first contact just after the second
    // turns over, when the server is ~0.25 s old and uptime_in_seconds already says 1.
    const auto wall_ms = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch());
    };
    while (wall_ms() % 1000 < 780ms || wall_ms() % 1000 >= 810ms) std::this_thread::sleep_for(2ms);
    const auto restarted_at = std::chrono::steady_clock::now();
    const auto restart_second = wall_ms() / 1000;
    master.kill();
    master.restart();
    while (wall_ms() / 1000 == restart_second || wall_ms() % 1000 < 20ms) std::this_thread::sleep_for(2ms);
    auto options = options_for({master.uri()});
    options.restart_guard = true;
    options.ttl = 1000ms;
    options.max_lock_ttl = 2000ms;
    Client client(options);  // first contact: uptime is all it has to go on
    const auto counted_at = first_counted(client, 10s);
    ASSERT_TRUE(counted_at.has_value()) << "never counted";
    EXPECT_GE(*counted_at - restarted_at, options.max_lock_ttl)
        << "counted " << std::chrono::duration_cast<std::chrono::milliseconds>(*counted_at - restarted_at).count()
        << " ms after the restart";
  }
}

// A private directory for the clock shim's control file.
struct ClockDir {
  ClockDir() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/redlock-guard-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = pattern;
  }
  ~ClockDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

// A restarted master whose wall clock then steps forward reports a huge uptime. A Client
// that saw the restart (a new run_id) measures that master's age on its own monotonic
// clock from that moment, so the step does not make it look old.
TEST(RestartGuardTest, AWallClockStepAfterARestartDoesNotMakeAMasterLookOld) {
  ClockDir dir;
  chaos::ClockControl clock(dir.path + "/clock");
  support::RedisServerOptions shimmed;
  shimmed.environment = clock.server_environment();
  RedisServer master(shimmed);
  auto options = options_for({master.uri()});
  options.restart_guard = true;
  options.ttl = 1000ms;
  options.max_lock_ttl = 2000ms;
  Client client(options);
  ASSERT_TRUE(first_counted(client, 10s).has_value());

  // Taken before the kill: the Client may see the new run_id before restart() returns.
  const auto restarted_at = std::chrono::steady_clock::now();
  master.kill();
  master.restart();
  clock.jump(600s);
  // Make the Client read INFO again now that uptime_in_seconds says ~600.
  ASSERT_TRUE(eventually([&] {
    master.command({"CLIENT", "KILL", "TYPE", "normal"});
    const Reply info = master.command({"INFO", "server"});
    return info.str.find("uptime_in_seconds:60") != std::string::npos;
  }));
  std::this_thread::sleep_for(100ms);
  master.command({"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_TRUE(client.wait_connected(1, 5s));

  const Result early = client.acquire("stepped");
  EXPECT_NE(early.outcome, Outcome::acquired) << format_result(early);
  EXPECT_EQ(early.masters[0].status, MasterStatus::not_counted) << format_result(early);
  const auto counted_at = first_counted(client, 10s);
  ASSERT_TRUE(counted_at.has_value());
  EXPECT_GE(*counted_at - restarted_at, options.max_lock_ttl);
}

// A master that loses nothing on restart (appendonly yes + appendfsync always) needs no
// quarantine after a restart this Client saw from a durable incarnation: counted at once, a
// row says which rule counted it, and its restarts take no votes away.
TEST(RestartGuardTest, DurableMastersAreCountedAtOnceAndKeepTheirVotesAcrossRestarts) {
  support::RedisServerOptions durable;
  durable.persistence = true;
  RedisServerGroup masters(3, durable);
  Client first(guarded(masters, true));
  Client second(guarded(masters, true));
  // A first contact cannot know whether a young durable master was durable before its last
  // restart: the age rule applies to it (AMasterRestartedWithAofSwitchedOnIsNotCountedAtOnce).
  ASSERT_TRUE(every_master_counts(first, "warm-up-1"));
  ASSERT_TRUE(every_master_counts(second, "warm-up-2"));
  const Result held = first.acquire("durable-guarded");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3u; }));
  for (const std::size_t i : {0u, 1u}) {
    masters[i].kill();
    masters[i].restart();
  }
  ASSERT_TRUE(first.wait_connected(3, 5s));
  ASSERT_TRUE(second.wait_connected(3, 5s));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(held.lock->lost()) << "durable masters forgot nothing";
  const Result other = second.acquire("durable-guarded");
  EXPECT_EQ(other.outcome, Outcome::taken) << format_result(other);
  const Result extended = first.extend(*held.lock);
  EXPECT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  for (const std::size_t i : {0u, 1u}) {  // young, yet counted: the row says by which rule
    if (extended.masters[i].status != MasterStatus::ok) continue;
    EXPECT_NE(extended.masters[i].error.find("restarted from a durable incarnation"), std::string::npos)
        << format_result(extended);
  }
}

// A failover behind one address is not a restart, even from a durable server to a durable one:
// the server that takes over (here another durable redis-server, up since before the Client
// lost the old one, that never saw a lock) did not reload what the old one granted. It is a
// new incarnation like any other: not counted for max_lock_ttl. Before, both being durable
// counted it at once, with the votes the old server had given.
TEST(RestartGuardTest, ADurableServerTakingOverTheAddressIsNotCountedAtOnce) {
  support::RedisServerOptions durable;
  durable.persistence = true;
  RedisServerGroup masters(4, durable);  // masters[3] takes over master 0's address
  TcpProxy address(masters[0].port(), {});
  auto options = guarded(masters, true);
  options.masters = {address.uri(), masters[1].uri(), masters[2].uri()};
  Client client(options);
  ASSERT_TRUE(every_master_counts(client, "warm-up"));
  const Result held = client.acquire("failover");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  std::this_thread::sleep_for(1s);  // masters[3] is now clearly older than the loss below
  masters[0].kill();
  address.retarget(masters[3].port());
  ASSERT_TRUE(client.wait_connected(3, 5s));
  expect_master_0_not_counted(client, masters, "after-failover", "counted after");
}

// A master that voted, then restarted and was reconnected to before the round decided, has
// forgotten what it granted: its vote is taken back, as a restart takes a held lock's away.
// Here master 0 grants, restarts empty while master 1 (frozen) has not answered, and master 2
// is held by another owner: only master 1's grant is left, one of two needed. Before, the
// vote was counted under the new incarnation and the lock granted on one real key.
TEST(RestartGuardTest, AVoteFromAMasterThatRestartedBeforeTheDecisionIsTakenBack) {
  RedisServerGroup masters(3);
  auto options = guarded(masters, true);
  options.command_timeout = 1500ms;  // the round waits for master 1 while master 0 restarts
  options.retry_count = 0;
  std::promise<Result> decided;  // outlives the Client, which may call back as it ends
  auto future = decided.get_future();
  Client client(options);
  ASSERT_TRUE(every_master_counts(client, "warm-up"));
  const Result warm = client.acquire("warm-up");
  ASSERT_TRUE(warm) << format_result(warm);
  const Result released = client.release(*warm.lock);  // a release's rows are not votes
  ASSERT_EQ(released.outcome, Outcome::released) << format_result(released);
  masters[2].command({"SET", "redlock:restarted-voter", "other-owner", "PX", "60000"});
  masters[1].freeze();
  client.acquire_async("restarted-voter", [&decided](Result r) { decided.set_value(std::move(r)); });
  ASSERT_TRUE(eventually([&] { return masters[0].command({"EXISTS", "redlock:restarted-voter"}).integer == 1; }, 2s));
  std::this_thread::sleep_for(50ms);  // master 0's grant is read
  masters[0].kill();
  ASSERT_TRUE(eventually([&] { return !client.wait_connected(3, 20ms); }, 2s)) << "the drop was not noticed";
  masters[0].restart();  // no persistence: the grant is gone
  ASSERT_TRUE(client.wait_connected(3, 2s)) << "master 0 was not reconnected to within the round";
  masters[1].thaw();
  const Result result = future.get();
  EXPECT_NE(result.outcome, Outcome::acquired) << format_result(result);
  EXPECT_EQ(result.masters[0].status, MasterStatus::not_counted) << format_result(result);
  EXPECT_NE(result.masters[0].error.find("restarted after its vote"), std::string::npos) << format_result(result);
  EXPECT_EQ(result.masters[1].status, MasterStatus::ok) << format_result(result);
  if (result) client.release(*result.lock);
}

// The same between a fenced acquire's two rounds: masters 0 and 1 granted in round 1 (master 2
// holds another owner's key), master 0 acknowledged the raise and then restarted empty while
// the fencing round waited for master 1. Master 1's raise then makes two acknowledgements,
// but master 0's is taken back: the lock's grants are down to master 1's alone. (Before only a
// granting master's raise counted, master 2's raise made the quorum and the lock was handed out
// with master 0's lost grant counted; ClientImpl::grant still checks the lock's own votes.)
TEST(RestartGuardTest, AGrantLostDuringTheFencingRoundIsNotHandedOut) {
  RedisServerGroup masters(3);
  const std::string raise_sha = detail::Script(detail::kFenceRaiseScript).sha1;
  // Master 1 holds the fencing round's raise back, so its decision waits for master 1.
  std::atomic<int> to_hold{0};
  std::atomic<int> held{0};
  // The warm-up's own raise may reach master 1 late (its round decided without it), after the
  // hold is armed: it carries the warm-up's token and is let through.
  std::atomic<std::uint64_t> warm_fence{0};
  std::promise<void> let_raises_go;
  std::shared_future<void> go = let_raises_go.get_future().share();
  const auto hold_raise = [&](std::string_view chunk) {
    // to_hold first: armed after warm_fence is stored, so the value read below is the warm-up's.
    if (chunk.find(raise_sha) == std::string_view::npos || to_hold.load() <= 0) return;
    const std::string warm = std::to_string(warm_fence.load());  // the raise's one argument
    const std::string warm_raise = "redlock-fence-counter\r\n$" + std::to_string(warm.size()) + "\r\n" + warm + "\r\n";
    if (chunk.find(warm_raise) != std::string_view::npos) return;
    if (to_hold.fetch_sub(1) <= 0) return;
    ++held;
    go.wait_for(5s);
  };
  TcpProxy master0(masters[0].port(), [](std::string_view) {});
  TcpProxy master1(masters[1].port(), hold_raise);
  auto options = guarded(masters, true);
  options.masters = {master0.uri(), master1.uri(), masters[2].uri()};
  options.command_timeout = 1500ms;  // the fencing round waits for master 1 while master 0 restarts
  std::promise<Result> decided;  // outlives the Client, which may call back as it ends
  auto future = decided.get_future();
  Client client(options);
  ASSERT_TRUE(every_master_counts(client, "warm-up"));
  AcquireOptions fenced;
  fenced.fencing = true;
  fenced.retry_count = 0;
  // The counters' catch-ups (one command deadline after the first connect) ended during the
  // wait above.
  const Result warm = client.acquire("warm-up-fenced", fenced);
  ASSERT_TRUE(warm) << format_result(warm);
  const Result released = client.release(*warm.lock);
  ASSERT_EQ(released.outcome, Outcome::released) << format_result(released);
  warm_fence = warm.lock->fence;
  masters[2].command({"SET", "redlock:fenced-voter", "other-owner", "PX", "60000"});
  to_hold = 1;
  client.acquire_async("fenced-voter", [&decided](Result r) { decided.set_value(std::move(r)); }, fenced);
  ASSERT_TRUE(eventually([&] { return held.load() == 1 || future.wait_for(0s) == std::future_status::ready; }));
  if (held.load() != 1) {
    let_raises_go.set_value();
    FAIL() << "decided before its fencing round's raises were held: " << format_result(future.get());
  }
  std::this_thread::sleep_for(200ms);  // master 0's raise, not held, is answered meanwhile
  masters[0].kill();
  ASSERT_TRUE(eventually([&] { return !client.wait_connected(3, 20ms); }, 2s)) << "the drop was not noticed";
  masters[0].restart();  // no persistence: round 1's grant is gone
  ASSERT_TRUE(client.wait_connected(3, 2s)) << "master 0 was not reconnected to within the round";
  let_raises_go.set_value();
  const Result result = future.get();
  EXPECT_NE(result.outcome, Outcome::acquired) << format_result(result);
  EXPECT_EQ(result.masters[0].status, MasterStatus::not_counted) << format_result(result);
  EXPECT_NE(result.masters[0].error.find("restarted after its vote"), std::string::npos) << format_result(result);
  if (result) client.release(*result.lock);
}

// A master that comes back from a restart with AOF switched on is durable from now on, but it
// came back empty: what its previous, non-durable incarnation granted is gone. Counting it at
// once (as durable) hands out a lock that is still held. Only a restart from a durable
// incarnation into a durable one keeps the keys; a first contact cannot know which it was.
TEST(RestartGuardTest, AMasterRestartedWithAofSwitchedOnIsNotCountedAtOnce) {
  RedisServerGroup masters(3);
  auto options = guarded(masters, true);
  options.reconnect_min = 400ms;  // time to switch AOF on before the client is back
  options.reconnect_max = 400ms;
  Client first(options);
  ASSERT_TRUE(every_master_counts(first, "warm-up"));
  const Result held = first.acquire("aof-switched-on");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3u; }));
  for (const std::size_t i : {0u, 1u}) {
    masters[i].kill();
    masters[i].restart();  // no persistence: empty
    masters[i].command({"CONFIG", "SET", "appendonly", "yes"});
    masters[i].command({"CONFIG", "SET", "appendfsync", "always"});
  }
  Client second(guarded(masters, true));  // first contact with the restarted masters
  ASSERT_TRUE(second.wait_connected(3, 5s));
  ASSERT_TRUE(first.wait_connected(3, 5s));
  std::this_thread::sleep_for(100ms);
  ASSERT_GT(held.lock->deadline, first.now()) << "the scenario must run while the first lock is valid";
  const Result other = second.acquire("aof-switched-on");
  EXPECT_NE(other.outcome, Outcome::acquired) << "a second holder\n" << format_result(other);
  const Result seen = first.acquire("another");  // the client that saw the restarts
  if (seen) first.release(*seen.lock);
  EXPECT_NE(seen.outcome, Outcome::acquired) << format_result(seen);
  for (const std::size_t i : {0u, 1u}) {
    for (const Result* r : {&other, &seen}) {
      const MasterResult& row = r->masters[i];
      if (row.status == MasterStatus::pending) continue;
      EXPECT_EQ(row.status, MasterStatus::not_counted) << format_result(*r);
    }
  }
  EXPECT_GT(held.lock->deadline, first.now()) << "the scenario must run while the first lock is valid";
}

// Masters 0 and 1 of three, which granted `held` (first's lock on `resource`), came back
// without its key: first must know it lost, and second must not be granted it.
void two_of_three_grants_gone(RedisServerGroup& masters, Client& first, Client& second, const Result& held,
                              const std::string& resource) {
  ASSERT_EQ(holding(masters, held.lock->key, held.lock->token), 1u);
  ASSERT_TRUE(first.wait_connected(3, 5s));
  ASSERT_TRUE(second.wait_connected(3, 5s));
  std::this_thread::sleep_for(100ms);
  ASSERT_GT(held.lock->deadline, first.now()) << "the scenario must run while the first lock is valid";
  EXPECT_TRUE(held.lock->lost()) << "two of its three grants are gone";
  const Result other = second.acquire(resource);
  if (other) second.release(*other.lock);
  EXPECT_NE(other.outcome, Outcome::acquired) << "a second holder\n" << format_result(other);
  for (const std::size_t i : {0u, 1u}) {
    if (other.masters[i].status == MasterStatus::pending) continue;
    EXPECT_EQ(other.masters[i].status, MasterStatus::not_counted) << format_result(other);
  }
  EXPECT_GT(held.lock->deadline, first.now()) << "the scenario must run while the first lock is valid";
}

// The other way round: AOF switched off at run time (CONFIG SET appendonly no) on a live,
// durable incarnation. What it grants from then on is in memory only, and a restart from the
// unchanged config file (appendonly yes) reloads the old AOF without it. Clients connected
// since before the switch must notice it while the connection lives, not only at a handshake
// (before: both masters were counted at once after the restart, the lock granted after the
// switch was not marked lost, and another Client was granted it: two holders).
TEST(RestartGuardTest, AofSwitchedOffOnALiveMasterIsNoticedBeforeItRestarts) {
  support::RedisServerOptions durable;
  durable.persistence = true;
  RedisServerGroup masters(3, durable);
  Client first(guarded(masters, true));
  Client second(guarded(masters, true));
  ASSERT_TRUE(every_master_counts(first, "warm-up-1"));
  ASSERT_TRUE(every_master_counts(second, "warm-up-2"));
  for (const std::size_t i : {0u, 1u}) masters[i].command({"CONFIG", "SET", "appendonly", "no"});
  std::this_thread::sleep_for(2500ms);  // the Clients re-read durability every second
  const Result held = first.acquire("aof-switched-off");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3u; }));
  for (const std::size_t i : {0u, 1u}) {
    masters[i].kill();
    masters[i].restart();  // appendonly yes again, from the old AOF: the key is gone
  }
  two_of_three_grants_gone(masters, first, second, held, "aof-switched-off");
}

// A durable master restarted without its AOF (the new incarnation started with appendonly no,
// so it loaded nothing), then switched to appendonly yes / always before this Client's first
// handshake with it: the configuration it shows then is durable, but it is empty. AOF switched
// on at run time starts a rewrite (INFO persistence: aof_rewrites 1), one on since the start has
// none. Before: both counted at once with their votes kept, and the second Client was granted
// the lock the first still held on one master (review; two holders).
// `reset_stats`: CONFIG RESETSTAT once the rewrite is over, which zeroes aof_rewrites (review of
// the fix: counted at once again). aof_last_rewrite_time_sec is not reset: it says a rewrite ran.
void durable_master_restarted_empty_with_aof_switched_on_later(bool reset_stats) {
  support::RedisServerOptions durable;
  durable.persistence = true;
  RedisServerGroup masters(3, durable);
  auto options = guarded(masters, true);
  options.reconnect_min = 600ms;  // time to switch AOF on before the Clients are back
  options.reconnect_max = 600ms;
  Client first(options);
  Client second(options);
  ASSERT_TRUE(every_master_counts(first, "warm-up-1"));
  ASSERT_TRUE(every_master_counts(second, "warm-up-2"));
  const Result held = first.acquire("aof-on-later");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3u; }));
  for (const std::size_t i : {0u, 1u}) {
    masters[i].kill();
    masters[i].restart({"--appendonly", "no"});  // comes back empty
    masters[i].command({"CONFIG", "SET", "appendonly", "yes"});
    masters[i].command({"CONFIG", "SET", "appendfsync", "always"});
    if (reset_stats) {
      ASSERT_TRUE(eventually([&] {
        const std::string info = masters[i].command({"INFO", "persistence"}).str;
        return info.find("aof_rewrite_in_progress:0") != std::string::npos &&
               info.find("aof_rewrite_scheduled:0") != std::string::npos;
      }));
      masters[i].command({"CONFIG", "RESETSTAT"});
      ASSERT_NE(masters[i].command({"INFO", "persistence"}).str.find("aof_rewrites:0"), std::string::npos);
    }
  }
  two_of_three_grants_gone(masters, first, second, held, "aof-on-later");
}

TEST(RestartGuardTest, ADurableMasterRestartedEmptyWithAofSwitchedOnLaterIsNotCountedAtOnce) {
  durable_master_restarted_empty_with_aof_switched_on_later(false);
}

TEST(RestartGuardTest, ADurableMasterRestartedEmptyWithAofSwitchedOnAndStatsResetIsNotCountedAtOnce) {
  durable_master_restarted_empty_with_aof_switched_on_later(true);
}

// What this Client knows of a durable master's durability ends when it loses the connection:
// AOF may be switched off after that (grants from other Clients then in memory only) and the
// master restarted much later. So a restart counts at once only if the new incarnation started
// soon after this Client last read the old one durable (RestartGuard::kDurableReadGap).
// Before, a Client cut off from master 0 for 6 s, which then restarted, counted it at once.
TEST(RestartGuardTest, ADurableMasterRestartedLongAfterThisClientLostItIsNotCountedAtOnce) {
  support::RedisServerOptions durable;
  durable.persistence = true;
  RedisServerGroup masters(3, durable);
  TcpProxy address(masters[0].port(), {});
  auto options = guarded(masters, true);
  options.masters = {address.uri(), masters[1].uri(), masters[2].uri()};
  options.reconnect_min = 100ms;
  options.reconnect_max = 100ms;
  Client client(options);
  ASSERT_TRUE(every_master_counts(client, "warm-up"));
  address.retarget(1);  // cut off: port 1, where nothing listens
  std::this_thread::sleep_for(6s);
  masters[0].kill();
  masters[0].restart();
  address.retarget(masters[0].port());
  ASSERT_TRUE(client.wait_connected(3, 5s));
  expect_master_0_not_counted(client, masters, "restarted-while-cut-off", "counted after");
}

// Review 54: masters 0 and 2 went from a durable incarnation to an empty one (appendonly no)
// while Client A was cut off from them; Client B saw the empty ones, waited out its guard and
// was granted; then they came back durable, loading the first incarnation's AOF, without B's
// key. A took the first -> third for a durable restart and counted it at once: it started
// within kDurableReadGapNs (5 s) of A's last durability read. A was granted while B held the
// lock, 6 of 6 in the review (ttl 1.5 s; any max_lock_ttl below about 4.5 s). An incarnation
// that granted in between had to count first, which takes a non-durable one max_lock_ttl: a
// restart later than that after the last read is not counted at once.
TEST(RestartGuardTest, ADurableRestartAfterAnUnseenEmptyIncarnationIsNotCountedAtOnce) {
  support::RedisServerOptions durable;
  durable.persistence = true;
  RedisServerGroup masters(3, durable);
  TcpProxy a_to_0(masters[0].port(), {});
  TcpProxy a_to_2(masters[2].port(), {});
  TcpProxy b_to_0(masters[0].port(), {});
  TcpProxy b_to_2(masters[2].port(), {});
  auto a_options = guarded(masters, true);
  a_options.masters = {a_to_0.uri(), masters[1].uri(), a_to_2.uri()};
  auto b_options = guarded(masters, true);
  b_options.masters = {b_to_0.uri(), masters[1].uri(), b_to_2.uri()};
  for (ClientOptions* options : {&a_options, &b_options}) {
    options->reconnect_min = 50ms;
    options->reconnect_max = 200ms;
  }
  Client a(a_options);
  Client b(b_options);
  ASSERT_TRUE(every_master_counts(a, "warm-up"));
  ASSERT_TRUE(every_master_counts(b, "warm-up"));
  std::this_thread::sleep_for(1200ms);  // a durability read of A's on masters 0 and 2
  a_to_0.retarget(1);                   // A cut off: port 1, where nothing listens
  a_to_2.retarget(1);
  for (const std::size_t i : {0u, 2u}) {
    masters[i].kill();
    masters[i].restart({"--appendonly", "no"});  // empty, and writing no AOF
  }
  std::optional<Lock> b_held;
  ASSERT_TRUE(eventually(
      [&] {
        Result r = b.acquire("unseen");
        if (r) b_held = *r.lock;
        return r.ok();
      },
      6s))
      << "B was not granted by the empty incarnations";
  b_to_0.retarget(1);  // B stays cut off too: it keeps its lock (an availability cost only)
  b_to_2.retarget(1);
  for (const std::size_t i : {0u, 2u}) {
    masters[i].kill();
    masters[i].restart({"--appendonly", "yes"});  // the first incarnation's AOF, without B's key
  }
  a_to_0.retarget(masters[0].port());
  a_to_2.retarget(masters[2].port());
  ASSERT_TRUE(a.wait_connected(3, 5s));
  const Result a_try = a.acquire("unseen");
  const auto now = b.now();
  const bool both = a_try.ok() && !b_held->lost() && b_held->deadline > now;
  EXPECT_FALSE(both) << "A was granted while B held the lock (" << b.remaining(*b_held).count()
                     << " us left): " << format_result(a_try);
  if (a_try) a.release(*a_try.lock);
}

// One server reached through two addresses is one vote: with a dead third master, the
// twin alone must not make a quorum of 2.
TEST(RestartGuardTest, OneServerListedTwiceGivesOneVote) {
  for (const bool guard : {false, true}) {
    SCOPED_TRACE(guard ? "guard on" : "guard off");
    support::RedisServerOptions two_addresses;
    two_addresses.extra_args = {"--bind", "127.0.0.1", "127.0.0.2"};
    RedisServer twin(two_addresses);
    // The dead third master: port 1, where nothing in the suite listens (a killed server's
    // port could be taken by a parallel test's server and vote).
    const std::string gone_uri = "redis://127.0.0.1:1";
    const std::string port = std::to_string(twin.port());
    auto options = options_for({"redis://127.0.0.1:" + port + "/0", "redis://127.0.0.2:" + port + "/1", gone_uri});
    options.restart_guard = guard;
    options.ttl = 1000ms;  // the guard counts the twin after about 2 s (uptime - 1 > 1 s)
    options.max_lock_ttl = 1000ms;
    std::vector<std::string> warnings;
    std::mutex warnings_mutex;
    options.on_warning = [&](const std::string& text) {
      const std::lock_guard lock(warnings_mutex);
      warnings.push_back(text);
    };
    Client client(options);
    ASSERT_TRUE(client.wait_connected(2, 5s));
    // The test is about identity: with the guard on, first wait until its age rule counts both
    // twins. Each connection reads the server's age from its own INFO in whole seconds, so one
    // twin may be counted up to a second before the other (its row then names the guard).
    ASSERT_TRUE(eventually([&] {
      const Result r = client.acquire("twin-warm-up");
      const auto mentions_guard = [](const MasterResult& row) {
        return row.error.find("restart guard") != std::string::npos;
      };
      return r.count(MasterStatus::ok) == 1u && !mentions_guard(r.masters[0]) && !mentions_guard(r.masters[1]);
    }));
    for (int attempt = 0; attempt < 3; ++attempt) {
      const Result r = client.acquire("twin-" + std::to_string(attempt));
      EXPECT_NE(r.outcome, Outcome::acquired) << format_result(r);
      EXPECT_EQ(r.count(MasterStatus::ok), 1u) << format_result(r);
      const auto& second_row = r.masters[0].status == MasterStatus::ok ? r.masters[1] : r.masters[0];
      EXPECT_EQ(second_row.status, MasterStatus::not_counted) << format_result(r);
      EXPECT_NE(second_row.error.find("same server"), std::string::npos) << format_result(r);
    }
    const std::lock_guard lock(warnings_mutex);
    ASSERT_FALSE(warnings.empty());
    EXPECT_NE(warnings[0].find("127.0.0.1:" + port), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("127.0.0.2:" + port), std::string::npos) << warnings[0];
  }
}

TEST(RestartGuardTest, ATtlLongerThanTheGuardWindowIsRefused) {
  RedisServerGroup masters(1);
  Client client(guarded(masters, true));
  AcquireOptions too_long;
  too_long.ttl = 5000ms;
  const Result result = client.acquire("long", too_long);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument);
  EXPECT_NE(result.message.find("max_lock_ttl"), std::string::npos) << result.message;
  EXPECT_EQ(with_key(masters, "redlock:long"), 0u);

  // The same bound holds for every later ttl of a granted lock: an extend or a Lease renewing
  // past max_lock_ttl would outlive the window a restarted master is quarantined for.
  ASSERT_TRUE(every_master_counts(client, "warm-up"));
  AcquireOptions short_ttl;
  short_ttl.ttl = 1000ms;
  const Result held = client.acquire("long", short_ttl);
  ASSERT_TRUE(held) << format_result(held);
  const Result extended = client.extend(*held.lock, 5000ms);
  EXPECT_EQ(extended.outcome, Outcome::invalid_argument) << format_result(extended);
  EXPECT_NE(extended.message.find("max_lock_ttl"), std::string::npos) << extended.message;
  EXPECT_LE(masters[0].command({"PTTL", held.lock->key}).integer, 1000);
  LeaseOptions keep_long;
  keep_long.ttl = 5000ms;
  try {
    auto lease = client.keep(*held.lock, keep_long);
    ADD_FAILURE() << "a Lease renewing to 5000 ms past max_lock_ttl 2000 ms was started";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("max_lock_ttl"), std::string::npos) << error.what();
  }
  EXPECT_LE(masters[0].command({"PTTL", held.lock->key}).integer, 1000);
  EXPECT_TRUE(client.release(*held.lock));
}

}  // namespace
// A review: a replica that accepts writes (replica-read-only no), listed as a master, grants
// the lock's SET; a full resync from its own master then wipes the key (and the fencing
// counter) while its run_id and the connection stay, so the restart guard sees nothing and a
// second client was granted beside the first (5 of 5; fencing tokens went 8 -> 1). The
// handshake reads INFO replication: a replica's grants are not counted.
TEST(RestartGuardTest, AWritableReplicaListedAsAMasterIsNotCounted) {
  RedisServerGroup masters(3);
  RedisServerGroup upstream(1);
  masters[1].command({"CONFIG", "SET", "replica-read-only", "no"});
  ASSERT_NO_FATAL_FAILURE(make_replica(masters[1], upstream[0]));
  auto options = options_for(masters);
  std::vector<std::string> warnings;
  std::mutex warnings_mutex;
  options.on_warning = [&](const std::string& warning) {
    const std::lock_guard hold(warnings_mutex);
    warnings.push_back(warning);
  };
  options.retry_count = 0;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  // With the third master gone, the replica's vote would complete the quorum.
  masters[2].stop();
  const Result result = client.acquire("replicated");
  EXPECT_FALSE(result.ok()) << format_result(result);
  EXPECT_EQ(result.masters[1].status, MasterStatus::not_counted) << format_result(result);
  EXPECT_NE(result.masters[1].error.find("replica"), std::string::npos) << format_result(result);
  if (result.ok()) client.release(*result.lock);
  {
    const std::lock_guard hold(warnings_mutex);
    std::string all;
    for (const auto& warning : warnings) all += warning + "\n";
    EXPECT_NE(all.find("is a replica (of 127.0.0.1:" + std::to_string(upstream[0].port()) + ")"), std::string::npos)
        << all;
  }
  // Its role is read again every second (MasterSet::kReadEvery): warned about once.
  std::this_thread::sleep_for(700ms);
  {
    const std::lock_guard hold(warnings_mutex);
    std::size_t replica_warnings = 0;
    for (const auto& warning : warnings) replica_warnings += warning.find("is a replica") != std::string::npos ? 1u : 0u;
    EXPECT_EQ(replica_warnings, 1u);
  }
  // Promoted (REPLICAOF NO ONE keeps the connections), it votes again without any other
  // reconnect (a review: it stayed not counted, and quorum_unreachable with two healthy masters).
  masters[1].command({"REPLICAOF", "NO", "ONE"});
  Result promoted;
  EXPECT_TRUE(eventually(
      [&] {
        promoted = client.acquire("promoted");
        if (promoted.ok()) client.release(*promoted.lock);
        return promoted.ok();
      },
      5s))
      << format_result(promoted);
}

// Made a writable replica at run time while this Client stays connected (REPLICAOF keeps
// client connections), a master's keys are replaced by the resync from its new master while
// its run_id and our connection stay. The lock is held on masters 1 and 2 only (master 0 held
// by a stale owner's key that expires 300 ms later); master 1's resync wipes it, and
// master 1 still takes SETs: a second Client would be granted by masters 0 and 1, two holders
// (a review found a master made a replica at run time kept voting). The role is read again
// every second on a live connection: the replica does not vote, and the votes it gave are
// taken away from held locks (here: below quorum, lost). Promoted again, it counts once
// max_lock_ttl has passed since it was last seen a replica.
TEST(RestartGuardTest, AMasterMadeAReplicaWhileConnectedStopsVotingAndLosesItsVotes) {
  RedisServerGroup masters(3);
  RedisServerGroup upstream(1);
  upstream[0].command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});  // a resync at once, not 5 s later
  auto options = guarded(masters, true);
  options.ttl = 4000ms;
  options.max_lock_ttl = 4000ms;
  options.retry_count = 0;
  Client first(options);
  Client second(options);
  ASSERT_TRUE(every_master_counts(first, "warm-up-1"));
  ASSERT_TRUE(every_master_counts(second, "warm-up-2"));
  masters[0].command({"SET", "redlock:demoted", "stale-owner", "PX", "300"});
  const Result held = first.acquire("demoted");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  ASSERT_NE(held.masters[0].status, MasterStatus::ok) << format_result(held);  // held_by_other, or pending
  masters[1].command({"CONFIG", "SET", "replica-read-only", "no"});
  ASSERT_NO_FATAL_FAILURE(make_replica(masters[1], upstream[0]));
  ASSERT_EQ(masters[1].command({"EXISTS", "redlock:demoted"}).integer, 0);  // wiped by the resync
  ASSERT_EQ(masters[2].command({"EXISTS", "redlock:demoted"}).integer, 1);
  std::this_thread::sleep_for(1500ms);  // one role read (every second) and then some
  const Result taken = second.acquire("demoted");
  EXPECT_FALSE(taken.ok()) << "two holders: " << format_result(taken);
  if (taken.ok()) second.release(*taken.lock);
  EXPECT_EQ(taken.masters[1].status, MasterStatus::not_counted) << format_result(taken);
  EXPECT_NE(taken.masters[1].error.find("replica"), std::string::npos) << format_result(taken);
  // The first Client's vote from master 1 is gone (its key was wiped): one of two needed.
  EXPECT_TRUE(eventually([&] { return held.lock->lost(); }, 2s));
  first.release(*held.lock);

  masters[1].command({"REPLICAOF", "NO", "ONE"});
  std::this_thread::sleep_for(1500ms);
  masters[2].freeze();  // the decision then waits for master 1's row
  const Result promoted = second.acquire("promoted");
  masters[2].thaw();
  if (promoted.ok()) second.release(*promoted.lock);
  EXPECT_EQ(promoted.masters[1].status, MasterStatus::not_counted) << format_result(promoted);
  EXPECT_NE(promoted.masters[1].error.find("a replica"), std::string::npos) << format_result(promoted);
  EXPECT_NE(promoted.masters[1].error.find("restart guard"), std::string::npos) << format_result(promoted);
  ASSERT_TRUE(every_master_counts(second, "counted-again"));
}

// The same change made while this Client was cut off from the master, and undone before it
// reconnected: the same run_id, the role master again, but its keys replaced. A promotion
// moves the ID it had as a replica into master_replid2, but a freed backlog clears that (a
// review: with repl-backlog-ttl 1 nothing was detected, two holders 3 of 3, fencing tokens
// 103 -> 1): a changed replication ID counts as keys replaced.
TEST(RestartGuardTest, AMasterMadeAReplicaAndPromotedWhileThisClientWasCutOffIsNotCountedAtOnce) {
  RedisServerGroup masters(3);
  RedisServerGroup upstream(1);
  upstream[0].command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  TcpProxy address(masters[0].port(), {});
  auto options = guarded(masters, true);
  options.masters = {address.uri(), masters[1].uri(), masters[2].uri()};
  options.retry_count = 0;
  Client client(options);
  const Result held = acquire_when_counted(client, "cut-off");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  const std::uint16_t nobody = std::make_unique<LoopbackListener>("closed")->port();
  address.retarget(nobody);  // cut: reconnects are refused until retargeted back
  ASSERT_NO_FATAL_FAILURE(copy_mark(masters[0], upstream[0]));
  ASSERT_NO_FATAL_FAILURE(make_replica(masters[0], upstream[0]));
  ASSERT_NO_FATAL_FAILURE(promote_and_free_backlog(masters[0]));
  address.retarget(masters[0].port());
  ASSERT_TRUE(client.wait_connected(3, 5s));
  // Master 0's key was wiped: the lock's vote from it is gone (two of three left: still held).
  expect_master_0_not_counted(client, masters, "after-cut", "a replica");
  client.release(*held.lock);
}

// A replica flushes its keys before it loads its master's RDB and takes the master's
// replication ID only once the load succeeded: a load that fails (a newer RDB version, say),
// then a promotion, leaves a master with no keys whose master_replid2 is the very ID this
// Client last read (a review: two holders 5 of 5, fencing tokens 6 -> 1, with a master that
// sent a bad RDB), and a new master_replid. Here the same trace, made at once (MULTI: no read
// can fall between) by pointing the master at a port nobody listens on and promoting it back.
TEST(RestartGuardTest, AMasterDemotedAndPromotedBetweenTwoReadsIsTakenForReplacedKeys) {
  RedisServerGroup masters(3);
  auto options = guarded(masters, true);
  options.retry_count = 0;
  Client client(options);
  const Result held = acquire_when_counted(client, "flapped");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  {
    const std::uint16_t nobody = std::make_unique<LoopbackListener>("closed")->port();
    support::RedisContextPtr context(redisConnect("127.0.0.1", masters[0].port()));
    ASSERT_TRUE(context && context->err == 0);
    for (const std::vector<std::string>& argv : {std::vector<std::string>{"MULTI"},
                                                 {"REPLICAOF", "127.0.0.1", std::to_string(nobody)},
                                                 {"REPLICAOF", "NO", "ONE"},
                                                 {"EXEC"}}) {
      ASSERT_TRUE(support::command_argv(*context, argv)) << argv.front();
    }
  }
  std::this_thread::sleep_for(1500ms);  // one role read (every second) and then some
  expect_master_0_not_counted(client, masters, "after-flap", "a replica");
  client.release(*held.lock);
}

// Role reads answered with an error (INFO refused by the ACL here; BUSY from a script and
// LOADING take the same branch, MasterSet::RoleRead) while the master was demoted, promoted and
// its backlog freed (replid2 back to zeros): the next read that tells sees only a new ID, and
// its wiped key must not count as a vote (a review of the same hole with BUSY: two holders 3 of
// 3). Seen failing when errors were ignored under the rule of the day (a change of the ID
// counted only across a gap); any change counts now.
TEST(RestartGuardTest, AMasterPromotedWhileItsRoleReadsWereRefusedIsNotCountedAtOnce) {
  RedisServerGroup masters(3);
  RedisServerGroup upstream(1);
  upstream[0].command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  auto options = guarded(masters, true);
  options.masters.clear();
  for (std::size_t i = 0; i < masters.size(); ++i) {
    masters[i].command({"ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all"});
    options.masters.push_back(with_auth(masters[i].uri(), "locker:pw"));
  }
  options.retry_count = 0;
  Client client(options);
  const Result held = acquire_when_counted(client, "refused-reads");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  masters[0].command({"ACL", "SETUSER", "locker", "-info"});       // at once on the live connection
  std::this_thread::sleep_for(1500ms);                             // a role read refused (NOPERM)
  ASSERT_NO_FATAL_FAILURE(make_replica(masters[0], upstream[0]));  // its key wiped by the full sync
  ASSERT_NO_FATAL_FAILURE(promote_and_free_backlog(masters[0]));
  masters[0].command({"ACL", "SETUSER", "locker", "+info"});
  std::this_thread::sleep_for(1500ms);  // a role read answered: a new ID, replid2 zeros
  expect_master_0_not_counted(client, masters, "after-refused-reads", "a replica");
  client.release(*held.lock);
}

// A role read held up, neither refused nor lost (a review: CLIENT PAUSE 3.5 s on the master
// right after the promotion), across a demotion, a full resync, a promotion and the freed
// backlog that zeroes master_replid2, answers with a new ID and nothing else: no gap, no
// replid2. The review: two holders 4 of 4, fencing tokens 12 -> 1. Any change of the ID counts.
TEST(RestartGuardTest, AMasterPromotedWhileItsRoleReadWasHeldUpIsNotCountedAtOnce) {
  RedisServerGroup masters(3);
  RedisServerGroup upstream(1);
  upstream[0].command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  HeldMaster0 held_master(masters);
  Client client(held_master.options);
  const Result held = acquire_when_counted(client, "held-up");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  held_master.hold = true;  // master 0 reads nothing more from this Client until the backlog is freed
  ASSERT_NO_FATAL_FAILURE(copy_mark(masters[0], upstream[0]));
  ASSERT_NO_FATAL_FAILURE(make_replica(masters[0], upstream[0]));  // its key wiped by the full sync
  ASSERT_NO_FATAL_FAILURE(promote_and_free_backlog(masters[0]));
  held_master.hold = false;
  std::this_thread::sleep_for(1500ms);  // the held reads answered: a new ID, replid2 zeros
  expect_master_0_not_counted(client, masters, "after-held-up", "a replica");
  client.release(*held.lock);
}

// A replica's announced address is printed in its master's INFO replication unchecked, CR LF
// included, so a replica can add field lines of its own ahead of the master's: a fake
// master_replid (the master's old ID) hid a promotion from the first-found reading (a review:
// two holders 5 of 5, fencing tokens 7 -> 1). Fields Redis prints after the replica lines are
// read from their last occurrence.
TEST(RestartGuardTest, AReplicaAnnouncingAFakeReplicationIdDoesNotHideAPromotion) {
  RedisServerGroup masters(3);
  RedisServerGroup others(2);  // 0: the server master 0 is resynced from; 1: the announcing replica
  others[0].command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  masters[0].command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});
  ASSERT_NO_FATAL_FAILURE(make_replica(others[1], masters[0]));
  const auto replication = [&] { return masters[0].command({"INFO", "replication"}).str; };
  const std::string info = replication();
  const auto at = info.find("\nmaster_replid:");
  ASSERT_NE(at, std::string::npos) << info;
  const std::string old_id = info.substr(at + 15, 40);
  others[1].command({"CONFIG", "SET", "replica-announce-ip", "127.0.0.1\r\nmaster_replid:" + old_id + "\r\nx:"});
  others[1].command({"REPLICAOF", "NO", "ONE"});  // and again: the address is announced at a connect
  others[1].command({"REPLICAOF", "127.0.0.1", std::to_string(masters[0].port())});
  const auto fake_id_first = [&] {
    const std::string now = replication();
    const auto fake = now.find("\nmaster_replid:" + old_id);
    return fake != std::string::npos && fake < now.rfind("\nmaster_replid:");
  };
  ASSERT_TRUE(eventually(fake_id_first, 10s)) << replication();
  HeldMaster0 held_master(masters);
  Client client(held_master.options);
  const Result held = acquire_when_counted(client, "fake-id");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  held_master.hold = true;                                       // no role read sees master 0 as a replica
  ASSERT_NO_FATAL_FAILURE(copy_mark(masters[0], others[0]));
  ASSERT_NO_FATAL_FAILURE(make_replica(masters[0], others[0]));  // its key wiped by the full sync
  masters[0].command({"REPLICAOF", "NO", "ONE"});
  ASSERT_TRUE(eventually(fake_id_first, 10s)) << "the announcing replica is back: " << replication();
  held_master.hold = false;
  std::this_thread::sleep_for(1500ms);  // the held reads answered: the fake old ID first, the new one last
  expect_master_0_not_counted(client, masters, "after-fake-id", "a replica");
  client.release(*held.lock);
}

}  // namespace redlock::testing

// SPDX-License-Identifier: Apache-2.0
// Review 60: attacks on the restart guard's keyspace mark.
// The DISABLED_ ones show documented limits (docs/design.md, keyspace mark, "Still not
// caught"): they fail by design; run with --gtest_also_run_disabled_tests.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace redlock::testing {
namespace {

constexpr auto kMaxLockTtl = 2000ms;
const std::string kMark = "redlock:__redlock_mark";

// Masters that allow DEBUG (DEBUG RELOAD below).
support::RedisServerOptions debug_allowed() {
  support::RedisServerOptions options;
  options.extra_args = {"--enable-debug-command", "yes"};
  return options;
}

ClientOptions guarded(const RedisServerGroup& masters) {
  auto options = options_for(masters.uris());
  options.restart_guard = true;
  options.ttl = kMaxLockTtl;
  options.max_lock_ttl = kMaxLockTtl;
  return options;
}

// A snapshot taken after the mark exists but before A's grant, reloaded on 2 of 3 masters
// (DEBUG RELOAD NOSAVE loads the RDB on disk): the mark keeps its id, A's key is gone.
TEST(MarkAttackTest, DISABLED_ReloadOfAnOlderSnapshotKeepsTheMark) {
  RedisServerGroup masters(3, debug_allowed());
  Client a(guarded(masters));
  Client b(guarded(masters));
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(b.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(a, "warm-a"));
  ASSERT_TRUE(every_master_counts(b, "warm-b"));
  const std::string replid0 = masters[0].command({"INFO", "replication"}).str;
  masters[0].command({"SAVE"});
  masters[1].command({"SAVE"});
  const Result held = a.acquire("res");
  ASSERT_TRUE(held.ok()) << format_result(held);
  const std::string mark_before = masters[0].command({"GET", kMark}).str;
  EXPECT_EQ(masters[0].command({"DEBUG", "RELOAD", "NOSAVE"}).type, support::Reply::Type::status);
  EXPECT_EQ(masters[1].command({"DEBUG", "RELOAD", "NOSAVE"}).type, support::Reply::Type::status);
  EXPECT_EQ(with_key(masters, "redlock:res"), 1u);
  EXPECT_EQ(masters[0].command({"GET", kMark}).str, mark_before);
  const bool same_replid =
      masters[0].command({"INFO", "replication"}).str.find(replid0.substr(replid0.find("master_replid:"), 55)) !=
      std::string::npos;
  std::cout << "replid kept: " << same_replid << "\n";
  const Result stolen = b.acquire("res");
  std::cout << "B after reload: " << format_result(stolen) << "\n";
  EXPECT_FALSE(stolen.ok()) << "two holders";
  std::this_thread::sleep_for(1500ms);
  std::cout << "A lost after 1.5 s: " << held.lock->lost() << "\n";
  if (stolen.ok()) b.release(*stolen.lock);
}

// SWAPDB 0 1 with a copy of the mark (same id) in db 1, taken before A's grant.
TEST(MarkAttackTest, DISABLED_SwapdbWithACopyOfTheMark) {
  RedisServerGroup masters(3, debug_allowed());
  Client a(guarded(masters));
  Client b(guarded(masters));
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(b.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(a, "warm-a"));
  ASSERT_TRUE(every_master_counts(b, "warm-b"));
  for (int i = 0; i < 2; ++i) masters[static_cast<std::size_t>(i)].command({"COPY", kMark, kMark, "DB", "1"});
  const Result held = a.acquire("res");
  ASSERT_TRUE(held.ok()) << format_result(held);
  for (int i = 0; i < 2; ++i) masters[static_cast<std::size_t>(i)].command({"SWAPDB", "0", "1"});
  EXPECT_EQ(with_key(masters, "redlock:res"), 1u);
  const Result stolen = b.acquire("res");
  std::cout << "B after swap: " << format_result(stolen) << "\n";
  EXPECT_FALSE(stolen.ok()) << "two holders";
  std::this_thread::sleep_for(1500ms);
  std::cout << "A lost after 1.5 s: " << held.lock->lost() << "\n";
  if (stolen.ok()) b.release(*stolen.lock);
}

// Fencing after FLUSHALL on 2 of 3 (counter wiped there): tokens still increase.
TEST(MarkAttackTest, FencedTokensIncreaseAcrossAWipe) {
  RedisServerGroup masters(3, debug_allowed());
  Client a(guarded(masters));
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(a, "warm-a"));
  AcquireOptions fenced;
  fenced.fencing = true;
  std::uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    const Result r = a.acquire("f", fenced);
    if (r.ok()) {
      last = r.lock->fence;
      a.release(*r.lock);
    }
  }
  ASSERT_GT(last, 0u);
  masters[0].command({"FLUSHALL"});
  masters[1].command({"FLUSHALL"});
  Client fresh(guarded(masters));
  ASSERT_TRUE(fresh.wait_connected(3, 5s));
  bool checked_a = false;
  bool checked_fresh = false;
  const auto until = std::chrono::steady_clock::now() + 12s;
  while ((!checked_a || !checked_fresh) && std::chrono::steady_clock::now() < until) {
    for (Client* c : {&a, &fresh}) {
      const Result r = c->acquire("f", fenced);
      if (!r.ok()) continue;
      EXPECT_GT(r.lock->fence, last) << (c == &a ? "a" : "fresh") << " " << format_result(r);
      last = r.lock->fence;
      (c == &a ? checked_a : checked_fresh) = true;
      c->release(*r.lock);
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(checked_a && checked_fresh);
}

// A relearn of the mark that fails (SET NX refused: OOM under maxmemory/noeviction; GET nil)
// leaves A's mark unknown: acquires then only ask that some mark exists, and no periodic read
// is made. A later wipe re-marked by another Client is not seen by A.
TEST(MarkAttackTest, AFailedRelearnLeavesTheMarkUnknown) {
  RedisServerGroup masters(3, debug_allowed());
  Client a(guarded(masters));
  Client b(guarded(masters));
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(b.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(a, "warm-a"));
  ASSERT_TRUE(every_master_counts(b, "warm-b"));
  for (std::size_t i = 0; i < 2; ++i) {
    masters[i].command({"CONFIG", "SET", "maxmemory", "1"});  // noeviction: every SET is OOM
    masters[i].command({"FLUSHALL"});
  }
  const Result seen = a.acquire("x");  // sees the wipe; its relearn's SET NX is refused (OOM)
  if (seen.ok()) a.release(*seen.lock);
  std::this_thread::sleep_for(1200ms);
  for (std::size_t i = 0; i < 2; ++i) masters[i].command({"CONFIG", "SET", "maxmemory", "0"});
  // B sees the absent mark at its next acquire and marks both masters again.
  const Result rb = b.acquire("y");
  if (rb.ok()) b.release(*rb.lock);
  ASSERT_TRUE(eventually([&] { return with_key(masters, kMark) == 3; }));
  std::this_thread::sleep_for(kMaxLockTtl + 500ms);
  ASSERT_TRUE(every_master_counts(b, "warm-b2"));
  const Result held_b = b.acquire("res2");
  ASSERT_TRUE(held_b.ok()) << format_result(held_b);
  ASSERT_TRUE(every_master_counts(a, "warm-a2"));
  const Result held_a = a.acquire("res");
  ASSERT_TRUE(held_a.ok()) << format_result(held_a);
  // Second wipe, re-marked at once by a Client that learns again (B's acquire).
  for (std::size_t i = 0; i < 2; ++i) masters[i].command({"FLUSHALL"});
  const Result relearn = b.acquire("z");
  if (relearn.ok()) b.release(*relearn.lock);
  ASSERT_TRUE(eventually([&] { return with_key(masters, kMark) == 3; }, 2s));
  const Result stolen = a.acquire("res2");  // B holds res2; its keys on 0 and 1 were wiped
  std::cout << "A on B's res2: " << format_result(stolen) << "\n";
  EXPECT_FALSE(stolen.ok()) << "two holders (A counts the wiped masters at once)";
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(held_a.lock->lost()) << "A's lock did not hear the wipe of 2 of 3";
  std::cout << "B's res2 lost: " << held_b.lock->lost() << "\n";
  if (stolen.ok()) a.release(*stolen.lock);
}

// One-shot Clients (the CLI): after FLUSHALL on 2 of 3 the first fresh Client re-creates the
// marks (not counted), the second finds them and counts at once (documented first-contact limit).
TEST(MarkAttackTest, DISABLED_TheSecondFreshClientAfterAWipeIsGranted) {
  RedisServerGroup masters(3, debug_allowed());
  {
    Client first(guarded(masters));
    ASSERT_TRUE(first.wait_connected(3, 5s));
  }
  std::this_thread::sleep_for(kMaxLockTtl + 500ms);
  auto options = guarded(masters);
  options.ttl = 4s;
  options.max_lock_ttl = 4s;
  Client a(options);
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(eventually(
      [&] {
        const Result r = a.acquire("warm");
        if (r) a.release(*r.lock);
        return r.ok() && r.count(MasterStatus::not_counted) == 0;
      },
      15s));
  int stolen = 0;
  int runs = 0;
  for (int run = 0; run < 5; ++run) {
    const std::string res = "res" + std::to_string(run);
    const Result held = a.acquire(res);
    if (!held.ok()) continue;
    ++runs;
    masters[0].command({"FLUSHALL"});
    masters[1].command({"FLUSHALL"});
    int granted_to = 0;
    for (int k = 1; k <= 2; ++k) {
      Client fresh(options);
      if (!fresh.wait_connected(3, 5s)) continue;
      const Result r = fresh.acquire(res);
      if (r.ok()) {
        granted_to = k;
        fresh.release(*r.lock);
        break;
      }
    }
    if (granted_to != 0) ++stolen;
    std::cout << "run " << run << ": granted to fresh Client #" << granted_to << ", A lost: " << held.lock->lost()
              << "\n";
    std::this_thread::sleep_for(5s);  // A's wiped masters count again
  }
  std::cout << "stolen " << stolen << " of " << runs << "\n";
}

}  // namespace
}  // namespace redlock::testing

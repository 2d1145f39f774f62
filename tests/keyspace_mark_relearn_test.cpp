// SPDX-License-Identifier: Apache-2.0
// Review 73: the keyspace mark's relearn. A Client that saw a wipe forgets the mark
// (keys_replaced starts its guard) and learns it again with SET NX + GET. If that relearn is
// answered only much later (held on the way) or lost with the connection and done by the next
// handshake, a second wipe in between, re-marked by another Client, is never seen: the relearn
// reads a mark it did not create (created = false), observe_mark compares it with nothing (the
// mark was forgotten), and the guard started at the first wipe has long run out.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tcp_proxy.h"
#include "test_util.h"

namespace redlock::testing {
namespace {

constexpr auto kMaxLockTtl = 2000ms;
const std::string kMark = "redlock:__redlock_mark";

ClientOptions guarded(const std::vector<std::string>& uris) {
  auto options = options_for(uris);
  options.restart_guard = true;
  options.ttl = kMaxLockTtl;
  options.max_lock_ttl = kMaxLockTtl;
  return options;
}

bool is_mark_relearn(std::string_view chunk) {
  return chunk.find("__redlock_mark") != std::string_view::npos && chunk.find("\r\nSET\r\n") != std::string_view::npos;
}

// A asks for B's "res" every `pause` for `how_long`: two holders if A is granted while B's
// lock is neither lost nor past its deadline (masters 0 and 1 wiped under it).
Result acquire_beside_holder(Client& a, const Client& b, const Result& held, std::chrono::milliseconds how_long,
                             std::chrono::milliseconds pause) {
  Result stolen;
  for (const auto start = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - start < how_long;) {
    stolen = a.acquire("res");
    if (stolen.ok()) break;
    std::this_thread::sleep_for(pause);
  }
  const bool b_lost = held.lock->lost();
  const bool b_valid = held.lock->deadline > b.now();
  std::cout << "A on B's res: " << format_result(stolen) << "\nB's lock lost: " << b_lost
            << ", still valid: " << b_valid << " (" << b.remaining(*held.lock).count() << " us left)\n";
  EXPECT_FALSE(stolen.ok() && !b_lost && b_valid)
      << "two holders: A counted masters 0 and 1, wiped under B's lock, at once";
  return stolen;
}

// Per proxy: once armed, the first chunk holding A's relearn (SET mark NX) is held, with
// everything behind it, until released (hold mode), or dropped with the connection (cut mode:
// the test retargets the proxy while the chunk waits).
struct Gate {
  std::atomic<bool> armed{false};
  std::atomic<bool> triggered{false};
  std::atomic<bool> release{false};
  void on_request(std::string_view chunk) {
    if (armed.load() && !triggered.load() && is_mark_relearn(chunk)) triggered = true;
    while (triggered.load() && !release.load()) std::this_thread::sleep_for(1ms);
  }
};

// Holds every chunk while `hold` is set (a partition that keeps the sockets).
struct Hold {
  std::atomic<bool> hold{false};
  void on_request(std::string_view) {
    while (hold.load()) std::this_thread::sleep_for(1ms);
  }
};

enum class Mode { hold, cut };

// `b_cut_off`: B, once granted, is cut off from masters 0 and 1 (it never hears wipe 2).
void run(Mode mode, bool b_cut_off = false) {
  RedisServerGroup masters(3);
  Hold b_hold;
  TcpProxy b_to_0(masters[0].port(), [&](std::string_view c) { b_hold.on_request(c); });
  TcpProxy b_to_1(masters[1].port(), [&](std::string_view c) { b_hold.on_request(c); });
  struct OpenB {
    Hold& h;
    ~OpenB() { h.hold = false; }
  } open_b{b_hold};
  Gate gate0;
  Gate gate1;
  TcpProxy a_to_0(masters[0].port(), [&](std::string_view c) { gate0.on_request(c); });
  TcpProxy a_to_1(masters[1].port(), [&](std::string_view c) { gate1.on_request(c); });
  struct Open {  // destroyed before the proxies: no pump stays held (an ASSERT's early return)
    Gate& g0;
    Gate& g1;
    ~Open() { g0.release = g1.release = true; }
  } open{gate0, gate1};
  auto a_options = guarded({a_to_0.uri(), a_to_1.uri(), masters[2].uri()});
  if (mode == Mode::hold) a_options.stall_timeout = 10s;  // the held connection stays
  Client a(a_options);
  Client b(guarded({b_to_0.uri(), b_to_1.uri(), masters[2].uri()}));
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(b.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(a, "warm-a"));
  ASSERT_TRUE(every_master_counts(b, "warm-b"));

  // Wipe 1 on masters 0 and 1. A sees it (its acquire, or its periodic read) and relearns;
  // the relearn is held / lost.
  gate0.armed = true;
  gate1.armed = true;
  for (std::size_t i = 0; i < 2; ++i) masters[i].command({"FLUSHALL"});
  const Result seen = a.acquire("x");
  if (seen.ok()) a.release(*seen.lock);
  ASSERT_TRUE(eventually([&] { return gate0.triggered.load() && gate1.triggered.load(); }, 3s))
      << "A's relearn not seen: " << format_result(seen);
  const auto a_saw_wipe = std::chrono::steady_clock::now();
  if (mode == Mode::cut) {
    a_to_0.retarget(1);  // A cut off from masters 0 and 1 (port 1: nothing listens)
    a_to_1.retarget(1);
    gate0.release = true;  // the held relearn now goes nowhere
    gate1.release = true;
  }

  // B sees wipe 1 too, re-marks both masters, waits out its guard, and is granted.
  ASSERT_TRUE(every_master_counts(b, "b-after-wipe-1"));
  std::this_thread::sleep_until(a_saw_wipe + kMaxLockTtl + 100ms);  // A's guard has run out too
  const Result held = b.acquire("res");
  ASSERT_TRUE(held.ok()) << format_result(held);
  if (b_cut_off) b_hold.hold = true;

  // Wipe 2 under B's lock, re-marked at once by another Client's handshake (E, fresh).
  for (std::size_t i = 0; i < 2; ++i) masters[i].command({"FLUSHALL"});
  {
    Client e(guarded(masters.uris()));
    ASSERT_TRUE(e.wait_connected(3, 5s));
  }
  ASSERT_EQ(with_key(masters, kMark), 3u);
  ASSERT_EQ(with_key(masters, "redlock:res"), 1u);  // B's key is left on master 2 only

  // A is back: its relearn (hold: answered now; cut: the handshake's) reads E's mark.
  if (mode == Mode::hold) {
    gate0.release = true;
    gate1.release = true;
  } else {
    a_to_0.retarget(masters[0].port());
    a_to_1.retarget(masters[1].port());
  }
  const Result stolen = acquire_beside_holder(a, b, held, 800ms, 10ms);
  if (stolen.ok()) {
    std::this_thread::sleep_for(1200ms);
    std::cout << "1.2 s later, B's lock lost: " << held.lock->lost() << "\n";
    a.release(*stolen.lock);
  }
  gate0.release = true;
  gate1.release = true;
}

TEST(KeyspaceMarkRelearnTest, ARelearnHeldAcrossASecondWipeCountsTheWipedMastersAtOnce) { run(Mode::hold); }

TEST(KeyspaceMarkRelearnTest, ARelearnLostWithTheConnectionMissesASecondWipeDuringTheOutage) { run(Mode::cut); }

// The same, the holder B cut off from the wiped masters: it never hears wipe 2.
TEST(KeyspaceMarkRelearnTest, ARelearnLostWithTheConnectionMissesASecondWipeHolderCutOff) { run(Mode::cut, true); }

}  // namespace
}  // namespace redlock::testing

namespace redlock::testing {
namespace {

constexpr auto kLongTtl = 5000ms;

// A knew master 0's and 1's marks. While A is cut off, both are wiped (B's keys there gone) and
// SETs are refused for a moment (maxmemory 1, noeviction: OOM). A's handshake then reads the mark
// absent (SET NX refused, GET nil): observe_mark sees `changed` (known id -> none) but returns
// before keys_replaced, because the read is empty. The mark is now "unknown", not "replaced":
// no guard starts. Once SETs are allowed again another Client re-marks the masters, A's
// periodic relearn reads that mark (created = false, nothing known to compare with) and A
// counts both wiped masters at once. B, cut off from them, never hears the wipe.
TEST(KeyspaceMarkRelearnTest, AMarkReadAbsentButNotRecreatedAtAHandshakeStartsNoGuard) {
  RedisServerGroup masters(3);
  TcpProxy a_to_0(masters[0].port(), {});
  TcpProxy a_to_1(masters[1].port(), {});
  Hold b_hold;
  TcpProxy b_to_0(masters[0].port(), [&](std::string_view c) { b_hold.on_request(c); });
  TcpProxy b_to_1(masters[1].port(), [&](std::string_view c) { b_hold.on_request(c); });
  struct Open {
    Hold& h;
    ~Open() { h.hold = false; }
  } open{b_hold};
  auto a_options = guarded({a_to_0.uri(), a_to_1.uri(), masters[2].uri()});
  auto b_options = guarded({b_to_0.uri(), b_to_1.uri(), masters[2].uri()});
  for (ClientOptions* options : {&a_options, &b_options}) {
    options->ttl = kLongTtl;
    options->max_lock_ttl = kLongTtl;
  }
  Client a(a_options);
  Client b(b_options);
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(b.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(a, "warm-a"));
  ASSERT_TRUE(every_master_counts(b, "warm-b"));
  const Result held = b.acquire("res");
  ASSERT_TRUE(held.ok()) << format_result(held);
  b_hold.hold = true;  // B cut off from masters 0 and 1 (it keeps its lock: nothing tells it)
  a_to_0.retarget(1);  // A cut off too
  a_to_1.retarget(1);
  std::this_thread::sleep_for(100ms);
  for (std::size_t i = 0; i < 2; ++i) {
    masters[i].command({"FLUSHALL"});
    masters[i].command({"CONFIG", "SET", "maxmemory", "1"});  // noeviction: every SET is OOM
  }
  a_to_0.retarget(masters[0].port());
  a_to_1.retarget(masters[1].port());
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(a.wait_connected(3, 5s));
  std::this_thread::sleep_for(200ms);
  for (std::size_t i = 0; i < 2; ++i) masters[i].command({"CONFIG", "SET", "maxmemory", "0"});
  {
    Client e(guarded(masters.uris()));  // re-marks masters 0 and 1 (its handshake's SET NX)
    ASSERT_TRUE(e.wait_connected(3, 5s));
  }
  ASSERT_EQ(with_key(masters, "redlock:res"), 1u);
  const Result stolen = acquire_beside_holder(a, b, held, 2500ms, 20ms);
  if (stolen.ok()) a.release(*stolen.lock);
  b_hold.hold = false;
}

// The same OOM spell met by a first contact (review 74): B holds "res" and is cut off from
// masters 0 and 1; both are wiped with SETs refused. A fresh Client A reads them unmarked and
// cannot mark them: unknown, not counted. Once SETs are allowed, another Client (E) marks them;
// A's relearn finds E's mark (created = false, nothing known to compare with). A saw those
// masters unmarked, the evidence `created` gives, so the mark it finds starts the guard; before,
// A counted both at once and was granted beside B, 9 of 9 in the review. (E does not read
// `replaced` yet: its own first contact finding no mark creates it, and is guarded.)
TEST(KeyspaceMarkRelearnTest, AFirstContactThatReadsTheMarkAbsentAndCannotSetItGuardsTheMarkItFindsLater) {
  RedisServerGroup masters(3);
  Hold b_hold;
  TcpProxy b_to_0(masters[0].port(), [&](std::string_view c) { b_hold.on_request(c); });
  TcpProxy b_to_1(masters[1].port(), [&](std::string_view c) { b_hold.on_request(c); });
  struct Open {
    Hold& h;
    ~Open() { h.hold = false; }
  } open{b_hold};
  auto b_options = guarded({b_to_0.uri(), b_to_1.uri(), masters[2].uri()});
  b_options.ttl = kLongTtl;
  b_options.max_lock_ttl = kLongTtl;
  b_options.stall_timeout = 30s;  // the held connections stay
  Client b(b_options);
  ASSERT_TRUE(b.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(b, "warm-b", 15s));
  const Result held = b.acquire("res");
  ASSERT_TRUE(held.ok()) << format_result(held);
  b_hold.hold = true;  // B cut off from masters 0 and 1
  std::this_thread::sleep_for(50ms);
  for (std::size_t i = 0; i < 2; ++i) {
    masters[i].command({"FLUSHALL"});
    masters[i].command({"CONFIG", "SET", "maxmemory", "1"});  // noeviction: every SET is OOM
  }
  struct Unlimit {
    RedisServerGroup& m;
    ~Unlimit() {
      for (std::size_t i = 0; i < 2; ++i) m[i].command({"CONFIG", "SET", "maxmemory", "0"});
    }
  } unlimit{masters};
  auto a_options = guarded(masters.uris());
  a_options.ttl = kLongTtl;
  a_options.max_lock_ttl = kLongTtl;
  Client a(a_options);  // first contact: masters 0 and 1 unmarked, SET NX refused
  ASSERT_TRUE(a.wait_connected(3, 5s));
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(with_key(masters, kMark), 1u);
  for (std::size_t i = 0; i < 2; ++i) masters[i].command({"CONFIG", "SET", "maxmemory", "0"});
  {
    Client e(guarded(masters.uris()));  // marks masters 0 and 1 (its handshake's SET NX)
    ASSERT_TRUE(e.wait_connected(3, 5s));
  }
  ASSERT_EQ(with_key(masters, kMark), 3u);
  const Result stolen = acquire_beside_holder(a, b, held, 2500ms, 20ms);
  if (stolen.ok()) a.release(*stolen.lock);
  b_hold.hold = false;
}

// The same wipe under the holder itself: A holds a lock on all three masters, is cut off from
// masters 0 and 1, both are wiped (A's keys there gone) with SETs refused (OOM). A's handshakes
// read the mark it knew absent and cannot recreate it. Two of its three keys are gone, so its
// lock is lost and must be marked so, as a wipe read every second marks it (KeyspaceMarkTest):
// before, the absent read only made the mark "unknown", took no votes away, and the lock
// looked held for as long as SETs were refused.
TEST(KeyspaceMarkRelearnTest, AHolderHearsAWipeWhoseMarkCannotBeSetAgain) {
  RedisServerGroup masters(3);
  TcpProxy a_to_0(masters[0].port(), {});
  TcpProxy a_to_1(masters[1].port(), {});
  auto options = guarded({a_to_0.uri(), a_to_1.uri(), masters[2].uri()});
  options.ttl = kLongTtl;
  options.max_lock_ttl = kLongTtl;
  Client a(options);
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_TRUE(every_master_counts(a, "warm"));
  const Result held = a.acquire("res");
  ASSERT_TRUE(held.ok()) << format_result(held);
  a_to_0.retarget(1);  // A cut off from masters 0 and 1 (port 1: nothing listens)
  a_to_1.retarget(1);
  std::this_thread::sleep_for(100ms);
  for (std::size_t i = 0; i < 2; ++i) {
    masters[i].command({"FLUSHALL"});
    masters[i].command({"CONFIG", "SET", "maxmemory", "1"});  // noeviction: every SET is OOM
  }
  struct Unlimit {
    RedisServerGroup& m;
    ~Unlimit() {
      for (std::size_t i = 0; i < 2; ++i) m[i].command({"CONFIG", "SET", "maxmemory", "0"});
    }
  } unlimit{masters};
  a_to_0.retarget(masters[0].port());
  a_to_1.retarget(masters[1].port());
  ASSERT_TRUE(a.wait_connected(3, 5s));
  ASSERT_EQ(with_key(masters, kMark), 1u);  // not set again on masters 0 and 1
  const bool lost = eventually([&] { return held.lock->lost(); }, 1500ms);
  EXPECT_TRUE(lost) << "A's lock is left on master 2 only, and A still takes it for held ("
                    << a.remaining(*held.lock).count() << " us left)";
  EXPECT_EQ(with_key(masters, "redlock:res"), 1u);
  a.release(*held.lock);
}

}  // namespace
}  // namespace redlock::testing

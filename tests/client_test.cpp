// SPDX-License-Identifier: Apache-2.0
// redlock::Client against N = 1, 3, 5 real redis-server masters: acquire, refuse, release,
// extend. Mirrors include/redlock/client.h.
#include "redlock/client.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "detail/lock_commands.h"
#include "redlock/errors.h"
#include "tcp_proxy.h"
#include "test_util.h"

namespace redlock::testing {
namespace {

class ClientTest : public ::testing::TestWithParam<std::size_t> {
 protected:
  ClientTest() : masters_(GetParam()) {}

  RedisServerGroup masters_;
};

TEST_P(ClientTest, AcquireSetsTokenOnAQuorumWithPttlWithinTtl) {
  auto options = options_for(masters_);
  options.ttl = 8000ms;
  Client client(options);
  const Result result = client.acquire("orders");
  ASSERT_EQ(result.outcome, Outcome::acquired) << format_result(result);
  ASSERT_TRUE(result.lock.has_value());
  const Lock& lock = *result.lock;
  EXPECT_EQ(lock.key, "redlock:orders");
  EXPECT_EQ(lock.token.size(), 32u);
  EXPECT_EQ(result.masters.size(), GetParam());
  EXPECT_GE(result.count(MasterStatus::ok), client.quorum());
  EXPECT_GT(result.validity.count(), 0);
  EXPECT_LE(result.validity, 8000ms - client.drift(8000ms));

  EXPECT_GE(holding(masters_, lock.key, lock.token), client.quorum());
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    if (get(masters_[i], lock.key) != lock.token) continue;
    const long long pttl = masters_[i].command({"PTTL", lock.key}).integer;
    EXPECT_GT(pttl, 0);
    EXPECT_LE(pttl, 8000);
  }
}

TEST_P(ClientTest, SecondClientIsRefusedWhileHeldAndGetsItAfterRelease) {
  Client alice(options_for(masters_));
  Client bob(options_for(masters_));
  const Result held = alice.acquire("report");
  ASSERT_TRUE(held) << format_result(held);

  const Result refused = bob.acquire("report");
  EXPECT_EQ(refused.outcome, Outcome::taken) << format_result(refused);
  EXPECT_FALSE(refused.lock.has_value());
  EXPECT_GE(refused.count(MasterStatus::held_by_other), masters_.size() - quorum_of_n(masters_.size()) + 1);

  const Result released = alice.release(*held.lock);
  EXPECT_EQ(released.outcome, Outcome::released) << format_result(released);
  EXPECT_TRUE(eventually([&] { return with_key(masters_, held.lock->key) == 0; }));

  const Result granted = bob.acquire("report");
  EXPECT_EQ(granted.outcome, Outcome::acquired) << format_result(granted);
  EXPECT_NE(granted.lock->token, held.lock->token);
}

TEST_P(ClientTest, ReleaseRemovesTheKeyFromEveryMaster) {
  Client client(options_for(masters_));
  const Result held = client.acquire("cleanup");
  ASSERT_TRUE(held);
  ASSERT_TRUE(eventually([&] { return holding(masters_, held.lock->key, held.lock->token) == masters_.size(); }));
  const Result released = client.release(*held.lock);
  ASSERT_TRUE(released) << format_result(released);
  EXPECT_EQ(released.attempts, 1);
  EXPECT_TRUE(eventually([&] { return with_key(masters_, held.lock->key) == 0; }));
}

// A holder that asks remaining() before it acts must hear 0 once it gave the lock up, on
// every copy of the Lock, from the moment the release is submitted (not when it is answered).
TEST_P(ClientTest, AReleasedLockHasNoValidityLeftAndIsNeverExtended) {
  auto options = options_for(masters_);
  options.ttl = 30000ms;
  Client client(options);
  const Result held = client.acquire("given-up");
  ASSERT_TRUE(held) << format_result(held);
  const Lock copy = *held.lock;
  ASSERT_GT(client.remaining(copy).count(), 0);

  std::promise<Result> answer;
  client.release_async(*held.lock, [&](Result r) { answer.set_value(std::move(r)); });
  EXPECT_EQ(client.remaining(copy).count(), 0) << "released, yet a copy still reports validity";
  EXPECT_EQ(client.remaining(*held.lock).count(), 0);
  ASSERT_EQ(answer.get_future().get().outcome, Outcome::released);

  const Result extended = client.extend(copy);
  EXPECT_EQ(extended.outcome, Outcome::invalid_argument) << format_result(extended);
  EXPECT_NE(extended.message.find("released"), std::string::npos) << extended.message;
  EXPECT_TRUE(extended.masters.empty()) << "refused without sending anything";

  // A new grant of the same resource is a new Lock: its validity is its own.
  const Result again = client.acquire("given-up");
  ASSERT_TRUE(again) << format_result(again);
  EXPECT_GT(client.remaining(*again.lock).count(), 0);
  EXPECT_EQ(client.remaining(copy).count(), 0);
  EXPECT_TRUE(client.release(*again.lock));
}

TEST_P(ClientTest, ReleaseOfAnExpiredLockTakenByAnotherLeavesTheirKey) {
  auto options = options_for(masters_);
  options.ttl = 100ms;
  Client first(options);
  Client second(options_for(masters_));
  const Result old = first.acquire("handover");
  ASSERT_TRUE(old);
  ASSERT_TRUE(eventually([&] { return with_key(masters_, old.lock->key) == 0; }));  // expired
  const Result current = second.acquire("handover");
  ASSERT_TRUE(current) << format_result(current);
  ASSERT_TRUE(eventually([&] { return holding(masters_, current.lock->key, current.lock->token) == masters_.size(); }));

  const Result stale_release = first.release(*old.lock);
  // Our token is gone everywhere: "released", with every answer saying another owner.
  EXPECT_EQ(stale_release.outcome, Outcome::released);
  EXPECT_EQ(stale_release.count(MasterStatus::ok), 0u) << format_result(stale_release);
  EXPECT_GE(stale_release.count(MasterStatus::held_by_other), quorum_of_n(masters_.size()));
  EXPECT_EQ(holding(masters_, current.lock->key, current.lock->token), masters_.size());
}

TEST_P(ClientTest, ExtendRenewsTheLeaseOnAQuorum) {
  auto options = options_for(masters_);
  options.ttl = 2000ms;
  Client client(options);
  const Result held = client.acquire("long-job");
  ASSERT_TRUE(held);
  const Result extended = client.extend(*held.lock, 20000ms);
  ASSERT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  ASSERT_TRUE(extended.lock.has_value());
  EXPECT_EQ(extended.lock->token, held.lock->token);
  EXPECT_EQ(extended.lock->ttl, 20000ms);
  EXPECT_GT(extended.lock->deadline, held.lock->deadline);
  EXPECT_GT(extended.validity, 2000ms);
  std::size_t renewed = 0;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].command({"PTTL", held.lock->key}).integer > 2000) ++renewed;
  }
  EXPECT_GE(renewed, client.quorum());
}

TEST_P(ClientTest, ExtendNeverRecreatesAMissingKey) {
  Client client(options_for(masters_));
  const Result held = client.acquire("vanishing");
  ASSERT_TRUE(held);
  ASSERT_TRUE(eventually([&] { return with_key(masters_, held.lock->key) == masters_.size(); }));
  for (std::size_t i = 0; i < masters_.size(); ++i) masters_[i].command({"DEL", held.lock->key});

  const Result extended = client.extend(*held.lock);
  EXPECT_EQ(extended.outcome, Outcome::lost) << format_result(extended);
  EXPECT_FALSE(extended.lock.has_value());
  EXPECT_EQ(with_key(masters_, held.lock->key), 0u);
}

// An extend that finds the key gone (or another owner's) on more than N - quorum masters
// proves that no quorum holds the token any more, and another Client may hold the lock: every
// copy of the Lock says so from then on (lost(), remaining() 0, no further extend). Before,
// remaining() went on counting down the old validity, and lost() said false, while a second
// holder could be working.
TEST_P(ClientTest, AnExtendThatProvesTheLockGoneMarksEveryCopyLost) {
  Client client(options_for(masters_));
  const Result held = client.acquire("proven-gone");
  ASSERT_TRUE(held) << format_result(held);
  ASSERT_TRUE(eventually([&] { return with_key(masters_, held.lock->key) == masters_.size(); }));
  const Lock copy = *held.lock;
  const std::size_t gone = masters_.size() - client.quorum() + 1;
  for (std::size_t i = 0; i < gone; ++i) masters_[i].command({"DEL", held.lock->key});

  const Result extended = client.extend(*held.lock);
  EXPECT_EQ(extended.outcome, Outcome::lost) << format_result(extended);
  EXPECT_TRUE(copy.lost());
  EXPECT_EQ(client.remaining(copy), 0us);
  const Result again = client.extend(copy);
  EXPECT_EQ(again.outcome, Outcome::lost) << format_result(again);
  EXPECT_NE(again.message.find("lost"), std::string::npos) << again.message;
}

// One master's "no key" against another's silence proves nothing (the silent one may still
// hold it, and with it a quorum): the extend fails, the lock is not marked lost.
TEST(ClientLossTest, AnExtendThatFindsTheKeyGoneOnTooFewMastersDoesNotMarkItLost) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.command_timeout = 200ms;
  options.ttl = 5000ms;
  Client client(options);
  const Result held = client.acquire("not-proven");
  ASSERT_TRUE(held) << format_result(held);
  ASSERT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == masters.size(); }));
  masters[0].command({"DEL", held.lock->key});
  masters[1].freeze();
  const Result extended = client.extend(*held.lock);
  masters[1].thaw();
  EXPECT_FALSE(extended.ok()) << format_result(extended);
  EXPECT_FALSE(held.lock->lost());
  EXPECT_GT(client.remaining(*held.lock), 0us);
  EXPECT_TRUE(client.release(*held.lock)) << "released on the two masters that still hold it";
}

// An extend sent before a release of the same Lock and decided after the release was
// submitted: the holder has given the lock up (the release, behind it on every connection,
// deletes what it extended), so its Result must not say extended with validity left (a review:
// 18 of 20 async extends raced so said "extended", 2.97 s of validity, while another Client
// held the lock).
TEST(ClientLossTest, AnExtendDecidedAfterItsLockWasReleasedDoesNotSayExtended) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.command_timeout = 3000ms;
  options.ttl = 5000ms;
  Client client(options);
  const Result held = client.acquire("released-meanwhile");
  ASSERT_TRUE(held) << format_result(held);
  masters[0].freeze();
  masters[1].freeze();  // the extend's quorum waits for one of them
  std::promise<Result> extended;
  client.extend_async(*held.lock, [&](Result result) { extended.set_value(std::move(result)); });
  std::this_thread::sleep_for(100ms);
  std::promise<Result> released;
  client.release_async(*held.lock, [&](Result result) { released.set_value(std::move(result)); });
  masters[0].thaw();
  masters[1].thaw();
  const Result extend_result = extended.get_future().get();
  EXPECT_EQ(released.get_future().get().outcome, Outcome::released);
  EXPECT_NE(extend_result.outcome, Outcome::extended) << format_result(extend_result);
  EXPECT_FALSE(extend_result.ok());
  EXPECT_NE(extend_result.message.find("released"), std::string::npos) << extend_result.message;
  EXPECT_EQ(with_key(masters, held.lock->key), 0u);
}

// The same with the extend sent through an adopted copy, whose state is made for the extend:
// a release begun while it was in flight (through the granted Lock or another adopted copy)
// did not find that state, and the extend said extended, 2.97 s, while the key was gone and
// another Client acquired (a review: 6 of 6).
TEST(ClientLossTest, AnExtendOfAnAdoptedCopyDecidedAfterTheLockWasReleasedDoesNotSayExtended) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.command_timeout = 3000ms;
  options.ttl = 5000ms;
  Client client(options);
  for (const bool through_granted : {true, false}) {
    SCOPED_TRACE(through_granted ? "released through the granted Lock" : "released through another adopted copy");
    const Result held = client.acquire(through_granted ? "adopted-extend-1" : "adopted-extend-2");
    ASSERT_TRUE(held) << format_result(held);
    masters[0].freeze();
    masters[1].freeze();  // the extend's quorum waits for one of them
    std::promise<Result> extended;
    client.extend_async(client.adopt(held.lock->resource, held.lock->token),
                        [&](Result result) { extended.set_value(std::move(result)); });
    std::this_thread::sleep_for(100ms);
    std::promise<Result> released;
    client.release_async(through_granted ? *held.lock : client.adopt(held.lock->resource, held.lock->token),
                         [&](Result result) { released.set_value(std::move(result)); });
    masters[0].thaw();
    masters[1].thaw();
    const Result extend_result = extended.get_future().get();
    EXPECT_EQ(released.get_future().get().outcome, Outcome::released);
    EXPECT_FALSE(extend_result.ok()) << format_result(extend_result);
    if (extend_result.lock) {
      EXPECT_EQ(client.remaining(*extend_result.lock), 0us);
    }
    EXPECT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == 0; }));  // decided at a quorum
  }
}

// Every master forgets the scripts (SCRIPT FLUSH) and is given the extend script again: the
// release script alone is unknown, so a release is answered NOSCRIPT and sent again, as EVAL,
// behind what followed it. `client` is connected first: a handshake still running would load
// the scripts again.
void forget_the_release_script(const RedisServerGroup& masters, Client& client) {
  ASSERT_TRUE(client.wait_connected(masters.size(), 5s));
  for (std::size_t i = 0; i < masters.size(); ++i) {
    masters[i].command({"SCRIPT", "FLUSH"});
    masters[i].command({"SCRIPT", "LOAD", std::string(detail::kExtendScript)});
  }
}

// A release whose script a master had forgotten (SCRIPT FLUSH) is sent again as EVAL, behind
// whatever followed it on the connection: an extend of an adopted copy submitted after the
// release ran first on every master and said extended, 2.97 s, then the release deleted the key
// (a review: 9 of 9, another Client granted meanwhile). An extend of an adopted copy of a lock
// whose release is in flight on this Client is refused.
// An extend the released-here rule refused: invalid_argument, and nothing sent.
::testing::AssertionResult refused_unsent(const Result& extended) {
  if (extended.outcome != Outcome::invalid_argument) {
    return ::testing::AssertionFailure() << "not refused: " << format_result(extended);
  }
  if (!extended.masters.empty())
    return ::testing::AssertionFailure() << "sent, not refused: " << format_result(extended);
  return ::testing::AssertionSuccess();
}

TEST(ClientLossTest, AnExtendOfAnAdoptedCopySubmittedWhileItsReleaseIsInFlightIsRefused) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.ttl = 3000ms;
  Client client(options);
  const Result held = client.acquire("release-in-flight");
  ASSERT_TRUE(held) << format_result(held);
  ASSERT_NO_FATAL_FAILURE(forget_the_release_script(masters, client));
  std::promise<Result> released;
  std::promise<Result> extended;
  client.release_async(*held.lock, [&](Result result) { released.set_value(std::move(result)); });
  client.extend_async(client.adopt(held.lock->resource, held.lock->token),
                      [&](Result result) { extended.set_value(std::move(result)); });
  EXPECT_EQ(released.get_future().get().outcome, Outcome::released);
  const Result extend_result = extended.get_future().get();
  EXPECT_TRUE(refused_unsent(extend_result));
  // Decided at a quorum: the last master's resent release may still be on its way (CI run 1).
  EXPECT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == 0; }));
}

// The same after a release that failed: its commands time out and the round is decided, but
// the masters still run them, and a NOSCRIPT is still sent again as EVAL, behind anything sent
// since. An extend of an adopted copy sent in that gap ran first, said "extended", and the
// resent release then deleted the key under it.
TEST(ClientLossTest, AnExtendOfAnAdoptedCopyAfterAFailedReleaseDoesNotRunBeforeTheRelease) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.ttl = 5000ms;
  options.command_timeout = 500ms;
  Client client(options);
  const Result held = client.acquire("failed-release");
  ASSERT_TRUE(held) << format_result(held);
  ASSERT_NO_FATAL_FAILURE(forget_the_release_script(masters, client));
  // Every master sits on the release past its deadline, and answers before the extend's.
  for (std::size_t i = 0; i < masters.size(); ++i) masters[i].command({"CLIENT", "PAUSE", "800", "ALL"});
  const Result released = client.release(*held.lock);
  EXPECT_EQ(released.outcome, Outcome::quorum_unreachable) << format_result(released);
  const Result extended = client.extend(client.adopt(held.lock->resource, held.lock->token));
  EXPECT_TRUE(refused_unsent(extended));
  // The release did run everywhere in the end: a lock said extended would now have a rival.
  EXPECT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == 0; }));
  if (extended.ok()) {
    Client rival(options);
    EXPECT_FALSE(rival.acquire("failed-release")) << "two holders: the extend said " << format_result(extended);
  }
}

// Three masters, each behind a proxy that runs `hold` on every request chunk before passing it
// on (a hold sleeps: that chunk and all behind it on that connection wait), and a Client's
// options for them whose stall check drops a held-up connection fast; no retries, no guard.
struct HeldUpMasters {
  using Hold = std::function<void(std::size_t master, std::string_view chunk)>;
  explicit HeldUpMasters(Hold on_request) : masters(3), hold(std::move(on_request)) {
    for (std::size_t i = 0; i < masters.size(); ++i) {
      proxies.push_back(
          std::make_unique<TcpProxy>(masters[i].port(), [this, i](std::string_view chunk) { hold(i, chunk); }));
    }
  }
  [[nodiscard]] ClientOptions options(std::chrono::milliseconds ttl) const {
    ClientOptions options;
    for (const auto& proxy : proxies) options.masters.push_back(proxy->uri());
    options.ttl = ttl;
    options.command_timeout = 200ms;
    options.stall_timeout = 300ms;
    options.reconnect_min = 20ms;
    options.retry_count = 0;
    options.restart_guard = false;
    return options;
  }
  RedisServerGroup masters;
  Hold hold;
  std::vector<std::unique_ptr<TcpProxy>> proxies;  // last: stopped before `hold` goes
};

// A proxy hook's hold: once armed with a token, every request chunk naming it waits
// `hold_for` before it is passed on, until disarmed.
class TokenHold {
 public:
  explicit TokenHold(std::chrono::milliseconds hold_for) : hold_for_(hold_for) {}
  void arm(const std::string& token) {
    const std::lock_guard<std::mutex> guard(mutex_);
    token_ = token;
    armed_ = true;
  }
  void disarm() { armed_ = false; }
  void operator()(std::string_view chunk) {
    std::string token;
    {
      const std::lock_guard<std::mutex> guard(mutex_);
      token = token_;
    }
    if (armed_ && !token.empty() && chunk.find(token) != std::string_view::npos) std::this_thread::sleep_for(hold_for_);
  }

 private:
  const std::chrono::milliseconds hold_for_;
  std::atomic<bool> armed_{false};
  std::mutex mutex_;
  std::string token_;
};

// The same when the release's connections are dropped (stall_timeout) while its commands are
// held up on the way (a review: a proxy holding them 1.5 s): the extend went out on the new
// connections, said "extended", and the release then landed and deleted the key, 5 of 5.
// A release this Client could not confirm may still run anywhere, any time.
TEST(ClientLossTest, AnExtendOfAnAdoptedCopyAfterAReleaseCutOffWithItsConnectionsIsRefused) {
  TokenHold hold(1500ms);
  HeldUpMasters held_up([&](std::size_t, std::string_view chunk) { hold(chunk); });
  const RedisServerGroup& masters = held_up.masters;
  Client client(held_up.options(10000ms));
  const Result held = client.acquire("cut-off-release");
  ASSERT_TRUE(held) << format_result(held);
  hold.arm(held.lock->token);
  const Result released = client.release(*held.lock);
  EXPECT_EQ(released.outcome, Outcome::quorum_unreachable) << format_result(released);
  hold.disarm();
  std::this_thread::sleep_for(400ms);  // the stall check drops the connections
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const Result extended = client.extend(client.adopt(held.lock->resource, held.lock->token));
  EXPECT_TRUE(refused_unsent(extended));
  EXPECT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == 0; }));
  if (extended.ok()) {
    Client rival(options_for(masters));
    EXPECT_FALSE(rival.acquire("cut-off-release")) << "two holders: the extend said " << format_result(extended);
  }
}

// A master working through a backlog answers all along: the stall check counts from its last
// reply, not from the oldest command's send. Every SET held 250 ms on its way (one after
// another), acquires sent 200 ms apart: replies come every 250 ms while each waits 50 ms
// longer than the one before, and from the fifth on past stall_timeout (450 ms) the
// connections were dropped as stalled (the acquire failed not_connected, and under a burst the
// releases of the SETs in flight were lost with them).
TEST(ClientLossTest, AMasterWorkingThroughABacklogIsNotDroppedAsStalled) {
  std::atomic<bool> slow{false};
  HeldUpMasters held_up([&](std::size_t, std::string_view chunk) {
    if (slow && chunk.find("SET") != std::string_view::npos) std::this_thread::sleep_for(250ms);
  });
  auto options = held_up.options(10000ms);
  options.command_timeout = 3s;  // every acquire waits for its answer
  options.stall_timeout = 450ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  slow = true;
  std::vector<std::future<Result>> results;
  for (int i = 0; i < 8; ++i) {
    auto done = std::make_shared<std::promise<Result>>();
    results.push_back(done->get_future());
    client.acquire_async("backlog-" + std::to_string(i), [done](Result r) { done->set_value(std::move(r)); });
    std::this_thread::sleep_for(200ms);
  }
  for (auto& result : results) {
    const Result r = result.get();
    EXPECT_EQ(r.outcome, Outcome::acquired) << format_result(r);
  }
  slow = false;
}

// And after a release that got its quorum. Held up on the way, the acquire's SET to master 2
// lands after the release answered there "no key", and master 1's release lands after a later
// extend sent on a new connection: the extend finds the key on masters 1 and 2 and says
// "extended", then master 1's release deletes it there. No answer orders commands sent on
// different connections, so a lock released here is not extended here again (for the longest
// ttl in use), whatever the release's outcome.
TEST(ClientLossTest, AnExtendOfAnAdoptedCopyAfterAReleaseThatGotItsQuorumIsRefused) {
  std::atomic<int> hold_at{-1};  // the master whose requests naming the key are held 1.5 s
  const std::string key = "redlock:released-then-extended";
  HeldUpMasters held_up([&](std::size_t i, std::string_view chunk) {
    if (hold_at == static_cast<int>(i) && chunk.find(key) != std::string_view::npos)
      std::this_thread::sleep_for(1500ms);
  });
  const RedisServerGroup& masters = held_up.masters;
  Client client(held_up.options(10000ms));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  hold_at = 2;
  const auto set_sent = std::chrono::steady_clock::now();
  const Result held = client.acquire("released-then-extended");
  ASSERT_TRUE(held) << format_result(held);
  hold_at = -1;
  std::this_thread::sleep_for(400ms);  // master 2's connection is dropped and made again
  ASSERT_TRUE(client.wait_connected(3, 5s));
  hold_at = 1;
  const Result released = client.release(*held.lock);
  EXPECT_EQ(released.outcome, Outcome::released) << format_result(released);
  hold_at = -1;
  std::this_thread::sleep_for(400ms);  // and master 1's
  ASSERT_TRUE(client.wait_connected(3, 5s));
  std::this_thread::sleep_until(set_sent + 1700ms);  // the held SET has landed on master 2
  const Result extended = client.extend(client.adopt(held.lock->resource, held.lock->token));
  EXPECT_TRUE(refused_unsent(extended));
  std::this_thread::sleep_for(600ms);  // master 1's held release has landed
  if (extended.ok()) {
    Client rival(options_for(masters));
    EXPECT_FALSE(rival.acquire("released-then-extended")) << "two holders: the extend said " << format_result(extended);
  }
}

// And for as long as commands sent before the release may still land and their keys live: a
// review held the extends of the granted Lock (a Lease's renewals would do the same) on the
// way to master 0, each landing while the key was still there and pushing it further, the
// release there, and the acquire's SET to master 1. An adopted copy extended just after
// max_lock_ttl found the key on masters 0 and 1, said "extended", and the held release then
// deleted it on master 0: two holders, 4 of 4. Every hold here is within max_lock_ttl.
TEST(ClientLossTest, AnExtendOfAnAdoptedCopyWaitsOutWhatWasSentBeforeTheRelease) {
  const std::string key = "redlock:sent-before";
  const auto start = std::chrono::steady_clock::now();
  const auto at = [&](long ms) { std::this_thread::sleep_until(start + std::chrono::milliseconds(ms)); };
  std::array<std::atomic<long>, 3> hold_until{};  // ms after start; 0: not held
  HeldUpMasters held_up([&](std::size_t i, std::string_view chunk) {
    if (chunk.find(key) == std::string_view::npos) return;
    if (const long until = hold_until[i].load(); until > 0) at(until);
  });
  const RedisServerGroup& masters = held_up.masters;
  Client client(held_up.options(1000ms));  // max_lock_ttl 2 s
  ASSERT_TRUE(client.wait_connected(3, 5s));
  hold_until[1] = 3300;  // the acquire's SET to master 1
  const Result held = client.acquire("sent-before");
  hold_until[1] = 0;
  ASSERT_TRUE(held) << format_result(held);
  for (const auto& [sent, lands] : {std::pair{100L, 900L}, {500L, 1800L}, {900L, 2700L}}) {
    at(sent);
    ASSERT_TRUE(client.wait_connected(3, 2s));
    hold_until[0] = lands;
    (void)client.extend(*held.lock);
    hold_until[0] = 0;
  }
  at(1300);
  ASSERT_TRUE(client.wait_connected(3, 2s));
  hold_until[0] = 3600;
  const auto release_sent = std::chrono::steady_clock::now();
  EXPECT_TRUE(client.release(*held.lock));
  hold_until[0] = 0;
  ASSERT_TRUE(client.wait_connected(3, 2s));
  std::this_thread::sleep_until(release_sent + 2050ms);
  const Result extended = client.extend(client.adopt("sent-before", held.lock->token), 5000ms);
  EXPECT_TRUE(refused_unsent(extended));
  at(3750);
  if (extended.ok()) {
    Client rival(options_for(masters));
    EXPECT_FALSE(rival.acquire("sent-before")) << "two holders: the extend said " << format_result(extended);
  }
}

// The window is twice the longest ttl as it is at the extend, not at the release: a review
// held commands sent before the release for as long as a longer ttl used after it, and an
// adopted copy extended after the window fixed at the release said "extended" over a key the
// held release then deleted (two holders, 4 of 4).
TEST(ClientLossTest, ALongerTtlUsedAfterAReleaseWidensItsWindow) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.restart_guard = false;
  options.ttl = 300ms;
  options.max_lock_ttl = 500ms;  // a window of 1 s
  Client client(options);
  const Result held = client.acquire("widened");
  ASSERT_TRUE(held) << format_result(held);
  ASSERT_TRUE(client.release(*held.lock));
  AcquireOptions longer;
  longer.ttl = 3000ms;  // a window of 6 s from now on
  ASSERT_TRUE(client.acquire("widened-longer", longer));
  std::this_thread::sleep_for(1200ms);
  const Result extended = client.extend(client.adopt("widened", held.lock->token));
  EXPECT_TRUE(refused_unsent(extended));
}

// A release whose NOSCRIPT is read after the window is not sent again: sent then, it landed
// behind an extend the window no longer refused (a review: replies held 2.1 s against a 2 s
// window while another Client kept the key alive; "extended", then the resent release deleted
// the key, and a rival was granted, 3 of 3). Here the release itself is held on the way.
TEST(ClientLossTest, AReleaseAnsweredNoscriptAfterItsWindowIsNotSentAgain) {
  TokenHold hold(3100ms);
  HeldUpMasters held_up([&](std::size_t, std::string_view chunk) { hold(chunk); });
  const RedisServerGroup& masters = held_up.masters;
  auto options = held_up.options(1000ms);
  options.max_lock_ttl = 1000ms;  // a window of 3 s with connect_timeout
  options.connect_timeout = 1000ms;
  options.stall_timeout = 5s;     // the held connections are kept
  Client client(options);
  auto direct = options_for(masters);
  direct.restart_guard = false;
  direct.ttl = 5000ms;   // the key outlives the test: only a release can take it
  Client other(direct);  // another holder of the token, not behind the proxies
  ASSERT_TRUE(other.wait_connected(masters.size(), 5s));  // before the scripts are forgotten
  const Result held = client.acquire("noscript-late");
  ASSERT_TRUE(held) << format_result(held);
  ASSERT_NO_FATAL_FAILURE(forget_the_release_script(masters, client));
  hold.arm(held.lock->token);
  const auto released = std::chrono::steady_clock::now();
  EXPECT_FALSE(client.release(*held.lock));  // held 3.1 s, then answered NOSCRIPT everywhere
  hold.disarm();
  // Meanwhile the other holder keeps the key alive.
  for (const auto at : {500ms, 1400ms, 2300ms}) {
    std::this_thread::sleep_until(released + at);
    EXPECT_TRUE(other.extend(other.adopt("noscript-late", held.lock->token)));
  }
  std::this_thread::sleep_until(released + 3050ms);  // past the window: sent, behind the release
  const Result extended = client.extend(client.adopt(held.lock->resource, held.lock->token));
  ASSERT_TRUE(extended) << "the extend was meant to go out after the window: " << format_result(extended);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(with_key(masters, held.lock->key), masters.size()) << "extended, then deleted under it";
  Client rival(direct);
  EXPECT_FALSE(rival.acquire("noscript-late")) << "two holders: the extend said " << format_result(extended);
}

// The window also covers connect_timeout: a release submitted while a connection was being
// made waited in it for the handshake, was written then, and landed after a window counted
// from the submission, under an adopted extend (a review: two holders 6 of 6).
TEST(ClientLossTest, TheReleasedHereWindowCoversTheConnectTimeout) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.restart_guard = false;
  options.ttl = 300ms;
  options.max_lock_ttl = 300ms;      // twice: 600 ms
  options.connect_timeout = 3000ms;  // 3.6 s in all
  Client client(options);
  const Result held = client.acquire("connect-timeout-window");
  ASSERT_TRUE(held) << format_result(held);
  ASSERT_TRUE(client.release(*held.lock));
  std::this_thread::sleep_for(700ms);
  const Result extended = client.extend(client.adopt("connect-timeout-window", held.lock->token));
  EXPECT_TRUE(refused_unsent(extended));
}

TEST_P(ClientTest, ExtendOfALockWhoseDeadlinePassedIsRefusedWithoutSendingAnything) {
  Client client(options_for(masters_));
  const Result held = client.acquire("late");
  ASSERT_TRUE(held);
  Lock stale = *held.lock;
  stale.deadline = client.now() - 1ms;
  std::vector<long long> scripts_before;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    scripts_before.push_back(scripts_run(masters_[i]));
  }
  const Result extended = client.extend(stale);
  EXPECT_EQ(extended.outcome, Outcome::validity_expired);
  EXPECT_TRUE(extended.masters.empty());
  // No master ran a script: the extend was not sent. (A PTTL at most the ttl could not tell:
  // a sent extend sets the same ttl.)
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    EXPECT_EQ(scripts_run(masters_[i]), scripts_before[i]) << masters_[i].uri();
  }
}

TEST_P(ClientTest, KeyPrefixAndTtlOverrideAreUsed) {
  auto options = options_for(masters_);
  options.key_prefix = "app:locks:";
  Client client(options);
  AcquireOptions longer;
  longer.ttl = 60000ms;
  const Result held = client.acquire("x", longer);
  ASSERT_TRUE(held);
  EXPECT_EQ(held.lock->key, "app:locks:x");
  EXPECT_EQ(held.lock->ttl, 60000ms);
  EXPECT_GT(held.validity, 50000ms);
  EXPECT_GE(holding(masters_, "app:locks:x", held.lock->token), client.quorum());
}

TEST_P(ClientTest, BinaryResourceNamesAreKeptIntact) {
  Client client(options_for(masters_));
  const std::string resource("a\0b\r\nc", 6);
  const Result held = client.acquire(resource);
  ASSERT_TRUE(held) << format_result(held);
  EXPECT_EQ(held.lock->key, "redlock:" + resource);
  EXPECT_GE(holding(masters_, "redlock:" + resource, held.lock->token), client.quorum());
  EXPECT_TRUE(client.release(*held.lock));
}

// Client::adopt: a token printed by one process, extended and released by another Client.
TEST_P(ClientTest, AnAdoptedTokenCanBeExtendedAndReleasedByAnotherClient) {
  auto options = options_for(masters_);
  options.ttl = 4000ms;
  Client holder(options);
  const Result held = holder.acquire("handover");
  ASSERT_TRUE(held) << format_result(held);

  options.ttl = 9000ms;
  Client other(options);
  const Lock adopted = other.adopt("handover", held.lock->token);
  EXPECT_EQ(adopted.key, "redlock:handover");
  EXPECT_EQ(adopted.token, held.lock->token);
  EXPECT_EQ(adopted.ttl, 9000ms);
  EXPECT_TRUE(adopted.adopted());
  EXPECT_FALSE(adopted.lost());
  // Its validity is unknown here: nothing may rely on it before an extend.
  EXPECT_EQ(other.remaining(adopted).count(), 0);

  const Result extended = other.extend(adopted);
  ASSERT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  EXPECT_FALSE(extended.lock->adopted());
  EXPECT_GT(other.remaining(*extended.lock).count(), 0);
  // Every master that answered the extend took the new ttl. (The extend returns once a
  // quorum answered: a master whose reply was still on its way is not judged here.)
  std::size_t answered = 0;
  for (std::size_t i = 0; i < masters_.size(); ++i) {
    if (extended.masters[i].status != MasterStatus::ok) continue;
    ++answered;
    EXPECT_GT(masters_[i].command({"PTTL", adopted.key}).integer, 4000) << extended.masters[i].endpoint;
  }
  EXPECT_GE(answered, other.quorum());

  const Result released = other.release(*extended.lock);
  EXPECT_EQ(released.outcome, Outcome::released) << format_result(released);
  EXPECT_TRUE(eventually([&] { return with_key(masters_, adopted.key) == 0; }));
}

TEST_P(ClientTest, AnAdoptedTokenNobodyHoldsIsNeverRecreatedByExtend) {
  Client client(options_for(masters_));
  const Lock adopted = client.adopt("nobody", "0123456789abcdef0123456789abcdef");
  const Result extended = client.extend(adopted);
  EXPECT_EQ(extended.outcome, Outcome::lost) << format_result(extended);
  EXPECT_EQ(with_key(masters_, adopted.key), 0u);
}

TEST_P(ClientTest, AdoptRefusesATokenOrResourceItCouldNotHaveMadeAndNamesIt) {
  Client client(options_for(masters_));
  const auto message_of = [&](std::string_view resource, std::string_view token) -> std::string {
    try {
      (void)client.adopt(resource, token);
    } catch (const UsageError& error) {
      return error.what();
    }
    return "no error";
  };
  EXPECT_NE(message_of("job", "not-a-token").find("'not-a-token'"), std::string::npos) << message_of("job", "not-a-token");
  EXPECT_NE(message_of("job", "0123456789ABCDEF0123456789ABCDEF").find("lowercase hex"), std::string::npos);
  EXPECT_NE(message_of("job", "").find("0 bytes"), std::string::npos);
  EXPECT_NE(message_of("", "0123456789abcdef0123456789abcdef").find("resource name is empty"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Masters, ClientTest, ::testing::Values(1u, 3u, 5u),
                         [](const ::testing::TestParamInfo<std::size_t>& param_info) {
                           return "N" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace redlock::testing

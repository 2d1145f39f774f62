// Fencing tokens (AcquireOptions::fencing) against real masters: tokens increase between
// grants, survive a frozen minority, survive restarts thanks to the counter catch-up (and do
// not without it), and let a fenced store refuse a holder paused past its validity.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <mutex>
#include <thread>

#include "support/fenced_store.h"
#include "test_util.h"

namespace redlock::testing {
namespace {

// Retries for a while: right after connecting, a master's fencing votes wait for its
// counter catch-up (one command deadline, then one round trip).
AcquireOptions fenced() {
  AcquireOptions options;
  options.fencing = true;
  options.retry_count = -1;
  options.wait = 5000ms;
  return options;
}

std::uint64_t counter(const RedisServer& master) {
  const Reply reply = master.command({"GET", "redlock-fence-counter"});
  return reply.type == Reply::Type::string ? std::stoull(reply.str) : 0;
}

class FencingTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(FencingTest, TokensStrictlyIncreaseBetweenGrants) {
  RedisServerGroup masters(GetParam());
  Client alice(options_for(masters));
  Client bob(options_for(masters));
  ASSERT_TRUE(alice.wait_connected(masters.size(), 5s));
  ASSERT_TRUE(bob.wait_connected(masters.size(), 5s));
  std::uint64_t previous = 0;
  for (int i = 0; i < 20; ++i) {
    Client& client = i % 2 == 0 ? alice : bob;
    const Result held = client.acquire("fenced", fenced());
    ASSERT_TRUE(held) << format_result(held);
    EXPECT_GT(held.lock->fence, previous);
    previous = held.lock->fence;
    ASSERT_TRUE(client.release(*held.lock));
  }
  const Result plain = alice.acquire("unfenced");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain.lock->fence, 0u);
}

INSTANTIATE_TEST_SUITE_P(Masters, FencingTest, ::testing::Values(1u, 3u, 5u),
                         [](const ::testing::TestParamInfo<std::size_t>& param_info) {
                           return "N" + std::to_string(param_info.param);
                         });

TEST(FencingRounds, AFrozenMinorityDoesNotStopTokens) {
  RedisServerGroup masters(5);
  Client client(options_for(masters));
  ASSERT_TRUE(client.wait_connected(5, 5s));
  const Result first = client.acquire("a", fenced());
  ASSERT_TRUE(first) << format_result(first);
  ASSERT_TRUE(client.release(*first.lock));
  masters[1].freeze();
  masters[3].freeze();
  const Result second = client.acquire("b", fenced());
  ASSERT_TRUE(second) << format_result(second);
  EXPECT_GT(second.lock->fence, first.lock->fence);
  masters[1].thaw();
  masters[3].thaw();
}

TEST(FencingRounds, AQuorumHoldsTheTokenBeforeItIsHandedOver) {
  RedisServerGroup masters(5);
  Client client(options_for(masters));
  ASSERT_TRUE(client.wait_connected(5, 5s));
  const Result held = client.acquire("x", fenced());
  ASSERT_TRUE(held);
  std::size_t at_least_token = 0;
  for (std::size_t i = 0; i < masters.size(); ++i) {
    if (counter(masters[i]) >= held.lock->fence) ++at_least_token;
  }
  EXPECT_GE(at_least_token, client.quorum());
}

// N = 3: two masters restarted one after the other (no persistence: counters back to 0),
// then a grant while the third is frozen. With the catch-up, each restarted master was
// raised to the others' counter before it counted, so the token still goes up. Without it,
// the grant is made by the two forgetful masters alone and the token goes backwards.
std::uint64_t token_after_two_restarts(bool catch_up, std::uint64_t& before) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.fence_catch_up = catch_up;
  Client client(options);
  if (!client.wait_connected(3, 5s)) throw std::runtime_error("not connected");
  for (int i = 0; i < 5; ++i) {
    const Result held = client.acquire("seq", fenced());
    if (!held) throw std::runtime_error(format_result(held));
    before = held.lock->fence;
    client.release(*held.lock);
  }
  for (const std::size_t restarted : {0u, 1u}) {
    masters[restarted].kill();
    masters[restarted].restart();
    if (!client.wait_connected(3, 5s)) throw std::runtime_error("no reconnect");
    if (catch_up && !eventually([&] { return counter(masters[restarted]) >= before; })) {
      throw std::runtime_error("master was not caught up");
    }
    std::this_thread::sleep_for(50ms);
  }
  masters[2].freeze();
  const Result held = client.acquire("seq", fenced());
  masters[2].thaw();
  if (!held) throw std::runtime_error(format_result(held));
  return held.lock->fence;
}

TEST(FencingRestarts, CatchUpKeepsTokensIncreasingAcrossRestarts) {
  std::uint64_t before = 0;
  const std::uint64_t after = token_after_two_restarts(true, before);
  EXPECT_GT(after, before);
}

TEST(FencingRestarts, WithoutCatchUpTheSameRestartsSendTokensBackwards) {
  std::uint64_t before = 0;
  const std::uint64_t after = token_after_two_restarts(false, before);
  EXPECT_LE(after, before) << "this is the failure the catch-up prevents";
}

TEST(FencingRounds, AnEvictingMaxmemoryPolicyIsWarnedAbout) {
  RedisServerGroup masters(3);
  masters[1].command({"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"});
  auto options = options_for(masters);
  auto warnings = std::make_shared<std::vector<std::string>>();
  auto guard = std::make_shared<std::mutex>();
  options.on_warning = [warnings, guard](const std::string& message) {
    const std::lock_guard lock(*guard);
    warnings->push_back(message);
  };
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const std::lock_guard lock(*guard);
  ASSERT_EQ(warnings->size(), 1u);
  EXPECT_NE(warnings->front().find(masters[1].uri().substr(8)), std::string::npos) << warnings->front();
  EXPECT_NE(warnings->front().find("allkeys-lru"), std::string::npos);
}

// A holder paused (SIGSTOP) past its validity wakes up and writes with its old token after
// another holder wrote: the fenced store refuses it.
TEST(FencedStore, RefusesAHolderPausedPastItsValidity) {
  RedisServerGroup masters(3);
  RedisServer storage_server;
  const support::FencedStore store(storage_server.host(), storage_server.port());
  int token_pipe[2];
  int go_pipe[2];
  ASSERT_EQ(::pipe(token_pipe), 0);
  ASSERT_EQ(::pipe(go_pipe), 0);

  const pid_t holder = ::fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    // The paused holder. No gtest here; report through the pipe and the exit code.
    int code = 10;
    try {
      auto options = options_for(masters);
      options.ttl = 400ms;
      Client client(options);
      client.wait_connected(3, 5s);
      const Result held = client.acquire("account", fenced());
      if (held) {
        const std::uint64_t token = held.lock->fence;
        (void)!::write(token_pipe[1], &token, sizeof(token));
        char go = 0;
        (void)!::read(go_pipe[0], &go, 1);  // the parent freezes us around here
        code = store.write(token, "written by the paused holder") ? 1 : 0;
      }
    } catch (...) {
      code = 20;
    }
    ::_exit(code);  // never return into gtest: this process must not run the fixtures' destructors
  }

  std::uint64_t paused_token = 0;
  ASSERT_EQ(::read(token_pipe[0], &paused_token, sizeof(paused_token)), static_cast<ssize_t>(sizeof(paused_token)));
  ::kill(holder, SIGSTOP);
  std::this_thread::sleep_for(600ms);  // past the holder's 400 ms lease

  Client other(options_for(masters));
  ASSERT_TRUE(other.wait_connected(3, 5s));
  const Result held = other.acquire("account", fenced());
  ASSERT_TRUE(held) << format_result(held);
  EXPECT_GT(held.lock->fence, paused_token);
  EXPECT_TRUE(store.write(held.lock->fence, "written by the new holder"));

  ::kill(holder, SIGCONT);
  const char go = 1;
  ASSERT_EQ(::write(go_pipe[1], &go, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(holder, &status, 0), holder);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the stale write was accepted; 10: the holder never got the lock; 20: it threw";
  EXPECT_EQ(store.value(), "written by the new holder");
  EXPECT_EQ(store.highest_token(), held.lock->fence);
  for (int fd : {token_pipe[0], token_pipe[1], go_pipe[0], go_pipe[1]}) ::close(fd);
}

}  // namespace
}  // namespace redlock::testing

// SPDX-License-Identifier: Apache-2.0
// Tests for redlock::support::RedisServer: the test-only helper that runs
// real redis-server processes. Everything else builds on it, so it is worth
// checking that freeze/kill/restart really do what the chaos tests assume.
#include "support/hiredis_handle.h"
#include "support/redis_server.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

using redlock::support::RedisServer;
using redlock::support::RedisServerGroup;
using redlock::support::RedisServerOptions;
using redlock::support::Reply;
using namespace std::chrono_literals;

using redlock::support::RedisContextPtr;
using redlock::support::RedisReplyPtr;

// A raw client with a short I/O timeout, independent of RedisServer::command,
// so the freeze test observes the server the way the lock library would.
// Returns true on PONG, false on any error or timeout.
bool raw_ping(const RedisServer& server, std::chrono::milliseconds timeout) {
  const timeval tv = redlock::support::to_timeval(timeout);
  RedisContextPtr ctx(redisConnectWithTimeout(server.host().c_str(), server.port(), tv));
  if (!ctx || ctx->err != 0) return false;
  if (redisSetTimeout(ctx.get(), tv) != REDIS_OK) return false;
  RedisReplyPtr reply(static_cast<redisReply*>(redisCommand(ctx.get(), "PING")));
  return reply && reply->type == REDIS_REPLY_STATUS && std::string(reply->str) == "PONG";
}

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

TEST(RedisServer, StartsAndAnswersCommands) {
  RedisServer server;
  ASSERT_TRUE(server.running());
  EXPECT_GT(server.pid(), 0);
  EXPECT_NE(server.port(), 0);
  EXPECT_EQ(server.host(), "127.0.0.1");
  EXPECT_EQ(server.uri(), "redis://127.0.0.1:" + std::to_string(server.port()));

  const Reply pong = server.command({"PING"});
  EXPECT_EQ(pong.type, Reply::Type::status);
  EXPECT_EQ(pong.str, "PONG");

  EXPECT_EQ(server.command({"SET", "key", "value"}).str, "OK");
  const Reply value = server.command({"GET", "key"});
  EXPECT_EQ(value.type, Reply::Type::string);
  EXPECT_EQ(value.str, "value");

  // Binary-safe: embedded NUL survives the round trip.
  const std::string binary("a\0b", 3);
  server.command({"SET", "bin", binary});
  EXPECT_EQ(server.command({"GET", "bin"}).str, binary);

  const Reply counter = server.command({"INCR", "counter"});
  EXPECT_EQ(counter.type, Reply::Type::integer);
  EXPECT_EQ(counter.integer, 1);

  EXPECT_EQ(server.command({"GET", "missing"}).type, Reply::Type::nil);

  server.command({"RPUSH", "list", "x", "y"});
  const Reply list = server.command({"LRANGE", "list", "0", "-1"});
  ASSERT_EQ(list.type, Reply::Type::array);
  ASSERT_EQ(list.elements.size(), 2u);
  EXPECT_EQ(list.elements[1].str, "y");

  // Redis errors are data, not exceptions.
  const Reply error = server.command({"NO-SUCH-COMMAND"});
  EXPECT_EQ(error.type, Reply::Type::error);
  EXPECT_NE(error.str.find("unknown command"), std::string::npos);

  EXPECT_NE(server.log_tail().find("Ready to accept connections"), std::string::npos);
}

TEST(RedisServer, FreezeMakesClientsTimeOutAndThawRestoresThem) {
  RedisServer server;
  ASSERT_TRUE(raw_ping(server, 200ms));

  server.freeze();
  EXPECT_TRUE(server.running());  // stopped, not dead
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(raw_ping(server, 200ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);  // a timeout, not a refusal

  server.thaw();
  EXPECT_TRUE(raw_ping(server, 1000ms));
  EXPECT_EQ(server.command({"PING"}).str, "PONG");
  server.thaw();  // no-op when not frozen
}

TEST(RedisServer, KillMakesItNotRunningAndCommandsThrow) {
  RedisServer server;
  const pid_t old_pid = server.pid();
  server.kill();
  EXPECT_FALSE(server.running());
  EXPECT_EQ(server.pid(), -1);
  EXPECT_FALSE(process_exists(old_pid));
  EXPECT_THROW(server.command({"PING"}), std::runtime_error);
  EXPECT_THROW(server.freeze(), std::logic_error);
  server.kill();  // idempotent
  server.stop();
}

TEST(RedisServer, KillWhileFrozen) {
  RedisServer server;
  server.freeze();
  server.kill();
  EXPECT_FALSE(server.running());
  server.restart();
  EXPECT_EQ(server.command({"PING"}).str, "PONG");
}

TEST(RedisServer, StopShutsDownGracefully) {
  RedisServer server;
  server.freeze();  // stop() must still work on a frozen server
  server.stop();
  EXPECT_FALSE(server.running());
  EXPECT_NE(server.log_tail().find("ready to exit"), std::string::npos) << server.log_tail();
}

TEST(RedisServer, RunningNoticesAnExternalKill) {
  RedisServer server;
  ASSERT_EQ(::kill(server.pid(), SIGKILL), 0);
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server.running() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_FALSE(server.running());
  EXPECT_THROW(server.command({"PING"}), std::runtime_error);
}

TEST(RedisServer, RestartWithoutPersistenceForgetsKeys) {
  RedisServer server;
  const auto port = server.port();
  server.command({"SET", "key", "value"});
  server.kill();
  server.restart();
  EXPECT_TRUE(server.running());
  EXPECT_EQ(server.port(), port);
  EXPECT_EQ(server.command({"GET", "key"}).type, Reply::Type::nil);
}

TEST(RedisServer, RestartWithPersistenceKeepsKeys) {
  RedisServerOptions options;
  options.persistence = true;
  RedisServer server(options);
  const auto port = server.port();
  server.command({"SET", "key", "value"});
  server.kill();  // no graceful shutdown: the AOF fsync is what saves us
  server.restart();
  EXPECT_EQ(server.port(), port);
  const Reply value = server.command({"GET", "key"});
  EXPECT_EQ(value.type, Reply::Type::string);
  EXPECT_EQ(value.str, "value");
}

TEST(RedisServer, RestartWhileRunningStopsFirst) {
  RedisServer server;
  const pid_t old_pid = server.pid();
  server.restart();
  EXPECT_TRUE(server.running());
  EXPECT_NE(server.pid(), old_pid);
  EXPECT_FALSE(process_exists(old_pid));
}

TEST(RedisServer, PasswordIsRequiredAndCommandAuthenticates) {
  RedisServerOptions options;
  options.password = "s3cret";
  RedisServer server(options);
  EXPECT_EQ(server.command({"SET", "key", "value"}).str, "OK");
  EXPECT_FALSE(raw_ping(server, 500ms));  // unauthenticated PING gets -NOAUTH
}

TEST(RedisServer, ExtraArgsArePassedThrough) {
  RedisServerOptions options;
  options.extra_args = {"--maxmemory", "12345678"};
  RedisServer server(options);
  const Reply config = server.command({"CONFIG", "GET", "maxmemory"});
  ASSERT_EQ(config.elements.size(), 2u);
  EXPECT_EQ(config.elements[1].str, "12345678");
}

TEST(RedisServer, BadArgumentsThrowWithLogTail) {
  RedisServerOptions options;
  options.extra_args = {"--no-such-directive", "1"};
  try {
    RedisServer server(options);
    FAIL() << "expected the start to fail";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:"), std::string::npos) << what;
    EXPECT_NE(what.find("exit status 1"), std::string::npos) << what;
    EXPECT_NE(what.find("Bad directive"), std::string::npos) << what;
  }
}

TEST(RedisServer, MissingExecutableThrows) {
  RedisServerOptions options;
  options.executable = "redlock-no-such-redis-server";
  EXPECT_THROW(RedisServer server(options), std::runtime_error);
}

TEST(RedisServer, FixedPortInUseThrows) {
  RedisServer first;
  RedisServerOptions options;
  options.port = first.port();
  try {
    RedisServer second(options);
    FAIL() << "expected the start to fail";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
  }
  EXPECT_EQ(first.command({"PING"}).str, "PONG");  // the impostor check kept us honest
}

TEST(RedisServer, DestructorLeavesNoChild) {
  pid_t pid = -1;
  std::string dir;
  {
    RedisServer server;
    pid = server.pid();
    dir = server.data_dir();
    ASSERT_TRUE(process_exists(pid));
  }
  errno = 0;
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_EQ(::access(dir.c_str(), F_OK), -1);  // temp dir removed
}

TEST(RedisServer, DestructorReapsAFrozenServer) {
  pid_t pid = -1;
  {
    RedisServer server;
    pid = server.pid();
    server.freeze();
  }
  errno = 0;
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(RedisServerGroup, GivesDistinctPorts) {
  RedisServerGroup group(3);
  ASSERT_EQ(group.size(), 3u);
  std::set<std::uint16_t> ports;
  for (std::size_t i = 0; i < group.size(); ++i) {
    ports.insert(group[i].port());
    EXPECT_EQ(group[i].command({"PING"}).str, "PONG");
  }
  EXPECT_EQ(ports.size(), 3u);
  const auto uris = group.uris();
  ASSERT_EQ(uris.size(), 3u);
  EXPECT_EQ(uris[0], "redis://127.0.0.1:" + std::to_string(group[0].port()));
  EXPECT_EQ(std::set<std::string>(uris.begin(), uris.end()).size(), 3u);
  EXPECT_THROW(group[3], std::out_of_range);
}

TEST(RedisServerGroup, RejectsASharedFixedPort) {
  RedisServerOptions options;
  options.port = 6399;
  EXPECT_THROW(RedisServerGroup(2, options), std::invalid_argument);
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// The LD_PRELOAD clock shim (chaos/clock_shim) and its controller, redlock::chaos::ClockControl:
// the controller's arithmetic on its own, then real redis-servers started with the shim.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "clock_control.h"
#include "clock_shim/clock_file.h"
#include "test_util.h"

namespace redlock::testing {
namespace {

using chaos::ClockControl;
using support::RedisServerOptions;
using Steady = std::chrono::steady_clock;

// A private directory for control files, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern =
        (base != nullptr && *base != '\0' ? std::string(base) : std::string("/tmp")) + "/redlock-clock-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::chrono::nanoseconds real_now() {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

long long pttl(const RedisServer& server, const std::string& key) {
  const Reply reply = server.command({"PTTL", key});
  EXPECT_EQ(reply.type, Reply::Type::integer) << reply.str;
  return reply.integer;
}

// The server's wall clock, as TIME reports it.
std::chrono::nanoseconds server_time(const RedisServer& server) {
  const Reply reply = server.command({"TIME"});
  if (reply.type != Reply::Type::array || reply.elements.size() != 2) {
    throw std::runtime_error("unexpected TIME reply");
  }
  return std::chrono::seconds(std::stoll(reply.elements[0].str)) +
         std::chrono::microseconds(std::stoll(reply.elements[1].str));
}

// How far the server's wall clock is from ours (TIME minus our real clock), to the
// resolution a loaded machine allows.
std::chrono::milliseconds server_clock_offset(const RedisServer& server) {
  const auto before = real_now();
  const auto reported = server_time(server);
  const auto after = real_now();
  return std::chrono::duration_cast<std::chrono::milliseconds>(reported - (before + (after - before) / 2));
}

bool shim_is_loaded(const RedisServer& server) {
  std::ifstream maps("/proc/" + std::to_string(server.pid()) + "/maps");
  const std::string text{std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>()};
  return text.find("libredlock_clock_shim") != std::string::npos;
}

RedisServerOptions shimmed(const ClockControl& clock) {
  RedisServerOptions options;
  options.environment = clock.server_environment();
  return options;
}

std::string info_field(const std::string& info, const std::string& name) {
  const auto at = info.find(name + ":");
  if (at == std::string::npos) return {};
  const auto begin = at + name.size() + 1;
  return info.substr(begin, info.find_first_of("\r\n", begin) - begin);
}

// ------------------------------------------------------------------------ the controller

TEST(ClockControl, StartsAsTheIdentityAndWritesTheSharedLayout) {
  const TempDir dir;
  const ClockControl clock(dir.path() + "/clock");
  EXPECT_EQ(clock.path(), dir.path() + "/clock");
  EXPECT_EQ(clock.env_entry(), "REDLOCK_CLOCK_FILE=" + clock.path());
  EXPECT_EQ(clock.offset(), std::chrono::nanoseconds(0));
  EXPECT_EQ(clock.rate(), 1.0);

  const std::vector<std::string> env = clock.server_environment();
  ASSERT_EQ(env.size(), 2U);
  EXPECT_EQ(env[0], "LD_PRELOAD=" + chaos::clock_shim_path());
  EXPECT_EQ(env[1], clock.env_entry());
  EXPECT_TRUE(std::filesystem::path(chaos::clock_shim_path()).is_absolute());
  EXPECT_TRUE(std::filesystem::is_regular_file(chaos::clock_shim_path())) << chaos::clock_shim_path();

  // What the shim will see, read back through the shared header.
  ASSERT_EQ(std::filesystem::file_size(clock.path()), sizeof(redlock_clock_file));
  redlock_clock_file file{};
  std::ifstream in(clock.path(), std::ios::binary);
  in.read(reinterpret_cast<char*>(&file), sizeof file);
  ASSERT_TRUE(in);
  EXPECT_EQ(file.magic, REDLOCK_CLOCK_MAGIC);
  EXPECT_EQ(file.version, REDLOCK_CLOCK_VERSION);
  EXPECT_EQ(file.sequence % 2, 0U);
  EXPECT_GT(file.sequence, 0U);
  EXPECT_EQ(file.anchor_fake_ns, file.anchor_real_ns);
  EXPECT_EQ(file.rate, 1.0);
}

TEST(ClockControl, RelativePathIsMadeAbsoluteAndTheFileIsRemovedAtTheEnd) {
  const TempDir dir;
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  std::string path;
  {
    const ClockControl clock("relative-clock");
    path = clock.path();
    std::filesystem::current_path(cwd);
    EXPECT_EQ(path, dir.path() + "/relative-clock");
    EXPECT_TRUE(std::filesystem::exists(path));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(ClockControl, JumpsAddToTheOffset) {
  const TempDir dir;
  ClockControl clock(dir.path() + "/clock");
  clock.jump(30s);
  EXPECT_EQ(clock.offset(), std::chrono::nanoseconds(30s));
  clock.jump(40s);
  EXPECT_EQ(clock.offset(), std::chrono::nanoseconds(70s));
  clock.jump(-10s);
  EXPECT_EQ(clock.offset(), std::chrono::nanoseconds(60s));
  EXPECT_EQ(clock.rate(), 1.0);
  clock.reset();
  EXPECT_EQ(clock.offset(), std::chrono::nanoseconds(0));
}

TEST(ClockControl, RateChangesAreContinuous) {
  const TempDir dir;
  ClockControl clock(dir.path() + "/clock");
  clock.jump(5s);

  // No jump when the rate changes: only the few microseconds between the calls, times 9.
  clock.set_rate(10.0);
  const auto at_switch = clock.offset();
  EXPECT_GE(at_switch, std::chrono::nanoseconds(5s));
  EXPECT_LT(at_switch, std::chrono::nanoseconds(5s) + 50ms);
  EXPECT_EQ(clock.rate(), 10.0);

  // The fake clock gains 9 ns per real ns.
  const auto start = Steady::now();
  const auto before = clock.offset();
  std::this_thread::sleep_for(100ms);
  const auto after = clock.offset();
  const auto elapsed = Steady::now() - start;
  EXPECT_GE(after - before, 9 * std::chrono::nanoseconds(100ms) - 1ms);
  EXPECT_LE(after - before, 9 * elapsed + 1ms);

  // Back to 1x: the offset gained stays, and stays put.
  clock.reset_rate();
  const auto kept = clock.offset();
  EXPECT_GE(kept, after);
  EXPECT_LT(kept - after, 50ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(clock.offset(), kept);

  // A slow clock loses time.
  clock.set_rate(0.5);
  const auto slow_before = clock.offset();
  std::this_thread::sleep_for(50ms);
  EXPECT_LE(clock.offset(), slow_before - 24ms);
}

TEST(ClockControl, RejectsRatesThatAreNotPositiveAndFinite) {
  const TempDir dir;
  ClockControl clock(dir.path() + "/clock");
  clock.set_rate(2.0);
  for (const double bad :
       {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(clock.set_rate(bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(clock.rate(), 2.0);
}

TEST(ClockControl, CannotCreateAFileInAMissingDirectory) {
  EXPECT_THROW(ClockControl("/nonexistent-redlock-dir/clock"), std::system_error);
}

TEST(ClockControl, SupportRejectsMalformedEnvironmentEntries) {
  for (const std::string bad : {"NOEQUALS", "=value"}) {
    RedisServerOptions options;
    options.environment = {bad};
    EXPECT_THROW(RedisServer server(options), std::invalid_argument) << bad;
  }
}

// ------------------------------------------------------------------------ shim, no redis

// date(1) reads CLOCK_REALTIME through clock_gettime: the shim in a process other than redis.
TEST(ClockShim, MovesTheClockOfAnyPreloadedProcess) {
  const TempDir dir;
  ClockControl clock(dir.path() + "/clock");
  clock.jump(std::chrono::hours(24 * 1000));
  const std::string command =
      "env LD_PRELOAD='" + chaos::clock_shim_path() + "' REDLOCK_CLOCK_FILE='" + clock.path() + "' date +%s";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buffer[64] = {};
  const bool got = std::fgets(buffer, sizeof buffer, pipe) != nullptr;
  EXPECT_EQ(::pclose(pipe), 0);
  ASSERT_TRUE(got);
  const long long reported = std::stoll(buffer);
  const long long expected = std::chrono::duration_cast<std::chrono::seconds>(real_now() + clock.offset()).count();
  EXPECT_NEAR(static_cast<double>(reported), static_cast<double>(expected), 2.0);
}

// ------------------------------------------------------------------------ shim in redis

class ClockShimRedis : public ::testing::Test {
 protected:
  TempDir dir_;
  ClockControl clock_{dir_.path() + "/clock"};
  RedisServer server_{shimmed(clock_)};
};

TEST_F(ClockShimRedis, UnchangedClockExpiresNormally) {
  ASSERT_TRUE(shim_is_loaded(server_));
  EXPECT_LT(std::abs(server_clock_offset(server_).count()), 2000);
  ASSERT_EQ(server_.command({"SET", "k", "v", "PX", "60000"}).str, "OK");
  const long long left = pttl(server_, "k");
  EXPECT_GE(left, 59000);
  EXPECT_LE(left, 60000);
}

TEST_F(ClockShimRedis, ForwardJumpExpiresKeysEarly) {
  ASSERT_EQ(server_.command({"SET", "k", "v", "PX", "60000"}).str, "OK");
  const std::string uptime_before = info_field(server_.command({"INFO", "server"}).str, "uptime_in_seconds");

  clock_.jump(30s);
  const long long left = pttl(server_, "k");
  EXPECT_GE(left, 29000);
  EXPECT_LE(left, 30500);
  EXPECT_NEAR(static_cast<double>(server_clock_offset(server_).count()), 30000.0, 2000.0);
  EXPECT_EQ(get(server_, "k"), "v");

  clock_.jump(40s);
  EXPECT_EQ(get(server_, "k"), std::nullopt);
  EXPECT_EQ(server_.command({"EXISTS", "k"}).integer, 0);
  EXPECT_NEAR(static_cast<double>(server_clock_offset(server_).count()), 70000.0, 2000.0);

  // Still alive and answering, with TTLs running from the new time.
  EXPECT_EQ(server_.command({"PING"}).str, "PONG");
  const Reply info = server_.command({"INFO"});
  ASSERT_EQ(info.type, Reply::Type::string);
  EXPECT_NE(info.str.find("redis_version:"), std::string::npos);
  ASSERT_EQ(server_.command({"SET", "k2", "v", "PX", "60000"}).str, "OK");
  EXPECT_GE(pttl(server_, "k2"), 59000);
  // Informational: whether INFO's uptime follows the wall clock (it matters to the restart
  // guard, which reads it).
  std::printf("uptime_in_seconds before the jumps: %s, after +70 s: %s\n", uptime_before.c_str(),
              info_field(info.str, "uptime_in_seconds").c_str());
}

TEST_F(ClockShimRedis, FastClockExpiresKeysEarlyOnThatServerOnly) {
  const RedisServer plain;
  clock_.set_rate(10.0);
  ASSERT_EQ(server_.command({"SET", "k", "v", "PX", "2000"}).str, "OK");
  const auto start = Steady::now();
  ASSERT_EQ(plain.command({"SET", "k", "v", "PX", "2000"}).str, "OK");

  // At 10x, 2000 fake ms are about 200 real ms.
  const bool expired = eventually([&] { return !get(server_, "k").has_value(); }, 3000ms);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Steady::now() - start);
  ASSERT_TRUE(expired);
  EXPECT_LT(took, 1000ms) << "took " << took.count() << " ms";
  EXPECT_EQ(get(plain, "k"), "v") << "after " << took.count() << " ms";
  EXPECT_GT(pttl(plain, "k"), 0);

  // Back to 1x: the server keeps its lead and otherwise behaves.
  clock_.reset_rate();
  EXPECT_EQ(server_.command({"PING"}).str, "PONG");
  ASSERT_EQ(server_.command({"SET", "k", "v", "PX", "60000"}).str, "OK");
  EXPECT_GE(pttl(server_, "k"), 59000);
  EXPECT_EQ(server_.command({"INFO"}).type, Reply::Type::string);
  EXPECT_NEAR(static_cast<double>(server_clock_offset(server_).count()),
              static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(clock_.offset()).count()),
              2000.0);
}

TEST_F(ClockShimRedis, RestartKeepsThePreloadAndTheClock) {
  clock_.jump(std::chrono::hours(1));
  EXPECT_NEAR(static_cast<double>(server_clock_offset(server_).count()), 3600000.0, 2000.0);
  server_.restart();
  ASSERT_TRUE(shim_is_loaded(server_));
  EXPECT_NEAR(static_cast<double>(server_clock_offset(server_).count()), 3600000.0, 2000.0);
  clock_.reset();
  EXPECT_LT(std::abs(server_clock_offset(server_).count()), 2000);
}

// The entries replace inherited variables of the same name.
TEST(ClockShimEnvironment, EntriesOverrideTheInheritedEnvironment) {
  const TempDir dir;
  ClockControl clock(dir.path() + "/clock");
  clock.jump(std::chrono::hours(2));
  ASSERT_EQ(::setenv("REDLOCK_CLOCK_FILE", "/nonexistent-redlock-dir/clock", 1), 0);
  try {
    const RedisServer server(shimmed(clock));
    EXPECT_NEAR(static_cast<double>(server_clock_offset(server).count()), 7200000.0, 2000.0);
  } catch (...) {
    ::unsetenv("REDLOCK_CLOCK_FILE");
    throw;
  }
  ::unsetenv("REDLOCK_CLOCK_FILE");
}

// LD_PRELOAD without a usable control file: everything passes through.
TEST(ClockShimEnvironment, PassesThroughWithoutAControlFile) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"REDLOCK_CLOCK_FILE=/nonexistent-redlock-dir/clock"}}) {
    RedisServerOptions options;
    options.environment = {"LD_PRELOAD=" + chaos::clock_shim_path()};
    options.environment.insert(options.environment.end(), extra.begin(), extra.end());
    const RedisServer server(options);
    ASSERT_TRUE(shim_is_loaded(server));
    EXPECT_LT(std::abs(server_clock_offset(server).count()), 2000);
    ASSERT_EQ(server.command({"SET", "k", "v", "PX", "60000"}).str, "OK");
    const long long left = pttl(server, "k");
    EXPECT_GE(left, 59000);
    EXPECT_LE(left, 60000);
    EXPECT_EQ(server.command({"PING"}).str, "PONG");
  }
}

}  // namespace
}  // namespace redlock::testing

// SPDX-License-Identifier: Apache-2.0
// Tests for configuration validation (redlock::Client's constructor throws ConfigError naming
// the bad field and value, never a password) and for per-call argument checks through the
// public API (Outcome::invalid_argument, nothing written to Redis).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <future>
#include <limits>
#include <string>
#include <vector>

#include "redlock/redlock.h"
#include "support/redis_server.h"

namespace {

using namespace std::chrono_literals;
using redlock::AcquireOptions;
using redlock::Client;
using redlock::ClientOptions;
using redlock::ConfigError;
using redlock::Lock;
using redlock::Outcome;
using redlock::Result;
using redlock::support::RedisServer;
using redlock::support::Reply;
using ::testing::HasSubstr;
using ::testing::Not;

// Masters on closed ports: construction does not wait for connections.
ClientOptions valid_options() {
  ClientOptions options;
  options.masters = {"redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://127.0.0.1:3"};
  return options;
}

// what() of the ConfigError that constructing a Client with `options` throws; records a
// failure if it constructs or throws anything else.
std::string config_error(ClientOptions options) {
  try {
    Client client(std::move(options));
    ADD_FAILURE() << "Client constructor did not throw";
  } catch (const ConfigError& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "Client constructor threw a non-ConfigError: " << error.what();
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// A valid configuration

TEST(ClientValidation, ValidConfigConstructsAndDestructs) {
  ClientOptions options = valid_options();
  options.masters.push_back("redis://u:pw@127.0.0.1:4/2");
  options.masters.push_back("redis://[::1]:5");
  {
    Client client(options);
    EXPECT_EQ(client.size(), 5u);
    EXPECT_EQ(client.quorum(), 3u);
    EXPECT_EQ(client.endpoints(), (std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3",
                                                           "127.0.0.1:4/2", "[::1]:5"}));
    EXPECT_EQ(client.options().masters, options.masters);
    EXPECT_EQ(client.drift(10'000ms), std::chrono::microseconds(102'000));
  }
}

TEST(ClientValidation, EdgeValuesAreAccepted) {
  ClientOptions options = valid_options();
  options.key_prefix = std::string(redlock::kMaxKeyPrefixSize, 'p');
  options.drift_factor = 0.0;
  options.drift_constant = 0ms;
  options.ttl = 1ms;
  options.retry_count = 0;
  options.retry_delay = 0ms;
  options.retry_jitter = 0ms;
  options.stall_timeout = 0ms;
  options.reconnect_min = 10ms;
  options.reconnect_max = 10ms;
  options.source_address = "::1";
  EXPECT_NO_THROW({ Client client(options); });
  options.source_address = "127.0.0.1";
  options.key_prefix.clear();
  EXPECT_NO_THROW({ Client client(options); });
}

// ---------------------------------------------------------------------------------------
// Masters

TEST(ClientValidation, MastersEmpty) {
  ClientOptions options = valid_options();
  options.masters.clear();
  EXPECT_THAT(config_error(options), HasSubstr("masters"));
}

TEST(ClientValidation, MoreMastersThanTheMaximum) {
  ClientOptions options;
  for (std::size_t i = 1; i <= redlock::kMaxMasters; ++i)
    options.masters.push_back("redis://127.0.0.1:" + std::to_string(i));
  EXPECT_NO_THROW({ Client client(options); });
  options.masters.push_back("redis://127.0.0.1:65000");
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("lists " + std::to_string(redlock::kMaxMasters + 1) + " masters"));
  EXPECT_THAT(message, HasSubstr("maximum " + std::to_string(redlock::kMaxMasters)));
}

TEST(ClientValidation, DuplicateMaster) {
  ClientOptions options = valid_options();
  options.masters.push_back("redis://127.0.0.1:2");
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("127.0.0.1:2"));
  EXPECT_THAT(message, HasSubstr("more than once"));
}

TEST(ClientValidation, DuplicateMasterWithDifferentDb) {
  ClientOptions options;
  options.masters = {"redis://127.0.0.1:7000/1", "redis://127.0.0.1:7001", "redis://127.0.0.1:7000/2"};
  EXPECT_THAT(config_error(options), HasSubstr("127.0.0.1:7000"));
}

TEST(ClientValidation, DuplicateMasterDefaultPortSpelledOut) {
  ClientOptions options;
  options.masters = {"redis://cache", "redis://cache:6379"};
  EXPECT_THAT(config_error(options), HasSubstr("cache:6379"));
}

TEST(ClientValidation, DuplicateMasterHostCaseDiffers) {
  ClientOptions options;
  options.masters = {"redis://Redis-A.example:7000", "redis://redis-a.EXAMPLE:7000"};
  EXPECT_THAT(config_error(options), HasSubstr(":7000"));
}

TEST(ClientValidation, SameHostDifferentPortsAreDistinct) {
  ClientOptions options;
  options.masters = {"redis://127.0.0.1:7000", "redis://127.0.0.1:7001", "redis://localhost:7000"};
  EXPECT_NO_THROW({ Client client(options); });
}

TEST(ClientValidation, BadUri) {
  ClientOptions options = valid_options();
  options.masters.push_back("redis://127.0.0.1:99999");
  EXPECT_THAT(config_error(options), HasSubstr("99999"));
  options.masters.back() = "127.0.0.1:6379";
  EXPECT_THAT(config_error(options), HasSubstr("127.0.0.1:6379"));
}

// ---------------------------------------------------------------------------------------
// Durations and numbers

TEST(ClientValidation, TtlZero) {
  ClientOptions options = valid_options();
  options.ttl = 0ms;
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("ttl"));
  EXPECT_THAT(message, HasSubstr("0 ms"));
  options.ttl = -5ms;
  EXPECT_THAT(config_error(options), HasSubstr("-5 ms"));
}

TEST(ClientValidation, TtlNotLargerThanDrift) {
  ClientOptions options = valid_options();
  options.ttl = 2ms;  // drift with defaults: 2 ms * 0.01 + 2 ms = 2.020 ms
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("ttl 2 ms"));
  EXPECT_THAT(message, HasSubstr("drift"));

  options.ttl = 3ms;  // 3 ms > 2.030 ms: accepted
  EXPECT_NO_THROW({ Client client(options); });
}

TEST(ClientValidation, TtlNotLargerThanDriftPlusMinValidity) {
  ClientOptions options = valid_options();
  options.ttl = 100ms;  // drift 3 ms: usable 97 ms
  options.min_validity = 97ms;
  EXPECT_THAT(config_error(options), HasSubstr("ttl 100 ms"));
  options.min_validity = 96ms;
  EXPECT_NO_THROW({ Client client(options); });
}

TEST(ClientValidation, NegativeDurations) {
  struct Case {
    const char* field;
    std::chrono::milliseconds ClientOptions::*member;
  };
  for (const Case c : {Case{"drift_constant", &ClientOptions::drift_constant},
                       Case{"retry_delay", &ClientOptions::retry_delay},
                       Case{"retry_jitter", &ClientOptions::retry_jitter},
                       Case{"min_validity", &ClientOptions::min_validity},
                       Case{"stall_timeout", &ClientOptions::stall_timeout}}) {
    SCOPED_TRACE(c.field);
    ClientOptions options = valid_options();
    options.*c.member = -7ms;
    const std::string message = config_error(options);
    EXPECT_THAT(message, HasSubstr(c.field));
    EXPECT_THAT(message, HasSubstr("-7 ms"));
  }
}

// Every duration is added to a clock reading somewhere: one too long to add is refused by
// name, never left to overflow into a deadline in the past.
TEST(ClientValidation, DurationsLongerThanTheMaximum) {
  struct Case {
    const char* field;
    std::chrono::milliseconds ClientOptions::*member;
  };
  for (const Case c : {Case{"ttl", &ClientOptions::ttl}, Case{"drift_constant", &ClientOptions::drift_constant},
                       Case{"retry_delay", &ClientOptions::retry_delay},
                       Case{"retry_jitter", &ClientOptions::retry_jitter},
                       Case{"min_validity", &ClientOptions::min_validity},
                       Case{"command_timeout", &ClientOptions::command_timeout},
                       Case{"connect_timeout", &ClientOptions::connect_timeout},
                       Case{"reconnect_max", &ClientOptions::reconnect_max},
                       Case{"stall_timeout", &ClientOptions::stall_timeout},
                       Case{"max_lock_ttl", &ClientOptions::max_lock_ttl}}) {
    for (const auto value : {redlock::kMaxDuration + 1ms, std::chrono::milliseconds::max()}) {
      SCOPED_TRACE(std::string(c.field) + " = " + std::to_string(value.count()));
      ClientOptions options = valid_options();
      options.*c.member = value;
      const std::string message = config_error(options);
      EXPECT_THAT(message, HasSubstr(c.field));
      EXPECT_THAT(message, HasSubstr(std::to_string(value.count()) + " ms"));
    }
  }
}

TEST(ClientValidation, NonPositiveTimeouts) {
  struct Case {
    const char* field;
    std::chrono::milliseconds ClientOptions::*member;
  };
  for (const Case c : {Case{"command_timeout", &ClientOptions::command_timeout},
                       Case{"connect_timeout", &ClientOptions::connect_timeout},
                       Case{"reconnect_min", &ClientOptions::reconnect_min}}) {
    SCOPED_TRACE(c.field);
    for (const auto value : {0ms, -3ms}) {
      ClientOptions options = valid_options();
      options.*c.member = value;
      const std::string message = config_error(options);
      EXPECT_THAT(message, HasSubstr(c.field));
      EXPECT_THAT(message, HasSubstr(std::to_string(value.count()) + " ms"));
    }
  }
}

TEST(ClientValidation, ReconnectMaxBelowMin) {
  ClientOptions options = valid_options();
  options.reconnect_min = 100ms;
  options.reconnect_max = 99ms;
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("reconnect_max"));
  EXPECT_THAT(message, HasSubstr("99 ms"));
  EXPECT_THAT(message, HasSubstr("100 ms"));
}

TEST(ClientValidation, DriftFactorOutOfRange) {
  ClientOptions options = valid_options();
  options.drift_factor = -0.1;
  std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("drift_factor"));
  EXPECT_THAT(message, HasSubstr("-0.1"));

  options.drift_factor = 1.0;
  message = config_error(options);
  EXPECT_THAT(message, HasSubstr("drift_factor"));
  EXPECT_THAT(message, HasSubstr("1.0"));

  options.drift_factor = std::numeric_limits<double>::quiet_NaN();
  message = config_error(options);
  EXPECT_THAT(message, HasSubstr("drift_factor"));
  EXPECT_THAT(message, HasSubstr("nan"));

  options.drift_factor = std::numeric_limits<double>::infinity();
  EXPECT_THAT(config_error(options), HasSubstr("drift_factor"));

  options.drift_factor = 0.999;  // just below 1 is valid (with a long enough ttl)
  options.ttl = 10'000ms;
  EXPECT_NO_THROW({ Client client(options); });
}

TEST(ClientValidation, NegativeRetryCount) {
  ClientOptions options = valid_options();
  options.retry_count = -1;
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("retry_count"));
  EXPECT_THAT(message, HasSubstr("-1"));
}

TEST(ClientValidation, KeyPrefixTooLong) {
  ClientOptions options = valid_options();
  options.key_prefix = std::string(redlock::kMaxKeyPrefixSize + 1, 'p');
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("key_prefix"));
  EXPECT_THAT(message, HasSubstr(std::to_string(redlock::kMaxKeyPrefixSize + 1)));
}

// Review 55: a 10 MB fence_key was accepted; every fenced acquire then failed with "backlog of
// 0 bytes the master has not read (over 1048576)", naming neither fence_key nor its size.
TEST(ClientValidation, FenceKeyTooLong) {
  ClientOptions options = valid_options();
  options.fence_key = std::string(redlock::kMaxKeyPrefixSize + 1, 'f');
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("fence_key"));
  EXPECT_THAT(message, HasSubstr(std::to_string(redlock::kMaxKeyPrefixSize + 1)));
  options.fence_key = std::string(redlock::kMaxKeyPrefixSize, 'f');
  EXPECT_NO_THROW(Client client(options));
}

TEST(ClientValidation, SourceAddressNotAnIp) {
  ClientOptions options = valid_options();
  options.source_address = "not-an-ip";
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("source_address"));
  EXPECT_THAT(message, HasSubstr("not-an-ip"));
  options.source_address = "127.0.0.1:80";
  EXPECT_THAT(config_error(options), HasSubstr("127.0.0.1:80"));
}

// ---------------------------------------------------------------------------------------
// Passwords never appear in messages

TEST(ClientValidation, PasswordNeverInMessage) {
  const std::string pw = "Hunter2Secret";
  const std::string with_pw = "redis://user:" + pw + "@127.0.0.1:7000";

  ClientOptions duplicate;
  duplicate.masters = {with_pw, "redis://127.0.0.1:7001", with_pw};
  std::string message = config_error(duplicate);
  EXPECT_THAT(message, HasSubstr("127.0.0.1:7000"));
  EXPECT_THAT(message, Not(HasSubstr(pw)));

  ClientOptions bad_uri;
  bad_uri.masters = {"redis://user:" + pw + "@127.0.0.1:0"};
  message = config_error(bad_uri);
  EXPECT_THAT(message, HasSubstr("port 0"));
  EXPECT_THAT(message, HasSubstr("***"));
  EXPECT_THAT(message, Not(HasSubstr(pw)));

  ClientOptions other_field;
  other_field.masters = {with_pw};
  other_field.ttl = 0ms;
  message = config_error(other_field);
  EXPECT_THAT(message, HasSubstr("ttl"));
  EXPECT_THAT(message, Not(HasSubstr(pw)));
}

TEST(ClientValidation, PasswordOnlyUriNeverInMessage) {
  const std::string pw = "Hunter2Secret";
  ClientOptions options;
  options.masters = {"redis://" + pw + "@127.0.0.1:0"};
  const std::string message = config_error(options);
  EXPECT_THAT(message, HasSubstr("port 0"));
  EXPECT_THAT(message, HasSubstr("***"));
  EXPECT_THAT(message, Not(HasSubstr(pw)));
}

// ---------------------------------------------------------------------------------------
// Per-call arguments through the public API, against one real redis-server.

class CallValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    ClientOptions options;
    options.masters = {server_.uri()};
    options.retry_count = 0;
    options.command_timeout = 1000ms;  // generous: sanitizer builds on a loaded machine
    options.restart_guard = false;     // a fresh server that never held a lock
    client_ = std::make_unique<Client>(options);
    ASSERT_TRUE(client_->wait_connected(1, 10'000ms));
  }

  long long dbsize() const { return server_.command({"DBSIZE"}).integer; }

  RedisServer server_;
  std::unique_ptr<Client> client_;
};

TEST_F(CallValidation, EmptyResource) {
  const Result result = client_->acquire("");
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(result.lock.has_value());
  EXPECT_THAT(result.message, HasSubstr("empty"));
  EXPECT_EQ(dbsize(), 0);
}

TEST_F(CallValidation, ResourceTooLong) {
  const std::string resource(redlock::kMaxResourceSize + 1, 'r');
  const Result result = client_->acquire(resource);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_FALSE(result.lock.has_value());
  EXPECT_THAT(result.message, HasSubstr(std::to_string(redlock::kMaxResourceSize + 1)));
  EXPECT_THAT(result.message, HasSubstr("rrrr"));
  EXPECT_EQ(dbsize(), 0);
}

TEST_F(CallValidation, ResourceAtMaximumIsAccepted) {
  // The positive control for the two tests above: the same client and server do write a key.
  const std::string resource(redlock::kMaxResourceSize, 'r');
  const Result result = client_->acquire(resource);
  ASSERT_EQ(result.outcome, Outcome::acquired) << redlock::format_result(result);
  EXPECT_EQ(dbsize(), 1);
  EXPECT_EQ(server_.command({"GET", "redlock:" + resource}).str, result.lock->token);
  EXPECT_EQ(client_->release(*result.lock).outcome, Outcome::released);
  EXPECT_EQ(dbsize(), 0);
}

TEST_F(CallValidation, AcquireTtlZeroOrTooShort) {
  AcquireOptions zero;
  zero.ttl = 0ms;
  Result result = client_->acquire("res", zero);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_THAT(result.message, HasSubstr("ttl"));
  EXPECT_THAT(result.message, HasSubstr("0 ms"));

  AcquireOptions negative;
  negative.ttl = -10ms;
  result = client_->acquire("res", negative);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_THAT(result.message, HasSubstr("-10 ms"));

  AcquireOptions too_short;
  too_short.ttl = 2ms;  // not above the drift allowance of 2.020 ms
  result = client_->acquire("res", too_short);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_THAT(result.message, HasSubstr("ttl 2 ms"));

  EXPECT_EQ(dbsize(), 0);
}

TEST_F(CallValidation, AcquireTtlLongerThanTheMaximum) {
  AcquireOptions huge;
  huge.ttl = std::chrono::milliseconds::max();
  const Result result = client_->acquire("res", huge);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_THAT(result.message, HasSubstr(std::to_string(std::chrono::milliseconds::max().count()) + " ms"));
  EXPECT_EQ(dbsize(), 0);
}

// AcquireOptions::wait = max is "retry until acquired", not a deadline that wrapped into the
// past: the acquire outlasts the other holder's 300 ms lease.
TEST_F(CallValidation, AcquireWaitMaxKeepsRetrying) {
  server_.command({"SET", "redlock:res", "someone-else", "PX", "300"});
  AcquireOptions forever;
  forever.wait = std::chrono::milliseconds::max();
  forever.retry_count = -1;
  const Result result = client_->acquire("res", forever);
  EXPECT_EQ(result.outcome, Outcome::acquired) << redlock::format_result(result);
  EXPECT_GT(result.attempts, 1);
  if (result) client_->release(*result.lock);
}

// A per-call retry_count below -1 is not "forever" and a negative wait is not "once": both are
// refused naming the value, before anything is sent (the key held elsewhere would make a
// silently accepted -2 retry forever).
TEST_F(CallValidation, AcquireRetryCountBelowMinusOneOrNegativeWaitIsRefused) {
  server_.command({"SET", "redlock:res", "someone-else", "PX", "600000"});
  AcquireOptions retries;
  retries.retry_count = -2;
  std::promise<Result> answer;
  auto pending = answer.get_future();
  const auto id = client_->acquire_async("res", [&](Result r) { answer.set_value(std::move(r)); }, retries);
  if (pending.wait_for(5s) != std::future_status::ready) {
    client_->cancel(id);
    pending.wait();
    FAIL() << "retry_count -2 was taken for \"retry forever\"";
  }
  Result result = pending.get();
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_THAT(result.message, HasSubstr("retry_count -2"));
  EXPECT_EQ(result.attempts, 0);

  AcquireOptions wait;
  wait.wait = -5ms;
  result = client_->acquire("res", wait);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_THAT(result.message, HasSubstr("wait -5 ms"));
  EXPECT_EQ(result.attempts, 0);
  EXPECT_EQ(server_.command({"GET", "redlock:res"}).str, "someone-else");
}

TEST_F(CallValidation, ReleaseDefaultLock) {
  const Result result = client_->release(Lock{});
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_FALSE(result.message.empty());
}

TEST_F(CallValidation, ExtendDefaultLock) {
  const Result result = client_->extend(Lock{});
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_FALSE(result.message.empty());
  EXPECT_EQ(dbsize(), 0);  // an extend never creates a key
}

TEST_F(CallValidation, LockWithoutToken) {
  Lock lock;
  lock.resource = "res";
  lock.key = "redlock:res";
  lock.ttl = 10'000ms;
  lock.deadline = client_->now() + 10s;
  EXPECT_EQ(client_->release(lock).outcome, Outcome::invalid_argument);
  EXPECT_EQ(client_->extend(lock).outcome, Outcome::invalid_argument);
}

// A Lock's fields are public: one built by hand with a key no Client makes, or a token that
// is not an owner token, is refused naming it. (A 4 MiB key was encoded into the Client's
// command buffer, kept at that size for the Client's life, and refused as "a backlog of 0
// bytes the master has not read"; a foreign token was sent and answered "released".)
TEST_F(CallValidation, HandBuiltLockWithAKeyOrTokenNoClientMakes) {
  const Result acquired = client_->acquire("res");
  ASSERT_EQ(acquired.outcome, Outcome::acquired) << redlock::format_result(acquired);
  Lock huge = *acquired.lock;
  huge.key = std::string(4 << 20, 'k');
  for (const Result& result : {client_->release(huge), client_->extend(huge)}) {
    EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
    EXPECT_THAT(result.message, HasSubstr(std::to_string(4 << 20) + " bytes"));
  }
  Lock foreign = *acquired.lock;
  foreign.token = "not-a-token";
  for (const Result& result : {client_->release(foreign), client_->extend(foreign)}) {
    EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
    EXPECT_THAT(result.message, HasSubstr("'not-a-token'"));
  }
  EXPECT_EQ(client_->release(*acquired.lock).outcome, Outcome::released);
  EXPECT_EQ(dbsize(), 0);
}

TEST_F(CallValidation, ExtendWithTtlZeroLeavesLockAlone) {
  const Result acquired = client_->acquire("res");
  ASSERT_EQ(acquired.outcome, Outcome::acquired) << redlock::format_result(acquired);
  const Result result = client_->extend(*acquired.lock, 0ms);
  EXPECT_EQ(result.outcome, Outcome::invalid_argument) << redlock::format_result(result);
  EXPECT_THAT(result.message, HasSubstr("0 ms"));
  // The key is still there with our token and a positive expiry.
  EXPECT_EQ(server_.command({"GET", "redlock:res"}).str, acquired.lock->token);
  EXPECT_GT(server_.command({"PTTL", "redlock:res"}).integer, 0);
  EXPECT_EQ(client_->release(*acquired.lock).outcome, Outcome::released);
}

TEST_F(CallValidation, MutexWithBadResource) {
  EXPECT_THROW(redlock::Mutex(*client_, ""), ConfigError);
  try {
    redlock::Mutex mutex(*client_, std::string(redlock::kMaxResourceSize + 1, 'm'));
    ADD_FAILURE() << "Mutex with an oversized resource did not throw";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr(std::to_string(redlock::kMaxResourceSize + 1)));
  }
  // A valid name constructs without touching Redis.
  {
    redlock::Mutex mutex(*client_, "ok");
    EXPECT_FALSE(mutex.owns_lock());
    EXPECT_EQ(mutex.resource(), "ok");
  }
  EXPECT_EQ(dbsize(), 0);
}

TEST(MutexValidation, EmptyResourceWithoutServer) {
  Client client(valid_options());
  try {
    redlock::Mutex mutex(client, "");
    ADD_FAILURE() << "Mutex with an empty resource did not throw";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("empty"));
  }
}

}  // namespace

namespace redlock {
namespace {

ClientOptions one_master() {
  ClientOptions options;
  options.masters = {"redis://127.0.0.1:7000"};
  return options;
}

std::string construction_error(const ClientOptions& options) {
  try {
    Client client(options);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "no error";
}

TEST(GuardAndFenceValidation, FenceKeyInsideTheResourceNamespaceIsRejected) {
  auto options = one_master();
  options.fence_key = "redlock:fence";
  const std::string message = construction_error(options);
  EXPECT_NE(message.find("redlock:fence"), std::string::npos) << message;
  EXPECT_NE(message.find("key_prefix"), std::string::npos) << message;
  options.fence_key = "";
  EXPECT_NE(construction_error(options).find("fence_key is empty"), std::string::npos);
}

TEST(GuardAndFenceValidation, MaxLockTtlBelowTtlIsRejected) {
  auto options = one_master();
  options.ttl = std::chrono::milliseconds(5000);
  options.max_lock_ttl = std::chrono::milliseconds(4000);
  const std::string message = construction_error(options);
  EXPECT_NE(message.find("max_lock_ttl (4000 ms)"), std::string::npos) << message;
  options.max_lock_ttl = std::chrono::milliseconds(-1);
  EXPECT_NE(construction_error(options).find("max_lock_ttl must not be negative"), std::string::npos);
  options.restart_guard = false;
  options.max_lock_ttl = std::chrono::milliseconds(4000);  // unused without the guard
  EXPECT_EQ(construction_error(options), "no error");
}

}  // namespace
}  // namespace redlock

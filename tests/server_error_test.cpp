// SPDX-License-Identifier: Apache-2.0
// Server-side errors are per-master outcomes, never crashes, and the healthy masters still
// decide: WRONGTYPE, READONLY (a replica posing as a master), OOM, NOSCRIPT, NOAUTH, and
// AUTH / ACL users / SELECT from the URI.
#include <gtest/gtest.h>

#include <mutex>

#include "test_util.h"

namespace redlock::testing {
namespace {

TEST(ServerErrorTest, WrongTypeShowsOnThatMasterAndTheQuorumStillDecides) {
  RedisServerGroup masters(5);
  masters[2].command({"HSET", "redlock:typed", "field", "value"});
  Client client(options_for(masters));
  ASSERT_TRUE(client.wait_connected(5, 5s));
  const Result held = client.acquire("typed");
  ASSERT_TRUE(held) << format_result(held);
  // SET NX on an existing key of any type answers nil: "held by another".
  EXPECT_NE(held.masters[2].status, MasterStatus::ok);

  const Result released = client.release(*held.lock);
  ASSERT_TRUE(released) << format_result(released);
  // The release script's GET meets the hash: WRONGTYPE, reported on that master only.
  EXPECT_TRUE(eventually([&] { return masters[2].command({"TYPE", "redlock:typed"}).str == "hash"; }));
  // A released Lock is refused here without a round, adopted copies included (its release may
  // still run late); another Client's adopted copy is sent: the key is gone elsewhere, so lost.
  EXPECT_EQ(client.extend(client.adopt("typed", held.lock->token)).outcome, Outcome::invalid_argument);
  Client other(options_for(masters));
  ASSERT_TRUE(other.wait_connected(5, 5s));
  const Result extended = other.extend(other.adopt("typed", held.lock->token));
  EXPECT_EQ(extended.outcome, Outcome::lost) << format_result(extended);
  ASSERT_EQ(extended.masters.size(), masters.size());
  if (extended.masters[2].status != MasterStatus::pending) {
    EXPECT_EQ(extended.masters[2].status, MasterStatus::server_error);
    EXPECT_NE(extended.masters[2].error.find("WRONGTYPE"), std::string::npos) << extended.masters[2].error;
  }
}

TEST(ServerErrorTest, WrongTypeOnAMajorityFailsTheReleaseWithTheServerText) {
  RedisServerGroup masters(3);
  Client client(options_for(masters));
  const Result held = client.acquire("typed");
  ASSERT_TRUE(held);
  ASSERT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == 3u; }));
  for (const std::size_t i : {0u, 1u}) {
    masters[i].command({"DEL", held.lock->key});
    masters[i].command({"HSET", held.lock->key, "f", "v"});
  }
  const Result released = client.release(*held.lock);
  EXPECT_EQ(released.outcome, Outcome::quorum_unreachable) << format_result(released);
  for (const std::size_t i : {0u, 1u}) {
    EXPECT_EQ(released.masters[i].status, MasterStatus::server_error);
    EXPECT_NE(released.masters[i].error.find("WRONGTYPE"), std::string::npos);
  }
}

TEST(ServerErrorTest, AReplicaAnswersReadonlyAndIsOutvoted) {
  RedisServerGroup masters(5);
  RedisServer primary;  // not one of the masters: only the replica's upstream
  masters[4].command({"REPLICAOF", "127.0.0.1", std::to_string(primary.port())});
  ASSERT_TRUE(eventually(
      [&] { return masters[4].command({"INFO", "replication"}).str.find("role:slave") != std::string::npos; }));
  Client client(options_for(masters));
  ASSERT_TRUE(client.wait_connected(5, 5s));
  const Result held = client.acquire("outvoted");
  ASSERT_TRUE(held) << format_result(held);
  EXPECT_NE(held.masters[4].status, MasterStatus::ok);
  ASSERT_TRUE(client.release(*held.lock));

  // With two healthy masters gone the quorum of 3 needs the replica, which cannot grant.
  masters[0].kill();
  masters[1].kill();
  const Result without = client.acquire("needs-replica");
  EXPECT_EQ(without.outcome, Outcome::quorum_unreachable) << format_result(without);
  EXPECT_EQ(without.masters[4].status, MasterStatus::server_error) << format_result(without);
  EXPECT_NE(without.masters[4].error.find("READONLY"), std::string::npos) << without.masters[4].error;
}

TEST(ServerErrorTest, OutOfMemoryIsAServerErrorOnThatMaster) {
  RedisServerGroup masters(3);
  masters[0].command({"CONFIG", "SET", "maxmemory-policy", "noeviction"});
  masters[0].command({"CONFIG", "SET", "maxmemory", "1"});
  masters[1].kill();
  Client client(options_for(masters));
  const Result result = client.acquire("oom");
  EXPECT_EQ(result.outcome, Outcome::quorum_unreachable) << format_result(result);
  EXPECT_EQ(result.masters[0].status, MasterStatus::server_error);
  EXPECT_NE(result.masters[0].error.find("OOM"), std::string::npos) << result.masters[0].error;
}

TEST(ServerErrorTest, FlushedScriptCacheFallsBackToEval) {
  RedisServerGroup masters(3);
  Client client(options_for(masters));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const Result held = client.acquire("scripted");
  ASSERT_TRUE(held);
  for (std::size_t i = 0; i < masters.size(); ++i) masters[i].command({"SCRIPT", "FLUSH"});
  const Result extended = client.extend(*held.lock, 30000ms);
  ASSERT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  for (std::size_t i = 0; i < masters.size(); ++i) masters[i].command({"SCRIPT", "FLUSH"});
  const Result released = client.release(*held.lock);
  ASSERT_EQ(released.outcome, Outcome::released) << format_result(released);
  EXPECT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == 0; }));
}

TEST(ServerErrorTest, PasswordAndAclUserAndDatabaseComeFromTheUri) {
  support::RedisServerOptions protected_server;
  protected_server.password = "s3cret";
  RedisServerGroup masters(3, protected_server);
  masters[0].command({"ACL", "SETUSER", "locker", "on", ">lockpass", "~*", "+@all"});
  std::vector<std::string> uris = {with_auth(masters[0].uri(), "locker:lockpass") + "/3",
                                   with_auth(masters[1].uri(), ":s3cret") + "/3",
                                   with_auth(masters[2].uri(), "s3cret") + "/3"};
  Client client(options_for(uris));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const Result held = client.acquire("db3");
  ASSERT_TRUE(held) << format_result(held);
  EXPECT_EQ(held.masters[0].endpoint.find("lockpass"), std::string::npos);
  ASSERT_TRUE(eventually([&] {
    std::size_t in_db3 = 0;
    for (std::size_t i = 0; i < 3; ++i) {
      if (masters[i].command({"INFO", "keyspace"}).str.find("db3:keys=1") != std::string::npos) ++in_db3;
    }
    return in_db3 == 3;
  }));
  EXPECT_EQ(masters[0].command({"EXISTS", "redlock:db3"}).integer, 0);  // not in db 0
  EXPECT_TRUE(client.release(*held.lock));
}

TEST(ServerErrorTest, WrongPasswordIsAConnectionFailureThatNamesNoPassword) {
  support::RedisServerOptions protected_server;
  protected_server.password = "right";
  RedisServer master(protected_server);
  Client client(options_for({with_auth(master.uri(), ":wrong-pass")}));
  EXPECT_FALSE(client.wait_connected(1, 300ms));
  const Result result = client.acquire("x");
  EXPECT_EQ(result.outcome, Outcome::quorum_unreachable) << format_result(result);
  ASSERT_EQ(result.masters.size(), 1u);
  EXPECT_EQ(result.masters[0].status, MasterStatus::not_connected);
  EXPECT_NE(result.masters[0].error.find("WRONGPASS"), std::string::npos) << result.masters[0].error;
  EXPECT_EQ(format_result(result).find("wrong-pass"), std::string::npos);
}

// With AUTH renamed away, Redis answers the handshake's AUTH with "ERR unknown command
// 'AUTH', with args beginning with: '<password>'" (the argument cut at 128 bytes). No row,
// formatted result or warning may show the password, or any 4+ character start of it.
TEST(ServerErrorTest, AServerThatEchoesThePasswordNeverGetsItPrinted) {
  support::RedisServerOptions no_auth;
  no_auth.extra_args = {"--rename-command", "AUTH", "\"\""};
  RedisServer master(no_auth);
  for (const std::string& password : {std::string("hunter2-s3cret"), std::string(300, 'k') + "tail"}) {
    SCOPED_TRACE(password.substr(0, 20));
    std::vector<std::string> warnings;
    std::mutex warnings_mutex;
    auto options = options_for({with_auth(master.uri(), ":" + password)});
    options.on_warning = [&](const std::string& text) {
      const std::lock_guard lock(warnings_mutex);
      warnings.push_back(text);
    };
    Client client(options);
    EXPECT_FALSE(client.wait_connected(1, 300ms));
    const Result result = client.acquire("x");
    ASSERT_EQ(result.masters.size(), 1u);
    EXPECT_EQ(result.masters[0].status, MasterStatus::not_connected) << format_result(result);
    EXPECT_NE(result.masters[0].error.find("unknown command"), std::string::npos) << result.masters[0].error;
    std::string everything = format_result(result) + result.message;
    const std::lock_guard lock(warnings_mutex);
    for (const auto& warning : warnings) everything += warning;
    EXPECT_EQ(everything.find(password.substr(0, 4)), std::string::npos) << everything;
  }
}

TEST(ServerErrorTest, NoPasswordGivenIsNoauthOnThatMaster) {
  support::RedisServerOptions protected_server;
  protected_server.password = "needed";
  RedisServer master(protected_server);
  Client client(options_for({master.uri()}));
  const Result result = client.acquire("x");
  EXPECT_EQ(result.outcome, Outcome::quorum_unreachable);
  ASSERT_EQ(result.masters.size(), 1u);
  EXPECT_EQ(result.masters[0].status, MasterStatus::server_error) << format_result(result);
  EXPECT_NE(result.masters[0].error.find("NOAUTH"), std::string::npos) << result.masters[0].error;
}

}  // namespace
}  // namespace redlock::testing

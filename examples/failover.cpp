// SPDX-License-Identifier: Apache-2.0
// Seed 002: a lock on one Redis master with an asynchronous replica. Client A locks on the
// master, the master dies before the write reached the replica, the replica is promoted, and
// client B is granted the same lock on it: two owners. The quorum lock over five independent
// masters goes through the same failover of one master and keeps its single owner.
//
// "Before the write reached the replica" is made deterministic, not left to timing: the
// replica is paused for writes (CLIENT PAUSE WRITE) before A locks. Commands that arrive
// from its master are held too, so A's SET reaches the replica's socket but is never
// applied; when the master is killed the replica drops its link and, with it, the unapplied
// SET. Then the pause is lifted and REPLICAOF NO ONE promotes it, as a failover would, with
// exactly the data an asynchronous replica has when its master dies a moment after a write.
#include "failover.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "redlock/redlock.h"
#include "support/redis_server.h"

namespace redlock_demo {
namespace {

using namespace std::chrono_literals;
using redlock::support::RedisServer;
using redlock::support::RedisServerGroup;
using redlock::support::RedisServerOptions;
using redlock::support::Reply;

constexpr const char* kResource = "payments:batch-42";

// A master sends the full sync to a new replica at once instead of waiting 5 s for more.
RedisServerOptions master_options() {
  RedisServerOptions options;
  options.extra_args = {"--repl-diskless-sync-delay", "0"};
  return options;
}

std::string info_field(const RedisServer& server, const std::string& field) {
  const Reply info = server.command({"INFO", "replication"});
  const std::string prefix = field + ":";
  std::size_t at = info.str.find(prefix);
  if (at == std::string::npos) return "";
  at += prefix.size();
  return info.str.substr(at, info.str.find('\r', at) - at);
}

void wait_for_link(const RedisServer& replica, const char* state) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (info_field(replica, "master_link_status") != state) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("replica " + replica.uri() + ": link to its master never went " + state);
    }
    std::this_thread::sleep_for(20ms);
  }
}

void start_replication(const RedisServer& replica, const RedisServer& master) {
  replica.command({"REPLICAOF", master.host(), std::to_string(master.port())});
  wait_for_link(replica, "up");
  // Everything the master had is on the replica before the scene starts.
  master.command({"WAIT", "1", "5000"});
}

// From now on the replica receives its master's stream but applies none of it.
void hold_replication(const RedisServer& replica) { replica.command({"CLIENT", "PAUSE", "60000", "WRITE"}); }

// The master dies; once the replica has noticed (and dropped what it had not applied), it is
// promoted, as Sentinel or an operator would.
void fail_over(RedisServer& master, const RedisServer& replica) {
  master.kill();
  wait_for_link(replica, "down");
  replica.command({"CLIENT", "UNPAUSE"});
  replica.command({"REPLICAOF", "NO", "ONE"});
}

std::string value_of(const RedisServer& server, const std::string& key) {
  const Reply value = server.command({"GET", key});
  return value.type == Reply::Type::nil ? "(none)" : value.str;
}

redlock::ClientOptions client_options(std::vector<std::string> masters) {
  redlock::ClientOptions options;
  options.masters = std::move(masters);
  options.ttl = 10s;
  options.retry_count = 0;
  // Generous, so that a loaded machine (or a sanitizer build) cannot turn a grant into a
  // timeout and change the story.
  options.command_timeout = 1s;
  // These servers are seconds old: the restart guard would refuse to count any of them. Off,
  // so that what is shown is the lock itself (the guard has its own scene in the demo).
  options.restart_guard = false;
  return options;
}

void show(const char* title, const redlock::Result& result) {
  std::printf("\n-- %s\n%s", title, redlock::format_result(result).c_str());
}

bool single_master_scene() {
  std::printf("\n== seed 002, scene 1: ONE master with an asynchronous replica\n");
  RedisServer master(master_options());
  RedisServer replica;
  start_replication(replica, master);
  std::printf("master %s, replica %s (in sync)\n", master.uri().c_str(), replica.uri().c_str());
  hold_replication(replica);
  std::printf("the replica now receives its master's writes but applies none (CLIENT PAUSE WRITE)\n");

  redlock::Client alice(client_options({master.uri()}));
  alice.wait_connected(1, 2s);
  const auto held = alice.acquire(kResource);
  show("alice acquires on the master", held);
  if (!held) return false;
  const std::string key = held.lock->key;
  std::printf("   master  %s: %s = %s\n", master.uri().c_str(), key.c_str(), value_of(master, key).c_str());
  std::printf("   replica %s: %s = %s (stream read up to offset %s, applied up to %s)\n", replica.uri().c_str(),
              key.c_str(), value_of(replica, key).c_str(), info_field(replica, "slave_read_repl_offset").c_str(),
              info_field(replica, "slave_repl_offset").c_str());

  std::printf("\nthe master dies (SIGKILL) before the replica applied the SET; the replica is promoted "
              "(REPLICAOF NO ONE)\n");
  fail_over(master, replica);
  std::printf("   promoted replica %s: %s = %s\n", replica.uri().c_str(), key.c_str(), value_of(replica, key).c_str());

  // bob's address for the resource is now the promoted replica, as Sentinel would hand out.
  redlock::Client bob(client_options({replica.uri()}));
  bob.wait_connected(1, 2s);
  const auto bobs = bob.acquire(kResource);
  show("bob acquires the same resource on the promoted replica", bobs);
  const auto alice_left = std::chrono::duration_cast<std::chrono::milliseconds>(alice.remaining(*held.lock));
  const bool two_owners = bobs.ok() && alice_left > 0ms;
  if (two_owners) {
    std::printf("\n   TWO OWNERS: alice still holds %s (%lld ms of validity left) and bob holds it too\n", kResource,
                static_cast<long long>(alice_left.count()));
  } else {
    std::printf("\n   one owner: bob was refused (%s)\n", std::string(redlock::to_string(bobs.outcome)).c_str());
  }
  if (bobs) bob.release(*bobs.lock);
  return two_owners;
}

bool quorum_scene() {
  std::printf("\n== seed 002, scene 2: the quorum lock over 5 independent masters, same failover of one\n");
  RedisServerGroup masters(5, master_options());
  RedisServer replica;
  start_replication(replica, masters[0]);
  std::printf("masters:");
  for (const auto& uri : masters.uris()) std::printf(" %s", uri.c_str());
  std::printf("\nmaster %s has an asynchronous replica %s (in sync), now applying nothing\n",
              masters[0].uri().c_str(), replica.uri().c_str());
  hold_replication(replica);

  redlock::Client alice(client_options(masters.uris()));
  alice.wait_connected(5, 2s);
  const auto held = alice.acquire(kResource);
  show("alice acquires on the 5 masters", held);
  if (!held) return false;

  std::printf("\n%s dies before its replica applied the SET; the replica is promoted in its place\n",
              masters[0].uri().c_str());
  fail_over(masters[0], replica);
  std::printf("   promoted replica %s: %s = %s\n", replica.uri().c_str(), held.lock->key.c_str(),
              value_of(replica, held.lock->key).c_str());

  std::vector<std::string> after_failover = masters.uris();
  after_failover[0] = replica.uri();
  redlock::Client bob(client_options(after_failover));
  bob.wait_connected(5, 2s);
  const auto bobs = bob.acquire(kResource);
  show("bob tries the same resource (the promoted replica in place of the dead master)", bobs);
  const auto alice_left = std::chrono::duration_cast<std::chrono::milliseconds>(alice.remaining(*held.lock));
  const bool one_owner = bobs.outcome == redlock::Outcome::taken && alice_left > 0ms;
  if (one_owner) {
    std::printf("\n   ONE OWNER: bob is refused (%zu of %zu masters granted, %zu needed); alice keeps %s (%lld ms left)\n",
                bobs.count(redlock::MasterStatus::ok), bob.size(), bob.quorum(), kResource,
                static_cast<long long>(alice_left.count()));
  } else {
    std::printf("\n   NOT one owner: bob's outcome is %s\n", std::string(redlock::to_string(bobs.outcome)).c_str());
  }
  show("alice releases (the dead master cannot answer; four do)", alice.release(*held.lock));
  return one_owner;
}

}  // namespace

FailoverOutcome show_failover() {
  FailoverOutcome outcome;
  outcome.single_master_two_owners = single_master_scene();
  outcome.quorum_one_owner = quorum_scene();
  std::printf("\n== seed 002 side by side: a master fails over to a replica that missed the lock's write\n");
  std::printf("   single master + async replica: %s\n",
              outcome.single_master_two_owners ? "TWO OWNERS (alice and bob)" : "(not shown: see above)");
  std::printf("   quorum of 5 masters:           %s\n",
              outcome.quorum_one_owner ? "one owner (alice); bob refused" : "(not shown: see above)");
  return outcome;
}

}  // namespace redlock_demo

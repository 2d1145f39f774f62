// SPDX-License-Identifier: Apache-2.0
// The README's first command: five local masters, two clients, one resource.
// Starts its own redis-servers on free loopback ports, shows a grant, a refusal, a release,
// a grant with two masters frozen, the restart guard, then seed 002's failover under a single
// master and under the quorum (failover.cpp), and stops every server it started.
// `redlock_demo --failover` shows the failover part only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "failover.h"
#include "redlock/redlock.h"
#include "support/redis_server.h"

namespace {

void show(const char* title, const redlock::Result& result) {
  std::printf("\n== %s\n%s", title, redlock::format_result(result).c_str());
}

void show_keys(redlock::support::RedisServerGroup& masters, const std::string& key) {
  std::printf("   key %s on each master:\n", key.c_str());
  for (std::size_t i = 0; i < masters.size(); ++i) {
    const auto value = masters[i].command({"GET", key});
    const auto pttl = masters[i].command({"PTTL", key});
    std::printf("     %s  %-34s pttl %lld ms\n", masters[i].uri().c_str(),
                value.type == redlock::support::Reply::Type::nil ? "(none)" : value.str.c_str(), pttl.integer);
  }
}

// Grant, refusal, release, frozen masters, restart guard. True when all were shown.
bool show_quorum_basics() {
  using namespace std::chrono_literals;
  std::printf("starting 5 redis-server masters on loopback...\n");
  redlock::support::RedisServerGroup masters(5);
  const auto masters_started = std::chrono::steady_clock::now();

  redlock::ClientOptions options;
  options.masters = masters.uris();
  options.ttl = 10s;
  options.retry_count = 0;
  // These masters were started a moment ago and never held a lock, so a restart cannot
  // have made them forget one: the restart guard is shown on its own at the end.
  options.restart_guard = false;
  for (const auto& uri : options.masters) std::printf("  %s\n", uri.c_str());

  redlock::Client alice(options);
  redlock::Client bob(options);
  alice.wait_connected(5, 2s);
  bob.wait_connected(5, 2s);
  std::printf("quorum: %zu of %zu, ttl %lld ms, drift allowance %.3f ms\n", alice.quorum(), alice.size(),
              static_cast<long long>(options.ttl.count()), static_cast<double>(alice.drift(options.ttl).count()) / 1000.0);

  auto held = alice.acquire("payments:batch-42");
  show("alice acquires payments:batch-42", held);
  if (!held) return false;
  show_keys(masters, held.lock->key);

  show("bob tries the same resource while alice holds it", bob.acquire("payments:batch-42"));
  show("alice releases", alice.release(*held.lock));
  show_keys(masters, held.lock->key);

  auto bobs = bob.acquire("payments:batch-42");
  show("bob acquires after the release", bobs);
  if (bobs) show("bob releases", bob.release(*bobs.lock));

  std::printf("\nfreezing two masters (SIGSTOP): %s and %s\n", masters[3].uri().c_str(), masters[4].uri().c_str());
  masters[3].freeze();
  masters[4].freeze();
  auto frozen = alice.acquire("payments:batch-43");
  show("alice acquires with 2 of 5 masters frozen", frozen);
  if (frozen) show("alice releases", alice.release(*frozen.lock));
  masters[3].thaw();
  masters[4].thaw();

  // The restart guard: a master restarted without persistence forgot its keys, so its
  // grants do not count until it has been up longer than any lock's ttl.
  redlock::ClientOptions guarded = options;
  guarded.restart_guard = true;
  guarded.ttl = 1s;
  guarded.max_lock_ttl = 4s;  // generous, so the scene below fits in it even on a loaded machine
  redlock::Client carol(guarded);
  carol.wait_connected(5, 2s);
  // Every master must have been up for longer than max_lock_ttl before the guard counts it,
  // and marked for as long: the earlier Clients ran without the guard, so carol's handshake
  // found no keyspace mark on any master (a wipe at an unknown time, for all it knows).
  const auto marked = std::chrono::steady_clock::now();
  std::this_thread::sleep_until(std::max(masters_started, marked) + guarded.max_lock_ttl + 200ms);
  std::printf("\nrestarting %s without persistence (it forgets every key)\n", masters[0].uri().c_str());
  masters[0].restart();
  carol.wait_connected(5, 2s);
  auto guarded_result = carol.acquire("payments:batch-44");
  show("carol acquires with the restart guard on (max_lock_ttl 4 s): four masters still count", guarded_result);
  redlock::ClientOptions only_restarted = guarded;
  only_restarted.masters = {masters[0].uri()};
  redlock::Client dave(only_restarted);
  dave.wait_connected(1, 2s);
  auto refused = dave.acquire("payments:batch-45");
  show("dave, whose only master is the restarted one, is refused", refused);

  std::printf("\nstopping the masters\n");
  const bool guard_shown = guarded_result.ok() && refused.outcome == redlock::Outcome::quorum_unreachable &&
                           refused.masters[0].status == redlock::MasterStatus::not_counted;
  return frozen.ok() && guard_shown;
}

}  // namespace

int main(int argc, char** argv) {
  const bool failover_only = argc > 1 && std::strcmp(argv[1], "--failover") == 0;
  if (argc > 2 || (argc == 2 && !failover_only)) {
    std::fprintf(stderr, "usage: %s [--failover]\n", argv[0]);
    return 2;
  }
  const bool basics_shown = failover_only || show_quorum_basics();
  // Exit 0 only if the demo showed what it says: seed 002's two owners under a single master,
  // and one owner under the quorum (ctest demo_failover checks both).
  const auto failover = redlock_demo::show_failover();
  return basics_shown && failover.single_master_two_owners && failover.quorum_one_owner ? 0 : 1;
}

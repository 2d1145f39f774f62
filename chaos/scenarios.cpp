// SPDX-License-Identifier: Apache-2.0
#include "scenarios.h"

#include <signal.h>

#include <algorithm>
#include <thread>

#include "history.h"
#include "workers.h"

namespace redlock::chaos {
namespace {

using namespace std::chrono_literals;
using support::RedisServer;
using Masters = std::vector<std::unique_ptr<RedisServer>>;

std::string master_name(const RedisServer& s) { return "master 127.0.0.1:" + std::to_string(s.port()); }

// Jumps `master`'s clock forward and checks, with TIME, that the server sees it: the shim is
// only preloaded (a shim that did not load, or a clock call it does not cover, leaves the
// server on the real clock, and a clean run would prove nothing about clock faults).
void jump_clock(ClockControl& clock, const RedisServer& master, std::chrono::milliseconds forward) {
  clock.jump(forward);
  const support::Reply time = master.command({"TIME"});
  const auto here = std::chrono::system_clock::now().time_since_epoch();
  if (time.type != support::Reply::Type::array || time.elements.size() != 2) {
    throw std::runtime_error("TIME on " + master_name(master) + " did not answer two numbers: " + time.str);
  }
  const auto there = std::chrono::seconds(std::stoll(time.elements[0].str)) +
                     std::chrono::microseconds(std::stoll(time.elements[1].str));
  const auto ahead = std::chrono::duration_cast<std::chrono::milliseconds>(there - here);
  // Its offset can only have grown since (a fast rate); 200 ms for the command's own time.
  const auto expected = std::chrono::duration_cast<std::chrono::milliseconds>(clock.offset()) - 200ms;
  if (ahead < expected) {
    throw std::runtime_error("the clock fault did not take effect: " + master_name(master) + "'s TIME is " +
                             std::to_string(ahead.count()) + " ms from this host's, expected at least " +
                             std::to_string(expected.count()) + " ms ahead");
  }
}
std::size_t minority_of(std::size_t n) { return (n - 1) / 2; }
std::size_t quorum_of(std::size_t n) { return n / 2 + 1; }
std::string restart_kind(const Config& config) { return config.aof ? "(AOF, fsync always)" : "(no persistence)"; }

// The validity window of a grant plus the library's guard slack: how long a scenario waits
// for the effects of one episode to be over.
Milliseconds settle(const Config& config) { return config.ttl + 300ms; }

// Freeze (SIGSTOP) a random minority of the masters for 100-400 ms, then a pause.
void minority_freezes(Run& run, Masters& masters) {
  const std::size_t minority = minority_of(masters.size());
  while (!run.over() && minority > 0) {
    const auto picked = run.pick(masters.size(), static_cast<std::size_t>(run.uniform(1, static_cast<long>(minority))));
    std::vector<std::int64_t> ids;
    for (const std::size_t i : picked) {
      masters[i]->freeze();
      ids.push_back(run.fault_start("SIGSTOP " + master_name(*masters[i])));
    }
    run.sleep_exactly(run.uniform_ms(100, 400));
    for (std::size_t k = 0; k < picked.size(); ++k) {
      masters[picked[k]]->thaw();
      run.fault_end(ids[k]);
    }
    run.sleep(run.uniform_ms(100, 300));
  }
  run.sleep(std::chrono::hours(1));
}

// Freeze (SIGSTOP) a random majority for ttl + 100 ms .. 2 ttl + 200 ms, thaw, 200-600 ms
// pause. Nobody can be granted or renewed meanwhile: a lease held across the freeze must
// signal its loss before its deadline (strategy lease), and no grant may overlap.
void majority_freezes(const Config& config, Run& run, Masters& masters) {
  const std::size_t majority = quorum_of(masters.size());
  run.sleep(500ms);
  while (!run.over()) {
    const auto picked = run.pick(masters.size(), majority);
    std::vector<std::int64_t> ids;
    for (const std::size_t i : picked) {
      masters[i]->freeze();
      ids.push_back(run.fault_start("SIGSTOP " + master_name(*masters[i]) + " (majority)"));
    }
    run.sleep_exactly(run.uniform_ms(config.ttl.count() + 100, 2 * config.ttl.count() + 200));
    for (std::size_t k = 0; k < picked.size(); ++k) {
      masters[picked[k]]->thaw();
      run.fault_end(ids[k]);
    }
    run.sleep(run.uniform_ms(200, 600));
  }
}

// SIGKILL one master and restart it (without --aof it forgets every key), a different
// one each time, spaced so that at most a minority is within its restart-guard window.
void minority_restarts(Run& run, Masters& masters, Milliseconds guard_window, const std::string& kind) {
  const std::size_t minority = minority_of(masters.size());
  const auto spacing = guard_window / static_cast<long>(std::max<std::size_t>(minority, 1)) + 200ms;
  run.sleep(500ms);
  std::size_t last = masters.size();
  while (!run.over() && minority > 0) {
    std::size_t pick = static_cast<std::size_t>(run.uniform(0, static_cast<long>(masters.size()) - 1));
    if (pick == last) pick = (pick + 1) % masters.size();
    last = pick;
    const std::int64_t id = run.fault_start("SIGKILL+restart " + kind + " " + master_name(*masters[pick]));
    masters[pick]->kill();
    run.sleep_exactly(run.uniform_ms(20, 200));
    masters[pick]->restart();
    run.fault_end(id);
    run.sleep(spacing);
  }
  run.sleep(std::chrono::hours(1));
}

// Asks the next grant to hold for `hold`, waits until some client made one and is inside the
// oracle with it. Returns false (and stops asking) if none came within `limit`.
bool long_grant(Run& run, Shared& shared, Milliseconds hold, std::chrono::steady_clock::duration limit) {
  shared.long_hold_ms.store(hold.count());
  shared.long_hold.store(true);
  const long before = shared.grants.load();
  const bool granted = run.wait_until([&] { return shared.grants.load() > before && shared.inside.load() > 0; }, limit);
  shared.long_hold.store(false);
  return granted;
}

// While a client holds (a long grant), SIGKILL a majority of the masters and restart them at
// once without persistence: they forget the key. With the restart guard they abstain until
// their window passed; without it the next client is granted the lock on them.
void majority_restarts(const Config& config, Run& run, Shared& shared, Masters& masters) {
  run.sleep(500ms);
  while (!run.over()) {
    if (!long_grant(run, shared, config.ttl / 2, 2s)) continue;
    const auto picked = run.pick(masters.size(), quorum_of(masters.size()));
    std::string names;
    for (const std::size_t i : picked) {
      names += ' ';  // appended piece by piece: GCC 12 -O2 warns (falsely, -Wrestrict) on " " + std::string&&
      names += std::to_string(masters[i]->port());
    }
    const std::int64_t id =
        run.fault_start("SIGKILL+restart " + restart_kind(config) + " of a majority while a client holds:" + names);
    for (const std::size_t i : picked) masters[i]->kill();
    for (const std::size_t i : picked) masters[i]->restart();
    run.fault_end(id);
    run.sleep(settle(config));
  }
}

// SIGSTOP a client process that has just entered (so it is paused while holding), for
// longer than its validity, then SIGCONT it.
void paused_holders(Run& run, Shared& shared, const std::vector<pid_t>& clients, Milliseconds pause) {
  run.sleep(500ms);
  while (!run.over()) {
    int victim = -1;
    while (victim < 0 && !run.over()) {
      const std::int64_t now = monotonic_ns();
      for (std::size_t i = 0; i < clients.size(); ++i) {
        const Slot& slot = shared.slots[i];
        if (slot.inside.load() == 1 && now - slot.entered_ns.load() < 5'000'000) victim = static_cast<int>(i);
      }
      if (victim < 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    if (victim < 0) break;
    const pid_t pid = clients[static_cast<std::size_t>(victim)];
    ::kill(pid, SIGSTOP);
    const std::int64_t id = run.fault_start("SIGSTOP client " + std::to_string(victim) + " (pid " +
                                            std::to_string(pid) + ") while holding, for " +
                                            std::to_string(pause.count()) + " ms");
    run.sleep_exactly(pause);
    ::kill(pid, SIGCONT);
    run.fault_end(id);
    run.sleep(run.uniform_ms(300, 600));
  }
}

std::string port_list(const Masters& masters, const std::vector<std::size_t>& which) {
  std::string s;
  for (const std::size_t i : which) {
    if (!s.empty()) s += ',';  // not "," + std::string&&: GCC 12 -O2 warns (falsely, -Wrestrict)
    s += std::to_string(masters[i]->port());
  }
  return s;
}

// Each round, every client is cut (with probability 1/2) from its own random minority of the
// masters, for 200-1000 ms; then everything heals for 100-500 ms.
void minority_partitions(Run& run, Cluster& cluster) {
  Masters& masters = cluster.masters;
  const std::size_t minority = minority_of(masters.size());
  while (!run.over() && minority > 0) {
    std::vector<Cut> cuts;
    std::vector<std::int64_t> ids;
    for (std::size_t c = 0; c < cluster.clients.size(); ++c) {
      if (run.uniform(0, 1) == 0) continue;
      const auto cut = run.pick(masters.size(), static_cast<std::size_t>(run.uniform(1, static_cast<long>(minority))));
      const std::string address = client_address(static_cast<int>(c));
      for (const std::size_t m : cut) cuts.push_back({address, masters[m]->port()});
      ids.push_back(run.fault_start("partition: client " + std::to_string(c) + " (" + address +
                                    ") cut from masters " + port_list(masters, cut)));
    }
    cluster.partitioner->set(cuts);
    run.sleep_exactly(run.uniform_ms(200, 1000));
    cluster.partitioner->set({});
    for (const auto id : ids) run.fault_end(id);
    run.sleep(run.uniform_ms(100, 500));
  }
  run.sleep(std::chrono::hours(1));
}

// Bridge partitions: the clients split into two groups; one sees only the first `quorum`
// masters of a random order, the other only the last `quorum`. Both groups can reach a
// majority, and the masters in the middle (the bridge) are seen by both.
void bridge_partitions(Run& run, Cluster& cluster) {
  Masters& masters = cluster.masters;
  const std::size_t n = masters.size();
  const std::size_t q = quorum_of(n);
  while (!run.over() && n >= 3) {
    const auto order = run.pick(n, n);
    auto clients = run.pick(cluster.clients.size(), cluster.clients.size());
    const auto split = static_cast<std::size_t>(run.uniform(1, static_cast<long>(clients.size()) - 1));
    std::vector<Cut> cuts;
    std::string left;
    std::string right;
    for (std::size_t k = 0; k < clients.size(); ++k) {
      const bool first_group = k < split;
      const std::string address = client_address(static_cast<int>(clients[k]));
      std::string& group = first_group ? left : right;
      if (!group.empty()) group += ',';  // not "," + std::string&&: GCC 12 -O2 warns (falsely, -Wrestrict)
      group += std::to_string(clients[k]);
      // first group: cut from order[q..n); second group: cut from order[0..n-q)
      for (std::size_t m = first_group ? q : 0; m < (first_group ? n : n - q); ++m) {
        cuts.push_back({address, masters[order[m]]->port()});
      }
    }
    const std::vector<std::size_t> seen_left(order.begin(), order.begin() + static_cast<long>(q));
    const std::vector<std::size_t> seen_right(order.begin() + static_cast<long>(n - q), order.end());
    const std::int64_t id = run.fault_start("bridge partition: clients " + left + " see masters " +
                                            port_list(masters, seen_left) + "; clients " + right + " see masters " +
                                            port_list(masters, seen_right));
    cluster.partitioner->set(cuts);
    run.sleep_exactly(run.uniform_ms(500, 1500));
    cluster.partitioner->set({});
    run.fault_end(id);
    run.sleep(run.uniform_ms(100, 400));
  }
  run.sleep(std::chrono::hours(1));
}

// A random minority of the masters answers late: their proxies hold every byte for 20-200 ms
// each way, for 0.5-2 s. Replies later than command_timeout count as no vote (late OKs are
// released); the rest are charged to the validity as elapsed time.
void slow_minorities(Run& run, Cluster& cluster) {
  Masters& masters = cluster.masters;
  const std::size_t minority = minority_of(masters.size());
  while (!run.over() && minority > 0) {
    const auto picked = run.pick(masters.size(), static_cast<std::size_t>(run.uniform(1, static_cast<long>(minority))));
    const auto delay = run.uniform_ms(20, 200);
    for (const std::size_t i : picked) {
      cluster.shared.delay_ns[i].store(std::chrono::duration_cast<std::chrono::nanoseconds>(delay).count());
    }
    const std::int64_t id = run.fault_start("slow masters " + port_list(masters, picked) + ": +" +
                                            std::to_string(delay.count()) + " ms each way");
    run.sleep_exactly(run.uniform_ms(500, 2000));
    for (const std::size_t i : picked) cluster.shared.delay_ns[i].store(0);
    run.fault_end(id);
    run.sleep(run.uniform_ms(200, 500));
  }
  run.sleep(std::chrono::hours(1));
}

// One master at a time gets a bad clock: it jumps forward by 2-4 ttl (its keys expire at
// once), or runs 2-10x fast for 0.5-2 s. A holder that locked more than a quorum's worth of
// masters keeps a majority.
void clock_faults(const Config& config, Run& run, Cluster& cluster) {
  auto& clocks = *cluster.clocks;
  run.sleep(500ms);
  while (!run.over()) {
    const auto i = static_cast<std::size_t>(run.uniform(0, static_cast<long>(clocks.size()) - 1));
    if (run.uniform(0, 1) == 0) {
      const auto jump = config.ttl * run.uniform(2, 4);
      const std::int64_t id = run.fault_start("clock of " + master_name(*cluster.masters[i]) + " jumps forward " +
                                              std::to_string(jump.count()) + " ms");
      jump_clock(*clocks[i], *cluster.masters[i], jump);
      run.fault_end(id);
      run.sleep(run.uniform_ms(300, 800));
    } else {
      const auto rate = static_cast<double>(run.uniform(2, 10));
      const std::int64_t id = run.fault_start("clock of " + master_name(*cluster.masters[i]) + " runs " +
                                              std::to_string(static_cast<int>(rate)) + "x fast");
      clocks[i]->set_rate(rate);
      run.sleep_exactly(run.uniform_ms(500, 2000));
      clocks[i]->reset_rate();
      run.fault_end(id);
      run.sleep(run.uniform_ms(200, 500));
    }
  }
}

// The known limit: a holder that locked exactly a quorum (k = 3 of 5) loses its majority when
// one of those masters' clocks jumps forward past the key's expiry. Each episode puts a
// foreign owner's key on two masters (as a crashed client would leave behind), so the next
// grant is made on exactly the other three; waits until a client holds such a grant; jumps
// one of the three forward by 2 ttl (the key expires there) and deletes the foreign keys: the
// next client is granted the lock on {jumped, 2 freed} while the first still holds.
void clock_jumps_k3(const Config& config, Run& run, Cluster& cluster) {
  Masters& masters = cluster.masters;
  auto& clocks = *cluster.clocks;
  const std::string key = std::string("redlock:") + kResource;
  const std::string blocker_ms = std::to_string((config.ttl * 10).count());
  run.sleep(500ms);
  while (!run.over()) {
    const auto order = run.pick(masters.size(), masters.size());
    const std::vector<std::size_t> blocked{order[3], order[4]};
    for (const std::size_t i : blocked) masters[i]->command({"SET", key, "foreign-owner", "PX", blocker_ms});
    const std::int64_t block_id = run.fault_start("masters " + port_list(masters, blocked) +
                                                  " hold a foreign owner's key (so grants have k = 3)");
    run.sleep_exactly(settle(config));  // grants made before are over
    const bool held = long_grant(run, cluster.shared, config.ttl * 7 / 10, 2s);
    std::int64_t jump_id = 0;
    if (held) {
      jump_id = run.fault_start("clock of " + master_name(*masters[order[0]]) + " jumps forward " +
                                std::to_string((config.ttl * 2).count()) + " ms while a k=3 grant holds");
      jump_clock(*clocks[order[0]], *masters[order[0]], config.ttl * 2);
    }
    for (const std::size_t i : blocked) masters[i]->command({"DEL", key});
    run.fault_end(block_id);
    if (held) {
      run.sleep_exactly(config.ttl / 2);
      run.fault_end(jump_id);
    }
    run.sleep(settle(config));
  }
}

}  // namespace

bool needs_partitions(const std::string& scenario) {
  return scenario == "minority-partition" || scenario == "bridge-partition";
}
bool needs_clock_shim(const std::string& scenario) { return scenario == "clock-faults" || scenario == "clock-jump-k3"; }
bool needs_proxies(const std::string& scenario) { return scenario == "slow-minority"; }

void run_scenario(const Config& config, Run& run, Cluster& cluster) {
  const std::string& s = config.scenario;
  if (s == "minority-freeze") {
    minority_freezes(run, cluster.masters);
  } else if (s == "majority-freeze") {
    majority_freezes(config, run, cluster.masters);
  } else if (s == "minority-restart") {
    // The guard window: max_lock_ttl (= ttl, workers.cpp), plus up to a second because the
    // library reads the uptime in whole seconds.
    minority_restarts(run, cluster.masters, config.ttl + 1s, restart_kind(config));
  } else if (s == "majority-restart") {
    majority_restarts(config, run, cluster.shared, cluster.masters);
  } else if (s == "paused-holder") {
    paused_holders(run, cluster.shared, cluster.clients, config.ttl + 500ms);
  } else if (s == "minority-partition") {
    minority_partitions(run, cluster);
  } else if (s == "bridge-partition") {
    bridge_partitions(run, cluster);
  } else if (s == "slow-minority") {
    slow_minorities(run, cluster);
  } else if (s == "clock-faults") {
    clock_faults(config, run, cluster);
  } else if (s == "clock-jump-k3") {
    clock_jumps_k3(config, run, cluster);
  } else {
    run.sleep(std::chrono::hours(1));
  }
}

bool link_up(const RedisServer& replica) {
  try {
    const support::Reply r = replica.command({"INFO", "replication"});
    return r.str.find("master_link_status:up") != std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}

// Seed 002, deterministically. The replica's link drops (REPLICAOF NO ONE after it caught
// up: WAIT 1 on the master), a client acquires on the master (its WAIT 1 returns 0), the
// master is SIGKILLed and the clients move to the replica, which never saw that SET: the next
// SET NX there succeeds while the first holder still holds. The old master comes back as the
// new replica and the roles swap.
// (A CLIENT PAUSE of the replica is not enough: the master's replication stream waits in the
// replica's socket and is applied when the pause ends, so the grant sometimes survives.)
void failovers(Run& run, Shared& shared, RedisServer* master, RedisServer* replica) {
  while (!run.over()) {
    run.wait_until([&] { return link_up(*replica); }, 5s);
    run.sleep(300ms);  // ordinary grants with replication working
    if (run.over()) break;
    // Close the gate and let the current holder release, so that the next grant is made
    // on the master after the replica stopped following it.
    shared.gate_closed.store(true);
    run.wait_until([&] { return shared.holding.load() == 0; }, 3s);
    run.sleep_exactly(5ms);  // a client that passed the gate just before it closed has answered by now
    run.wait_until([&] { return shared.holding.load() == 0; }, 3s);
    // The releases so far must have reached the replica, or it would keep a released key
    // (e.g. from a full sync still in progress) and refuse everyone after the failover.
    // (Shorter than command()'s 1 s read timeout: an unacknowledged WAIT answers 0, not throws.)
    if (master->command({"WAIT", "1", "500"}).integer < 1) {
      shared.gate_closed.store(false);
      continue;
    }
    const std::int64_t unlink = run.fault_start("replication link dropped: REPLICAOF NO ONE on replica 127.0.0.1:" +
                                                std::to_string(replica->port()));
    replica->command({"REPLICAOF", "NO", "ONE"});
    shared.long_hold_ms.store(1500);
    shared.long_hold.store(true);
    const long grants = shared.grants.load();
    shared.gate_closed.store(false);
    run.wait_until([&] { return shared.grants.load() != grants; }, 1s);
    // The holder read long_hold at its grant; later grants (after the failover) are short.
    run.wait_until([&] { return shared.inside.load() != 0; }, 100ms);
    shared.long_hold.store(false);
    const std::int64_t kill = run.fault_start("SIGKILL " + master_name(*master) + ", clients moved to 127.0.0.1:" +
                                              std::to_string(replica->port()));
    master->kill();
    shared.master_port.store(replica->port());
    run.sleep_exactly(1000ms);  // the clients find the new master and acquire there
    run.fault_end(unlink);
    master->restart();
    master->command({"REPLICAOF", "127.0.0.1", std::to_string(replica->port())});
    run.fault_end(kill);
    std::swap(master, replica);
  }
}

}  // namespace redlock::chaos

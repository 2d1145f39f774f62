// SPDX-License-Identifier: Apache-2.0
// redlock_chaos — runs one strategy under one fault scenario, records a history, checks it.
//
// The parent starts its own redis-servers on 127.0.0.1 (lock masters, a replica for the
// failover strategy, one server for the fenced store), and where the scenario needs them an
// nftables table of its own (partitions), a delaying proxy process (slow masters) or a clock
// shim preloaded into the masters (bad clocks). It forks W client processes (workers.h) and
// runs the scenario's fault schedule (scenarios.h) while they work. At the end it merges the
// histories, runs the checker, prints a table, writes report.json and timeline.svg.
// Exit status: 0 when every --expect holds, 1 when one does not, 2 on a setup error, 77 when
// this machine cannot inject the scenario's fault (skipped, never passed).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "checker.h"
#include "clock_control.h"
#include "config.h"
#include "history.h"
#include "partition.h"
#include "run.h"
#include "scenarios.h"
#include "shared_state.h"
#include "support/delay_proxy.h"
#include "support/redis_server.h"
#include "support/tls_certs.h"
#include "timeline.h"
#include "workers.h"

namespace redlock::chaos {
namespace {

using namespace std::chrono_literals;
using support::RedisServer;
using support::RedisServerOptions;
using support::ListeningSocket;
using support::listen_on_free_port;
using support::ProxyRoute;
using support::run_delay_proxies;

constexpr int kSkipped = 77;

bool check_expectations(const Config& config, const CheckReport& report) {
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::printf("EXPECTATION FAILED: %s\n", what.c_str());
    ok = false;
  };
  if (static_cast<long>(report.grants) < config.min_grants) {
    fail("at least " + std::to_string(config.min_grants) + " grants (got " + std::to_string(report.grants) + ")");
  }
  auto kind_of = [&](const std::string& name) -> ViolationKind {
    for (const auto k : kViolationKinds) {
      if (to_string(k) == name) return k;
    }
    usage("unknown violation kind '" + name + "' in --expect");
  };
  for (const std::string& e : config.expects) {
    if (e == "clean") {
      if (report.total_violations() != 0) fail("no violations (got " + std::to_string(report.total_violations()) + ")");
      // The oracle's own count sees an overlap as it happens, however short or however late
      // the holders wrote it down.
      if (report.live_oracle_conflicts != 0) {
        fail("no holder entering the oracle while another was inside (got " +
             std::to_string(report.live_oracle_conflicts) + ")");
      }
      // (--scenario none with the library is a run without faults on purpose: a control.)
      const bool control = config.library() && config.scenario == "none";
      if (report.faults == 0 && !control) fail("at least one fault injected (a clean run without faults shows nothing)");

    } else if (e.rfind("violation:", 0) == 0) {
      const ViolationKind kind = kind_of(e.substr(10));
      if (report.count(kind) == 0) fail("at least one " + e.substr(10) + " violation");
      // A control that injects faults shows what they do only with a violation while one was
      // active: one from any other cause (a checker false positive, a harness artifact) would
      // pass it just the same. (Strategies that break without faults inject none.)
      if (report.count(kind) != 0 && report.faults != 0 && report.during_faults[static_cast<std::size_t>(kind)] == 0) {
        fail("a " + e.substr(10) + " violation while a fault was active (every one was outside the faults)");
      }
    } else if (e.rfind("no-violation:", 0) == 0) {
      if (report.count(kind_of(e.substr(13))) != 0) fail("no " + e.substr(13) + " violation");
    } else if (e == "late-write-rejected") {
      if (report.late_writes_rejected == 0) fail("a late write rejected by the store");
    } else if (e == "loss-signalled") {
      if (report.losses_signalled == 0) fail("a lease loss signalled");
    } else if (e == "late-write-accepted") {
      if (report.late_writes_accepted == 0) fail("a late write accepted by the store");
    } else if (e.rfind("stall:", 0) == 0) {
      const long ms = std::stol(e.substr(6));
      if (report.longest_no_grant_ns < ms * 1'000'000) {
        fail("a no-grant gap of at least " + std::to_string(ms) + " ms (longest " +
             std::to_string(report.longest_no_grant_ns / 1'000'000) + " ms)");
      }
    } else {
      usage("unknown --expect '" + e + "'");
    }
  }
  return ok;
}

// The proxy process (slow-minority): forked before the clients, so it is single-threaded;
// forwards to the masters until Shared::proxy_stop.
// A byte-for-byte proxy: with --tls the clients' TLS sessions pass through it unchanged.
pid_t start_proxies(Shared& shared, const std::vector<std::unique_ptr<RedisServer>>& masters,
                    std::vector<std::string>& uris) {
  std::vector<ProxyRoute> routes;
  for (std::size_t i = 0; i < masters.size(); ++i) {
    const ListeningSocket socket = listen_on_free_port();
    routes.push_back({socket.fd, masters[i]->port(), &shared.delay_ns[i]});
    uris[i] = (masters[i]->tls() ? "rediss://127.0.0.1:" : "redis://127.0.0.1:") + std::to_string(socket.port);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int code = 0;
    try {
      run_delay_proxies(routes, shared.proxy_stop);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "delay proxy: %s\n", e.what());
      code = 30;
    }
    std::fflush(stderr);
    ::_exit(code);
  }
  for (const auto& r : routes) ::close(r.listen_fd);
  return pid;
}

// Waits for a child to exit within `limit`, SIGKILLs it otherwise. Returns its wait status.
int reap(pid_t pid, std::chrono::steady_clock::duration limit, bool& killed) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  killed = done == 0;
  if (killed) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  return status;
}

// The strategies that bring their own fault, run by the parent.
void strategy_faults(const Config& config, Run& run, Shared& shared,
                     std::vector<std::unique_ptr<RedisServer>>& servers) {
  if (config.strategy == "failover") {
    failovers(run, shared, servers[0].get(), servers[1].get());
  } else if (config.strategy == "getset-timestamp") {
    const std::int64_t id = run.fault_start("client 0's clock runs " + std::to_string(config.skew.count()) +
                                            " ms ahead of the others'");
    run.sleep(std::chrono::hours(1));
    run.fault_end(id);
  } else if (config.strategy == "setnx-expire") {
    run.sleep(1s);
    shared.crash_next.store(true);  // the next winner records its own death (workers.cpp)
    run.sleep(std::chrono::hours(1));
  } else {
    run.sleep(std::chrono::hours(1));
  }
}

int run_main(const Config& config) {
  std::optional<std::string> cannot;
  if (needs_partitions(config.scenario)) cannot = Partitioner::unavailable();
  if (cannot) {
    std::printf("SKIPPED: scenario %s: %s\n", config.scenario.c_str(), cannot->c_str());
    return kSkipped;
  }
  const auto started = std::chrono::steady_clock::now();
  std::filesystem::create_directories(config.out);
  std::printf("redlock_chaos: strategy %s, scenario %s, seed %" PRIu64 ", duration %.1f s, %d clients, fencing %s, "
              "restart guard %s, AOF %s, TLS %s, ttl %lld ms, out %s\n",
              config.strategy.c_str(), config.scenario.c_str(), config.seed, config.duration_s, config.workers,
              config.fencing ? "on" : "off", config.restart_guard ? "on" : "off", config.aof ? "on" : "off",
              config.tls ? "on" : "off", static_cast<long long>(config.ttl.count()), config.out.c_str());
  std::fflush(stdout);

  RedisServerOptions server_options;
  server_options.extra_args = {"--repl-diskless-sync-delay", "0"};
  // --tls: a throw-away CA and server certificate (support/tls_certs.h, removed at the end);
  // the masters listen with TLS only, on the same port across restarts, and do not ask the
  // clients for certificates. The fenced store stays plain: it is never faulted.
  std::optional<support::TestPki> pki;
  if (config.tls) pki.emplace();
  const std::size_t n_servers = config.library() ? config.n : config.strategy == "failover" ? 2 : 1;
  std::vector<std::unique_ptr<ClockControl>> clocks;
  std::vector<std::unique_ptr<RedisServer>> servers;
  for (std::size_t i = 0; i < n_servers; ++i) {
    RedisServerOptions options = pki ? support::tls_server_options(*pki, pki->server(), "no") : server_options;
    options.extra_args = server_options.extra_args;
    options.persistence = config.aof && config.library();
    if (needs_clock_shim(config.scenario)) {
      clocks.push_back(std::make_unique<ClockControl>(config.out + "/clock-" + std::to_string(i)));
      options.environment = clocks.back()->server_environment();
    }
    servers.push_back(std::make_unique<RedisServer>(options));
  }
  const RedisServer store_server(server_options);
  if (config.strategy == "failover") {
    servers[1]->command({"REPLICAOF", "127.0.0.1", std::to_string(servers[0]->port())});
  }
  std::vector<std::string> uris;
  for (const auto& s : servers) uris.push_back(s->uri());

  SharedMapping mapping;
  Shared& shared = mapping.get();
  shared.master_port.store(servers[0]->port());
  std::unique_ptr<Partitioner> partitioner;
  if (needs_partitions(config.scenario)) partitioner = std::make_unique<Partitioner>();
  const pid_t proxy = needs_proxies(config.scenario) ? start_proxies(shared, servers, uris) : -1;

  HistoryWriter faults(config.out + "/faults.jsonl");
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> clients;
  for (int i = 0; i < config.workers; ++i) {
    const WorkerContext context{config, shared, i, config.out + "/client-" + std::to_string(i) + ".jsonl",
                                config.library() ? uris : std::vector<std::string>{}, store_server.port(),
                                pki ? pki->ca_file() : std::string()};
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) run_worker(context);
    shared.slots[i].pid.store(pid);
    clients.push_back(pid);
  }

  Run run(config, shared, faults);
  Cluster cluster{servers, clients, shared, partitioner.get(), clocks.empty() ? nullptr : &clocks};
  // A fault that could not be injected (a restart that found its port taken, nft failing)
  // ends the schedule early: the run is then checked, but cannot pass.
  std::string fault_loop_error;
  try {
    if (config.library()) run_scenario(config, run, cluster);
    else strategy_faults(config, run, shared, servers);
  } catch (const std::exception& e) {
    fault_loop_error = e.what();
    std::fprintf(stderr, "fault loop: %s\n", e.what());
  }
  for (auto& s : servers) s->thaw();
  if (partitioner) partitioner->set({});
  shared.stop.store(true);

  // Stop the clients: they look at the stop flag at least every ~300 ms plus one hold.
  bool clients_ok = true;
  for (std::size_t i = 0; i < clients.size(); ++i) {
    ::kill(clients[i], SIGCONT);
    bool killed = false;
    const int status = reap(clients[i], 10s, killed);
    const bool expected_crash = static_cast<int>(i) == shared.crashed.load() && WIFSIGNALED(status) &&
                                WTERMSIG(status) == SIGKILL;
    if (killed) {
      std::fprintf(stderr, "client pid %d did not stop; SIGKILLed\n", clients[i]);
      clients_ok = false;
    } else if (!expected_crash && (!WIFEXITED(status) || WEXITSTATUS(status) != 0)) {
      std::fprintf(stderr, "client pid %d failed (status %d)\n", clients[i], status);
      clients_ok = false;
    }
  }
  if (proxy > 0) {
    shared.proxy_stop.store(true);
    bool killed = false;
    const int status = reap(proxy, 5s, killed);
    if (killed || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "delay proxy pid %d failed (status %d)\n", proxy, status);
      clients_ok = false;
    }
  }
  partitioner.reset();

  std::vector<std::vector<Event>> parts{read_history(config.out + "/faults.jsonl")};
  for (int i = 0; i < config.workers; ++i) {
    parts.push_back(read_history(config.out + "/client-" + std::to_string(i) + ".jsonl"));
  }
  const std::vector<Event> history = merge_histories(parts);
  const CheckReport report = check_history(history);
  std::printf("\n%s", report.table().c_str());

  nlohmann::json j = report.to_json();
  j["strategy"] = config.strategy;
  j["scenario"] = config.scenario;
  j["seed"] = config.seed;
  j["fencing"] = config.fencing;
  j["restart_guard"] = config.restart_guard;
  j["aof"] = config.aof;
  j["tls"] = config.tls;
  j["masters"] = config.library() ? config.n : 1;
  j["clients"] = config.workers;
  j["ttl_ms"] = config.ttl.count();
  j["hold_ms"] = config.hold.count();
  j["clients_exited_cleanly"] = clients_ok;
  bool ok = check_expectations(config, report) && clients_ok;
  if (!fault_loop_error.empty()) {
    std::printf("EXPECTATION FAILED: the fault schedule ran to its end (fault loop: %s)\n", fault_loop_error.c_str());
    ok = false;
  }
  j["fault_loop_error"] = fault_loop_error;
  j["expectations"] = config.expects;
  j["expectations_met"] = ok;
  std::ofstream(config.out + "/report.json") << j.dump(2) << '\n';
  std::printf("report: %s/report.json\n", config.out.c_str());
  if (config.timeline) {
    TimelineOptions options;
    options.title = config.strategy + (config.library() ? " N=" + std::to_string(config.n) : std::string()) + ", " +
                    (config.library() ? config.scenario : std::string("its own fault")) + ", seed " +
                    std::to_string(config.seed) + (config.fencing ? ", fencing" : "") + (config.tls ? ", TLS" : "");
    std::ofstream(config.out + "/timeline.svg") << render_timeline_svg(history, report, options);
    std::printf("timeline: %s/timeline.svg\n", config.out.c_str());
  }
  // One markdown table row for scripts/chaos-full (which adds the run's name and result).
  std::string expects;
  for (const auto& e : config.expects) expects += (expects.empty() ? "" : " ") + e;
  std::printf("row: %s | %zu | %zu | %zu | %zu | %zu | %zu/%zu | %.0f | %.0f |\n", expects.c_str(), report.grants,
              report.faults, report.mutual_exclusion_violations, report.oracle_violations, report.fencing_violations,
              report.late_writes_accepted, report.late_writes_rejected,
              static_cast<double>(report.longest_no_grant_ns) / 1e6,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  std::printf("result: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace redlock::chaos

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  redlock::chaos::end_runs_on_interrupt();
  const redlock::chaos::Config config = redlock::chaos::parse_args(argc, argv);
  try {
    return redlock::chaos::run_main(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redlock_chaos: %s\n", e.what());
    return 2;
  }
}

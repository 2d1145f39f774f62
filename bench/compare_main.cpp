// SPDX-License-Identifier: Apache-2.0
// redlock_compare — "how much does a quorum cost over one Redis?", answered in one run.
//
// Starts its own redis-servers on free loopback ports, then, once per repetition:
// acquire latency and cycle rate for N = 1 (the floor), 3, 5, 7 with parallel fan-out and
// with sequential fan-out, redis-benchmark's own -c 1 floor, throughput with K locks in
// flight against the masters' CPU ceiling, one frozen master of five, the client's CPU and
// allocations per cycle, reconnects, and single node vs quorum across simulated zones (a
// delaying proxy in front of each master); first, RSS with many locks held. Writes
// results.jsonl, table.txt and plots to --out. Figures are informational: the exit code is 0
// whenever the run completed, whatever the targets say.
#include <algorithm>
#include <array>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "compare.h"
#include "redlock/redlock.h"

namespace bench {
namespace {

void usage(std::FILE* to) {
  std::fputs(
      "usage: redlock_compare [--out DIR] [--reps R] [--quick] [--pin] [--no-plots]\n"
      "\n"
      "  --out DIR    where results.jsonl, table.txt and the plots go (default bench-results)\n"
      "  --reps R     repetitions of every measurement; the table shows the median [min..max]\n"
      "               (default 3)\n"
      "  --quick      fewer samples and shorter windows: a smoke run (under a minute on a quiet machine)\n"
      "  --pin        this process (client + its loop threads) on CPU 0, the redis-servers on\n"
      "               CPU 1 (needs 2 CPUs); redis-benchmark runs inherit CPU 0\n"
      "  --no-plots   skip gnuplot (data files and plots.gp are still written)\n"
      "\n"
      "Starts its own redis-servers (redis-server in PATH) on 127.0.0.1; uses redis-benchmark\n"
      "for the C-client floor and the pipelined ceiling when installed.\n",
      to);
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 0; i < argc; ++i) c.argv.emplace_back(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "redlock_compare: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--out") {
      c.out = value();
    } else if (arg == "--reps") {
      const std::string v = value();
      c.reps = std::atoi(v.c_str());
      if (c.reps < 1 || c.reps > 50) {
        std::fprintf(stderr, "redlock_compare: --reps must be 1..50, got '%s'\n", v.c_str());
        std::exit(2);
      }
    } else if (arg == "--quick") {
      c.quick = true;
    } else if (arg == "--pin") {
      c.pin = true;
    } else if (arg == "--no-plots") {
      c.plots = false;
    } else if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);
    } else {
      std::fprintf(stderr, "redlock_compare: unknown argument '%s'\n", arg.c_str());
      usage(stderr);
      std::exit(2);
    }
  }
  c.latency_ns = {1, 3, 5, 7};
  c.in_flight = {1, 16, 64, 256};
  if (c.quick) {
    c.throughput_ns = {1, 5};
    c.latency_samples = 300;
    c.frozen_samples = 300;
    c.cost_cycles = 1000;
    c.throughput_seconds = 0.25;
    c.ceiling_requests = 40'000;
    c.floor_requests = 5'000;
    c.hold_locks = 20'000;
    c.reconnect_samples = 15;
    c.zone_samples = 20;
  } else {
    c.throughput_ns = {1, 3, 5, 7};
    c.latency_samples = 2000;
    c.frozen_samples = 2000;
    c.cost_cycles = 5000;
    c.throughput_seconds = 0.6;
    c.ceiling_requests = 100'000;
    c.floor_requests = 20'000;
    c.hold_locks = 100'000;
    c.reconnect_samples = 40;
    c.zone_samples = 150;
  }
  c.tls_ns = {1, 5};
  return c;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

std::vector<std::string> Run::uris(std::size_t n) const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n && i < masters.size(); ++i) out.push_back(masters[i]->uri());
  return out;
}

std::vector<std::string> Run::tls_uris(std::size_t n) const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n && i < masters.size() && i < tls_ports.size(); ++i) {
    out.push_back("rediss://" + masters[i]->host() + ":" + std::to_string(tls_ports[i]));
  }
  return out;
}

void Run::record(nlohmann::ordered_json object) {
  if (object.contains("progress")) {
    const std::string line = object["progress"].get<std::string>();
    const int rep = object.value("rep", -1);
    if (rep >= 0) {
      std::fprintf(stderr, "[rep %d/%d] %s\n", rep + 1, config.reps, line.c_str());
    } else {
      std::fprintf(stderr, "[once] %s\n", line.c_str());
    }
    object.erase("progress");
  }
  records.push_back(std::move(object));
}

void Run::note(const std::string& text) {
  for (const auto& existing : notes) {
    if (existing == text) return;
  }
  notes.push_back(text);
}

}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  Run run;
  run.config = parse(argc, argv);
  const Config& config = run.config;
  std::signal(SIGPIPE, SIG_IGN);

  // Pin before any thread exists: the Clients' loop threads inherit CPU 0, and the
  // redis-servers are moved to CPU 1 right after they start.
  bool pinned = false;
  if (config.pin) {
    if (online_cpus() < 2) {
      run.note("--pin needs 2 CPUs; this machine has " + std::to_string(online_cpus()) + ": not pinned");
    } else if (!pin_this_thread(0)) {
      run.note("--pin: sched_setaffinity(CPU 0) failed: not pinned");
    } else {
      pinned = true;
    }
  }

  try {
    std::filesystem::create_directories(config.out);
    const auto started = SteadyClock::now();
    const std::string load_at_start = load_average();
    const std::size_t max_n = 7;
    std::fprintf(stderr, "redlock_compare: starting %zu redis-servers on 127.0.0.1 (%s mode, %d reps)\n", max_n,
                 config.quick ? "quick" : "full", config.reps);
    // A throw-away CA and server certificate (support/tls_certs.h: subjectAltName
    // IP:127.0.0.1), so that every master also has a TLS port (issue 13's TLS rows).
    run.pki = std::make_unique<redlock::support::TestPki>();
    for (std::size_t i = 0; i < max_n; ++i) {
      redlock::support::RedisServerOptions server_options;
      server_options.bind = "127.0.0.1";
      const std::uint16_t tls_port = free_loopback_port();
      if (tls_port == 0) throw std::runtime_error("no free loopback port for a TLS listener");
      // Plain port as usual (the support helper's probe and command() use it), plus a TLS
      // port on the same server: the TLS rows measure the transport, not another process.
      server_options.extra_args = {"--tls-port", std::to_string(tls_port), "--tls-cert-file",
                                   run.pki->server().cert_file, "--tls-key-file", run.pki->server().key_file,
                                   "--tls-ca-cert-file", run.pki->ca_file(), "--tls-auth-clients", "no"};
      run.masters.push_back(std::make_unique<redlock::support::RedisServer>(server_options));
      run.tls_ports.push_back(tls_port);
      if (pinned) {
        if (pin_process(run.masters.back()->pid(), 1) == 0) {
          run.note("--pin: could not pin redis-server pid " + std::to_string(run.masters.back()->pid()) + " to CPU 1");
        }
      }
    }
    run.pinned = pinned;
    if (pinned) run.note("pinned: client process (all its threads) on CPU 0, every redis-server thread on CPU 1");
    const std::string server_path = find_executable("redis-server");
    run.redis_version = first_line(run_capture({server_path, "--version"}).first);
    run.redis_benchmark = find_executable("redis-benchmark");

    run.note("ClientOptions::restart_guard off in every Client: the masters were started by this run seconds ago, "
             "and the guard would not count their grants for one max_lock_ttl (its cost per acquire once they "
             "are trusted is a clock comparison per reply)");
    // First, while the process is small: ru_maxrss is a lifetime peak and cannot be reset.
    phase_hold_locks(run);
    flush_masters(run);
    for (int rep = 0; rep < config.reps; ++rep) {
      // Rotate the order of N so that slow drift on a noisy machine does not always land
      // on the same configuration; alternate parallel/sequential first.
      const auto& ns = config.latency_ns;
      for (std::size_t j = 0; j < ns.size(); ++j) {
        const std::size_t n = ns[(j + static_cast<std::size_t>(rep)) % ns.size()];
        const bool tls = std::find(config.tls_ns.begin(), config.tls_ns.end(), n) != config.tls_ns.end();
        if (rep % 2 == 0) {
          phase_latency_parallel(run, n, rep);
          if (tls) phase_latency_parallel(run, n, rep, Transport::tls);
          if (n > 1) phase_latency_sequential(run, n, rep);
        } else {
          if (n > 1) phase_latency_sequential(run, n, rep);
          if (tls) phase_latency_parallel(run, n, rep, Transport::tls);
          phase_latency_parallel(run, n, rep);
        }
      }
      // Alternating order, as for the latency series: the TLS / plain ratio is not the order's.
      for (const Transport transport :
           rep % 2 == 0 ? std::array{Transport::plain, Transport::tls} : std::array{Transport::tls, Transport::plain}) {
        phase_floor_redis_benchmark(run, rep, transport);
      }
      flush_masters(run);
      for (const std::size_t n : config.throughput_ns) {
        phase_ceiling(run, n, rep);
        for (const std::size_t k : config.in_flight) phase_throughput(run, n, k, rep);
      }
      flush_masters(run);
      phase_frozen(run, rep);
      phase_client_cost(run, rep);
      flush_masters(run);
      phase_reconnect(run, rep);
      flush_masters(run);
      phase_zones(run, rep);
      flush_masters(run);
    }

    const double elapsed = micros(started, SteadyClock::now()) / 1e6;
    nlohmann::ordered_json meta = {
        {"type", "meta"},
        {"tool", "redlock_compare"},
        {"date_utc", utc_timestamp()},
        {"host", hostname()},
        {"cpus", online_cpus()},
        {"cpu_model", cpu_model()},
        {"kernel", kernel_release()},
        {"redis", run.redis_version},
        {"redis_benchmark", run.redis_benchmark.empty() ? "not installed" : run.redis_benchmark},
        {"mode", config.quick ? "quick" : "full"},
        {"reps", config.reps},
        {"pinned", pinned},
        {"argv", config.argv},
        {"latency_samples_per_rep", config.latency_samples},
        {"throughput_window_s", config.throughput_seconds},
        {"zone_samples_per_rep", config.zone_samples},
        {"elapsed_s", elapsed},
        {"load_average_start", load_at_start},
        {"load_average_end", load_average()},
    };
    write_report(run, meta);
    std::fprintf(stderr, "redlock_compare: done in %.1f s; results in %s\n", elapsed, config.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redlock_compare: %s\n", e.what());
    return 1;
  }
  return 0;
}

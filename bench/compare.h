// SPDX-License-Identifier: Apache-2.0
// bench/compare.h — redlock_compare: single node vs quorum vs the physical floor, one run.
//
// compare_main.cpp parses the command line, starts the masters and runs the phases once per
// repetition; compare_phases.cpp measures; compare_report.cpp writes results.jsonl,
// table.txt and the gnuplot plots. Public API only (redlock/*.h, support/redis_server.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/redis_server.h"
#include "support/tls_certs.h"
#include "sys.h"

namespace bench {

struct Config {
  std::string out = "bench-results";
  int reps = 3;
  bool quick = false;
  bool pin = false;
  bool plots = true;
  std::vector<std::string> argv;  // as given, for the record

  // Derived from `quick` (see compare_main.cpp).
  std::vector<std::size_t> latency_ns;     // N values of the latency sweep
  std::vector<std::size_t> throughput_ns;  // N values of the throughput sweep
  std::vector<std::size_t> in_flight;      // K values (locks in flight)
  int latency_samples = 0;                 // acquire+release cycles per (N, mode, rep)
  int frozen_samples = 0;                  // per (healthy|frozen, rep)
  int cost_cycles = 0;                     // client-cost cycles per rep
  double throughput_seconds = 0;           // measured window per (N, K, rep)
  std::uint64_t ceiling_requests = 0;      // pipelined SETs per master per ceiling measurement
  std::uint64_t floor_requests = 0;        // redis-benchmark -c 1 requests
  std::size_t hold_locks = 0;              // locks held at once for the RSS figure
  std::vector<std::size_t> tls_ns;         // N values with a TLS latency row beside plain
  int reconnect_samples = 0;               // drops (or fresh connects) per reconnect series and rep
  int zone_samples = 0;                    // acquire+release cycles per series and rep, zones phase
};

// A zones profile: the round trip the delaying proxy adds in front of masters 1..5 (the
// proxy holds each direction for half of it).
struct ZoneProfile {
  std::string id;     // figure-name part: "all0.5", "all2", "zones"
  std::string label;  // for the table and the plot
  std::vector<double> rtt_ms;  // per master, masters 1..5 in order
};
const std::vector<ZoneProfile>& zone_profiles();

// Everything one run measured. Figures are named ("lat.par.n5.p50") and hold one value per
// repetition; the report shows their median with min and max.
struct Run {
  Config config;
  // Every master also listens with TLS on tls_ports[i] (certificate from `pki`, generated at
  // start and removed at the end): the same server processes answer plain and TLS clients.
  // Declared before `masters` so that the files outlive the servers.
  std::unique_ptr<redlock::support::TestPki> pki;
  std::vector<std::uint16_t> tls_ports;
  std::vector<std::unique_ptr<redlock::support::RedisServer>> masters;  // all started masters
  std::string redis_benchmark;  // path, empty when not installed
  std::string redis_version;
  bool pinned = false;  // --pin took effect (client on CPU 0, every redis-server thread on CPU 1)

  std::map<std::string, std::vector<double>> figures;
  // Acquire latencies (µs) pooled across repetitions, per series label, for the CDF plot.
  std::map<std::string, std::vector<double>> cdf;
  std::vector<nlohmann::ordered_json> records;  // one JSON object per measurement, in order
  std::vector<std::string> notes;       // printed under the table and kept in the JSON

  void add(const std::string& name, double value) { figures[name].push_back(value); }
  [[nodiscard]] bool has(const std::string& name) const {
    const auto it = figures.find(name);
    return it != figures.end() && !it->second.empty();
  }
  [[nodiscard]] Spread get(const std::string& name) const {
    const auto it = figures.find(name);
    return it == figures.end() ? Spread{} : spread(it->second);
  }
  void record(nlohmann::ordered_json object);  // appends, and echoes a short progress line
  void note(const std::string& text);  // once per distinct text

  std::vector<std::string> uris(std::size_t n) const;      // the first n masters, redis://
  std::vector<std::string> tls_uris(std::size_t n) const;  // the same masters, rediss://
};

// ---- phases (compare_phases.cpp); each adds its figures and records for repetition `rep`.

enum class Transport { plain, tls };
// Acquire latency and acquire+release cycles/s with parallel fan-out (the Client), N masters,
// over plain TCP or TLS (after the handshake: the Client is connected before the first sample).
void phase_latency_parallel(Run& run, std::size_t n, int rep, Transport transport = Transport::plain);
// The same with sequential fan-out: N single-master Clients, one after the other.
void phase_latency_sequential(Run& run, std::size_t n, int rep);
// redis-benchmark -c 1 SET NX PX against master 0 (when installed), over plain TCP or TLS.
void phase_floor_redis_benchmark(Run& run, int rep, Transport transport = Transport::plain);
// K acquire+release chains in flight from one Client for a fixed time.
void phase_throughput(Run& run, std::size_t n, std::size_t k, int rep);
// Pipelined SETs against the first n masters at once (redis-benchmark -P 16 -c 4 each):
// informational since the throughput phase derives the masters' ceiling from their CPU.
void phase_ceiling(Run& run, std::size_t n, int rep);
// One master of 5 frozen (SIGSTOP) against all healthy.
void phase_frozen(Run& run, int rep);
// Single node vs quorum across zones: a delaying proxy (support/delay_proxy.h) in front of
// masters 1..5, for each of zone_profiles(): N=1 through every master, the quorum N=3 and 5
// (the Client) and the sequential model N=3 and 5, through the same proxies.
void phase_zones(Run& run, int rep);
// CPU time and heap allocations (every malloc) per acquire+release cycle, N = 5.
void phase_client_cost(Run& run, int rep);
// Time from a dropped connection (CLIENT KILL) to the master granting again, plain and TLS
// (server session cache on and off), and a fresh Client's first grant, N = 1.
void phase_reconnect(Run& run, int rep);
// Peak RSS while holding config.hold_locks locks, N = 5 (once per run).
void phase_hold_locks(Run& run);
// Empties every master (FLUSHALL), so one phase's keys do not load the next.
void flush_masters(Run& run);

// ---- report (compare_report.cpp)

// Writes results.jsonl, table.txt (and prints the table), and the plots unless disabled.
void write_report(Run& run, const nlohmann::ordered_json& meta);

}  // namespace bench

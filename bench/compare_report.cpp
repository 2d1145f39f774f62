// SPDX-License-Identifier: Apache-2.0
// redlock_compare's report: results.jsonl (meta, one record per measurement, one summary
// per figure, the targets), table.txt (also printed), and gnuplot plots.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compare.h"

namespace bench {
namespace {

using json = nlohmann::ordered_json;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buffer[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof(buffer), fmt, args);
  va_end(args);
  return buffer;
}

// A number with sensible precision for a table cell.
std::string num(double v) {
  if (std::isnan(v)) return "-";
  const double a = std::fabs(v);
  if (a >= 10000) return format("%.0f", v);
  if (a >= 100) return format("%.0f", v);
  if (a >= 10) return format("%.1f", v);
  return format("%.2f", v);
}

std::string with_range(const Spread& s) {
  if (s.reps == 0) return "-";
  if (s.reps == 1) return num(s.median);
  return num(s.median) + " [" + num(s.min) + ".." + num(s.max) + "]";
}

std::string pad(const std::string& text, std::size_t width) {
  return text.size() >= width ? text + " " : text + std::string(width - text.size(), ' ');
}

std::string tag(std::size_t n) { return "n" + std::to_string(n); }

// Per-repetition ratio of two figures (paired by repetition), as a Spread.
std::optional<Spread> ratio(const Run& run, const std::string& top, const std::string& bottom,
                            const std::function<double(double, double)>& f = [](double a, double b) {
                              return a / b;
                            }) {
  const auto t = run.figures.find(top);
  const auto b = run.figures.find(bottom);
  if (t == run.figures.end() || b == run.figures.end()) return std::nullopt;
  std::vector<double> values;
  for (std::size_t i = 0; i < std::min(t->second.size(), b->second.size()); ++i) {
    if (b->second[i] > 0) values.push_back(f(t->second[i], b->second[i]));
  }
  if (values.empty()) return std::nullopt;
  return spread(values);
}

// A figure that is already a per-repetition ratio, as a Spread.
std::optional<Spread> figure(const Run& run, const std::string& key) {
  if (!run.has(key)) return std::nullopt;
  return run.get(key);
}

struct Target {
  std::string name;     // what is compared
  std::string key;      // short id for the JSON
  std::optional<Spread> value;
  std::string op;       // "<=", ">=", or "~" (expectation, no verdict)
  double limit = 0;
  std::string comment;
};

std::string verdict(const Target& t) {
  if (!t.value) return "n/a";
  if (t.op == "<=") return t.value->median <= t.limit ? "PASS" : "MISS";
  if (t.op == ">=") return t.value->median >= t.limit ? "PASS" : "MISS";
  return "info";
}

std::vector<Target> targets(const Run& run) {
  std::vector<Target> out;
  out.push_back({"acquire p50, N=5 / floor (N=1, same code path)", "n5_over_floor_p50",
                 ratio(run, "lat.par.n5.p50", "lat.par.n1.p50"), "<=", 1.5, ""});
  out.push_back({"acquire p50, N=5 / N=1", "n5_over_n1_p50", ratio(run, "lat.par.n5.p50", "lat.par.n1.p50"), "<=",
                 1.3, ""});
  for (const std::size_t n : run.config.latency_ns) {
    if (n == 1) continue;
    out.push_back({"sequential fan-out N=" + std::to_string(n) + " p50 / floor", "seq_n" + std::to_string(n) +
                                                                                     "_over_floor_p50",
                   ratio(run, "lat.seq." + tag(n) + ".p50", "lat.par.n1.p50"), "~", static_cast<double>(n),
                   "expected near N"});
  }
  for (const std::size_t n : run.config.latency_ns) {
    if (n == 1) continue;
    out.push_back({"sequential / parallel p50, N=" + std::to_string(n), "seq_over_par_n" + std::to_string(n),
                   ratio(run, "lat.seq." + tag(n) + ".p50", "lat.par." + tag(n) + ".p50"), "~", 0,
                   "what parallel fan-out buys"});
  }
  out.push_back({"acquire p50, N=5 / redis-benchmark -c 1 p50", "n5_over_redis_benchmark_p50",
                 ratio(run, "lat.par.n5.p50", "rb.floor.p50"), "~", 0, "C client, no thread hand-off"});
  out.push_back({"acquire p99, 1 of 5 frozen / all healthy", "frozen_over_healthy_p99",
                 ratio(run, "frozen.frozen.p99", "frozen.healthy.p99"), "<=", 1.2, ""});
  out.push_back({"acquire p50, 1 of 5 frozen / all healthy", "frozen_over_healthy_p50",
                 ratio(run, "frozen.frozen.p50", "frozen.healthy.p50"), "~", 0, ""});
  out.push_back({"acquire p50 over TLS / plain, N=5", "tls_over_plain_n5_p50",
                 ratio(run, "lat.tls.n5.p50", "lat.par.n5.p50"), "<=", 1.15, "after the handshake"});
  out.push_back({"acquire p99 over TLS / plain, N=5", "tls_over_plain_n5_p99",
                 ratio(run, "lat.tls.n5.p99", "lat.par.n5.p99"), "~", 0, ""});
  out.push_back({"acquire+release p50 TLS / plain, N=5", "tls_over_plain_n5_cycle_p50",
                 ratio(run, "lat.tls.n5.cycle_p50", "lat.par.n5.cycle_p50"), "~", 0, ""});
  out.push_back({"acquire p50 over TLS / plain, N=1", "tls_over_plain_n1_p50",
                 ratio(run, "lat.tls.n1.p50", "lat.par.n1.p50"), "~", 0, ""});
  out.push_back({"redis-benchmark -c 1 p50, TLS / plain (C client, N=1)", "c_client_tls_over_plain_p50",
                 ratio(run, "rb.tls.p50", "rb.floor.p50"), "~", 0, "histogram buckets: 1.00 or 1.35"});
  out.push_back({"redis-benchmark -c 1 mean round trip, TLS / plain", "c_client_tls_over_plain_mean",
                 ratio(run, "rb.floor.rps", "rb.tls.rps"), "~", 0, "TLS's own cost on a round trip"});
  out.push_back({"client CPU per cycle, TLS / plain, N=5", "tls_over_plain_n5_client_cpu",
                 ratio(run, "lat.tls.n5.client_us_per_cycle", "lat.par.n5.client_us_per_cycle"), "~", 0,
                 "this process"});
  out.push_back({"redis-server CPU per command, TLS / plain, N=5", "tls_over_plain_n5_server_cpu",
                 ratio(run, "lat.tls.n5.server_us_per_cmd", "lat.par.n5.server_us_per_cmd"), "~", 0, "the masters"});
  out.push_back({"reconnect p50, TLS cache on / off", "reconnect_tls_cache_on_over_off_p50",
                 ratio(run, "rc.tls_session_cache_on.p50", "rc.tls_session_cache_off.p50"), "~", 0,
                 "< 1 only if resumption worked"});
  out.push_back({"server CPU per reconnect, TLS cache on / off", "reconnect_tls_cache_on_over_off_server_cpu",
                 ratio(run, "rc.tls_session_cache_on.server_us_per_drop", "rc.tls_session_cache_off.server_us_per_drop"),
                 "~", 0, "< 1 only if resumption worked"});
  out.push_back({"reconnect p50, TLS (cache on) / plain", "reconnect_tls_over_plain_p50",
                 ratio(run, "rc.tls_session_cache_on.p50", "rc.plain.p50"), "~", 0, ""});
  out.push_back({"fresh Client to grant p50, TLS / plain", "fresh_connect_tls_over_plain_p50",
                 ratio(run, "rc.fresh_tls.p50", "rc.fresh_plain.p50"), "~", 0, "full handshake"});
  for (const std::size_t n : run.config.throughput_ns) {
    out.push_back({"K=256: masters' CPU used / available, N=" + std::to_string(n),
                   "throughput_k256_share_of_masters_cpu_n" + std::to_string(n),
                   figure(run, "tp." + tag(n) + ".k256.share"), n == 5 ? ">=" : "~", 0.9,
                   n == 5 ? "" : "informational for N != 5"});
  }
  for (const std::size_t n : run.config.throughput_ns) {
    out.push_back({"K=256: masters' CPU / (theirs + idle), N=" + std::to_string(n),
                   "throughput_k256_share_of_what_others_left_n" + std::to_string(n),
                   figure(run, "tp." + tag(n) + ".k256.share_left"), "~", 0, "busy machine: what others left"});
  }
  for (const std::size_t n : run.config.throughput_ns) {
    const auto frac = ratio(run, "tp." + tag(n) + ".k256.cps", "ceil." + tag(n) + ".sets_per_s",
                            [n](double cps, double ceiling) { return cps * 2.0 * static_cast<double>(n) / ceiling; });
    out.push_back({"K=256 cycles x 2N / redis-benchmark -P16 SET/s, N=" + std::to_string(n),
                   "throughput_k256_over_redis_benchmark_n" + std::to_string(n), frac, "~", 0,
                   "not a ceiling: can exceed 1"});
  }
  out.push_back({"CPU per blocking acquire+release, N=5 (us)", "blocking_cycle_cpu_us",
                 figure(run, "cost.blocking.cpu_us"), "<=", 30, "one lock at a time"});
  out.push_back({"CPU per blocking cycle / (10 x redis-benchmark -c 1 CPU per request)", "blocking_cycle_over_c_floor_cpu",
                 ratio(run, "cost.blocking.cpu_us", "rb.floor.cpu_us", [](double cycle, double request) {
                   return cycle / (10.0 * request);
                 }),
                 "~", 0, "a cycle is 10 round trips at N=5; a C client's own loopback cost"});
  out.push_back({"blocking / async (1 in flight) CPU per cycle, N=5", "blocking_over_async1_cpu",
                 figure(run, "cost.blocking_over_async1.cpu"), "~", 0, "the thread hand-offs' cost"});
  out.push_back({"blocking / async (1 in flight) acquire p50, N=5", "blocking_over_async1_acquire_p50",
                 figure(run, "cost.blocking_over_async1.acquire_p50"), "<=", 1.10, "same run, alternating"});
  out.push_back({"heap allocations per async cycle, 64 in flight, N=5", "async64_allocs_per_cycle",
                 figure(run, "cost.async64.allocs"), "<=", 4, "every malloc in the process"});
  out.push_back({"CPU per async cycle, 64 in flight, N=5 (us)", "async64_cycle_cpu_us",
                 figure(run, "cost.async64.cpu_us"), "<=", 5, ""});
  out.push_back({"CPU per async cycle x64 / (10 x redis-benchmark -P16 CPU per request)",
                 "async64_cycle_over_c_floor_cpu",
                 ratio(run, "cost.async64.cpu_us", "ceil.n5.client_cpu_us",
                       [](double cycle, double request) { return cycle / (10.0 * request); }),
                 "~", 0, "a cycle is 10 commands at N=5; a pipelining C client's own cost"});
  for (const ZoneProfile& profile : zone_profiles()) {
    for (const std::size_t n : {std::size_t{3}, std::size_t{5}}) {
      const std::string base = "zone." + profile.id + ".";
      out.push_back({"quorum p50 / bound N=" + std::to_string(n) + ", " + profile.label,
                     "zones_" + profile.id + "_quorum_n" + std::to_string(n) + "_over_bound",
                     figure(run, base + "par." + tag(n) + ".over_bound"), "<=", 1.0, "bound 1.05 x rtt_q + 50 us"});
    }
  }
  for (const ZoneProfile& profile : zone_profiles()) {
    for (const std::size_t n : {std::size_t{3}, std::size_t{5}}) {
      const std::string base = "zone." + profile.id + ".";
      out.push_back({"sequential / quorum p50 N=" + std::to_string(n) + ", " + profile.label,
                     "zones_" + profile.id + "_sequential_over_quorum_n" + std::to_string(n),
                     figure(run, base + "seq." + tag(n) + ".over_par"), "~", 0, "how far behind"});
    }
  }
  return out;
}

// ------------------------------------------------------------------------------ table

std::string table(const Run& run, const json& meta) {
  const Config& c = run.config;
  std::string t;
  const auto line = [&t](const std::string& s) { t += s + "\n"; };
  line("redlock_compare: single node vs quorum vs the physical floor");
  line(format("%s, host %s, %d CPUs (%s), %s", meta["date_utc"].get<std::string>().c_str(),
              meta["host"].get<std::string>().c_str(), meta["cpus"].get<int>(),
              meta["cpu_model"].get<std::string>().c_str(), meta["kernel"].get<std::string>().c_str()));
  line(format("%s; %s mode, %d repetitions (figures: median [min..max] across repetitions); %s",
              run.redis_version.c_str(), c.quick ? "quick" : "full", c.reps,
              meta["pinned"].get<bool>() ? "pinned: client CPU 0, masters CPU 1" : "not pinned"));
  line(format("load average (1, 5, 15 min) at start %s, at end %s; run took %.0f s",
              meta["load_average_start"].get<std::string>().c_str(),
              meta["load_average_end"].get<std::string>().c_str(), meta["elapsed_s"].get<double>()));
  line("");

  // 1. latency
  line(format("== 1. Acquire latency, one client, one lock at a time, fresh resource each cycle (%d cycles per "
              "series and repetition)",
              c.latency_samples));
  line("   microseconds, acquire alone (blocking call, caller's clock); loop = the library's own send-to-quorum");
  line("   time from Result::masters; cycles/s = blocking acquire+release cycles per second");
  const std::size_t w0 = 34, w1 = 22, w2 = 9;
  line("   srv/cmd = redis-server CPU per command (µs, /proc/PID/schedstat), summed over the masters");
  line(pad("series", w0) + pad("p50", w1) + pad("p90", w2) + pad("p99", w2) + pad("max", w2) + pad("loop p50", w2) +
       pad("srv/cmd", w2) + "cycles/s");
  const auto latency_row = [&](const std::string& label, const std::string& key, bool loop) {
    if (!run.has(key + ".p50")) return;
    line(pad(label, w0) + pad(with_range(run.get(key + ".p50")), w1) + pad(num(run.get(key + ".p90").median), w2) +
         pad(num(run.get(key + ".p99").median), w2) + pad(num(run.get(key + ".max").median), w2) +
         pad(loop ? num(run.get(key + ".loop_p50").median) : "-", w2) +
         pad(run.has(key + ".server_us_per_cmd") ? num(run.get(key + ".server_us_per_cmd").median) : "-", w2) +
         with_range(run.get(key + ".cps")));
  };
  for (const std::size_t n : c.latency_ns) {
    latency_row(n == 1 ? "floor = single node N=1" : "quorum N=" + std::to_string(n) + " (parallel fan-out)",
                "lat.par." + tag(n), true);
  }
  for (const std::size_t n : c.tls_ns) {
    latency_row(n == 1 ? "TLS single node N=1" : "TLS quorum N=" + std::to_string(n), "lat.tls." + tag(n), true);
  }
  for (const std::size_t n : c.latency_ns) {
    if (n > 1) latency_row("sequential fan-out N=" + std::to_string(n), "lat.seq." + tag(n), false);
  }
  if (run.has("rb.floor.p50")) {
    line(pad("redis-benchmark -c 1 SET NX PX", w0) + pad(with_range(run.get("rb.floor.p50")), w1) + pad("-", w2) +
         pad(num(run.get("rb.floor.p99").median), w2) + pad(num(run.get("rb.floor.max").median), w2) + pad("-", w2) +
         pad("-", w2) + with_range(run.get("rb.floor.rps")) + " requests/s");
  }
  line("   floor: through the public API one SET NX PX round trip from our client code path IS the N=1 acquire,");
  line("   so 'floor' and 'N=1' are the same series. redis-benchmark is a C client with no thread hand-off.");
  line("   sequential fan-out: a model built from N single-master Clients on one event loop, each acquire");
  line("   sent from the previous one's callback (same code path and thread hand-offs as the Client).");
  line("");
  line("   when do the replies arrive? p50 of the k-th fastest reply, send to reply, as the library measured it");
  line("   (answered before the decision; the quorum-th is the decision). Evenly spaced = masters taking turns:");
  for (const std::size_t n : c.latency_ns) {
    std::string row = pad("   parallel N=" + std::to_string(n), w0);
    for (std::size_t k = 1; k <= n; ++k) {
      const std::string key = "lat.par." + tag(n) + ".reply" + std::to_string(k) + "_p50";
      if (!run.has(key)) break;
      row += (k > 1 ? ", " : "") + num(run.get(key).median);
      if (k == n / 2 + 1) row += " (quorum)";
    }
    line(row);
  }
  line("");

  // 1b. TLS beside plain
  if (!c.tls_ns.empty() && run.has("lat.tls." + tag(c.tls_ns.front()) + ".p50")) {
    line("== 1b. TLS (rediss://, verified: CA + IP in the certificate) beside plain, the same servers (each has a");
    line("   plain and a TLS port), after the handshake (the Client is connected before the first sample)");
    line("   microseconds; acquire alone and acquire+release (caller's clock); ratio = TLS / plain, per repetition");
    line("   client/cyc = this process's CPU per acquire+release cycle (caller + loop thread, getrusage);");
    line("   srv/cmd = redis-server CPU per command, summed over the masters (as in section 1)");
    line(pad("N  series", w0) + pad("acquire p50", w1) + pad("p99", w2) + pad("acq+rel p50", w1) + pad("p99", w2) +
         pad("client/cyc", w2 + 3) + pad("srv/cmd", w2) + "cycles/s");
    const auto median_or_dash = [&](const std::string& key) {
      return run.has(key) ? num(run.get(key).median) : std::string("-");
    };
    const auto r = [](const std::optional<Spread>& v) { return v ? with_range(*v) : std::string("n/a"); };
    const auto m = [](const std::optional<Spread>& v) { return v ? num(v->median) : std::string("n/a"); };
    for (const std::size_t n : c.tls_ns) {
      for (const auto& [label, key] : {std::pair<std::string, std::string>{"plain", "lat.par." + tag(n)},
                                       {"TLS", "lat.tls." + tag(n)}}) {
        if (!run.has(key + ".p50")) continue;
        line(pad(std::to_string(n) + "  " + label, w0) + pad(with_range(run.get(key + ".p50")), w1) +
             pad(num(run.get(key + ".p99").median), w2) + pad(with_range(run.get(key + ".cycle_p50")), w1) +
             pad(num(run.get(key + ".cycle_p99").median), w2) +
             pad(median_or_dash(key + ".client_us_per_cycle"), w2 + 3) +
             pad(median_or_dash(key + ".server_us_per_cmd"), w2) + with_range(run.get(key + ".cps")));
      }
      const std::string plain = "lat.par." + tag(n), tls = "lat.tls." + tag(n);
      line(pad(std::to_string(n) + "  TLS / plain", w0) + pad(r(ratio(run, tls + ".p50", plain + ".p50")), w1) +
           pad(m(ratio(run, tls + ".p99", plain + ".p99")), w2) +
           pad(r(ratio(run, tls + ".cycle_p50", plain + ".cycle_p50")), w1) +
           pad(m(ratio(run, tls + ".cycle_p99", plain + ".cycle_p99")), w2) +
           pad(m(ratio(run, tls + ".client_us_per_cycle", plain + ".client_us_per_cycle")), w2 + 3) +
           m(ratio(run, tls + ".server_us_per_cmd", plain + ".server_us_per_cmd")));
    }
    if (run.has("rb.floor.p50") && run.has("rb.tls.p50")) {
      line("   the same SET NX PX from a C client (redis-benchmark -c 1, one request at a time) to master 1's");
      line("   plain and TLS ports: what TLS costs one round trip with no library in it (client/cyc here is the");
      line("   benchmark's CPU per request; srv/cmd includes its one connect and handshake)");
      for (const auto& [label, key] :
           {std::pair<std::string, std::string>{"C plain", "rb.floor"}, {"C TLS", "rb.tls"}}) {
        line(pad("1  " + label, w0) + pad(with_range(run.get(key + ".p50")), w1) +
             pad(num(run.get(key + ".p99").median), w2) + pad("-", w1) + pad("-", w2) +
             pad(median_or_dash(key + ".cpu_us"), w2 + 3) + pad(median_or_dash(key + ".server_us_per_cmd"), w2) +
             with_range(run.get(key + ".rps")) + " requests/s");
      }
      line(pad("1  C TLS / C plain", w0) + pad(r(ratio(run, "rb.tls.p50", "rb.floor.p50")), w1) +
           pad(m(ratio(run, "rb.tls.p99", "rb.floor.p99")), w2) + pad("-", w1) + pad("-", w2) +
           pad(m(ratio(run, "rb.tls.cpu_us", "rb.floor.cpu_us")), w2 + 3) +
           pad(m(ratio(run, "rb.tls.server_us_per_cmd", "rb.floor.server_us_per_cmd")), w2) + "mean round trip " +
           r(ratio(run, "rb.floor.rps", "rb.tls.rps")));
      line("   (redis-benchmark's percentiles come from histogram buckets: near 23 and 31 µs there is none in");
      line("   between, so its p50 ratio reads 1.00 or 1.35; with one request at a time, requests/s plain / TLS");
      line("   is the ratio of the mean round trips)");
    }
    line("");
  }

  // 1c. zones
  if (run.has("zone." + zone_profiles().front().id + ".near.p50")) {
    line("== 1c. Single node vs quorum across zones: a delaying proxy (support/delay_proxy.h, in this process) in");
    line(format("   front of masters 1..5 adds the profile's round trip (half each way); %d acquires per series and",
                c.zone_samples));
    line("   repetition, blocking acquire then release, caller's clock, microseconds, median [min..max] over reps.");
    line("   N=1 near/far: through the nearest / farthest master; quorum: the Client over masters 1..N; sequential:");
    line("   the model of section 1 over the same proxies. bound = 1.05 x rtt_q + 50 µs, rtt_q = the quorum-th");
    line("   fastest of the N masters' own N=1 p50 (same repetition): the physical limit of a majority decision");
    for (const ZoneProfile& profile : zone_profiles()) {
      const std::string base = "zone." + profile.id + ".";
      if (!run.has(base + "near.p50")) continue;
      const auto master = [&](const char* which) { return static_cast<int>(run.get(base + which + ".master").median); };
      line("   profile: " + profile.label + " (masters 1..5)");
      line(pad("   series", w0) + pad("p50", w1) + pad("p99", w1) + "p50 vs bound / seq vs quorum");
      const auto row = [&](const std::string& label, const std::string& key, const std::string& extra) {
        if (!run.has(key + ".p50")) return;
        line(pad("   " + label, w0) + pad(with_range(run.get(key + ".p50")), w1) + pad(with_range(run.get(key + ".p99")), w1) +
             extra);
      };
      row(format("N=1 nearest (master %d)", master("near")), base + "near", "");
      row(format("N=1 farthest (master %d)", master("far")), base + "far", "");
      for (const std::size_t n : {std::size_t{3}, std::size_t{5}}) {
        const std::string q = base + "par." + tag(n);
        std::string extra;
        if (run.has(q + ".over_bound")) {
          extra = with_range(run.get(q + ".over_bound")) + " of bound " + num(run.get(base + "bound." + tag(n)).median) +
                  " (rtt_q " + num(run.get(base + "limit." + tag(n)).median) + ")";
        }
        row(format("quorum N=%zu (parallel)", n), q, extra);
      }
      for (const std::size_t n : {std::size_t{3}, std::size_t{5}}) {
        const std::string sq = base + "seq." + tag(n);
        row(format("sequential N=%zu", n), sq,
            run.has(sq + ".over_par") ? with_range(run.get(sq + ".over_par")) + " x the quorum's p50" : "");
      }
      std::string own = "   N=1 p50 through each master:";
      for (std::size_t i = 0; i < profile.rtt_ms.size(); ++i) {
        const std::string key = base + "n1.m" + std::to_string(i + 1) + ".p50";
        if (run.has(key)) own += format(" %zu: %s", i + 1, num(run.get(key).median).c_str());
      }
      line(own);
    }
    double failed = 0;
    for (const auto& [name, values] : run.figures) {
      if (name.rfind("zone.", 0) == 0 && name.size() > 7 && name.compare(name.size() - 7, 7, ".failed") == 0) {
        for (const double v : values) failed += v;
      }
    }
    line(format("   failed acquires in all zone series: %.0f", failed));
    line("");
  }

  // 2. throughput
  line("== 2. Throughput, K locks in flight from one client process (acquire_async -> release_async chains)");
  line(format("   acquire+release cycles/s over %.2f s windows, and (in brackets) the share of the masters' ceiling:",
              c.throughput_seconds));
  line("   the masters' CPU busy time in the same window (/proc/PID/task/*/schedstat) / the CPU time available to");
  line(meta["pinned"].get<bool>()
           ? "   them: pinned, every redis-server thread is on CPU 1, so 1 CPU x the window"
           : "   them: not pinned, min(N CPUs (one thread each), the machine's CPUs less this process's CPU) x window");
  line("   (a share cannot exceed 100%). ceiling = cycles/s / share = available CPU/s / (2N x server CPU per");
  line("   command in that window); redis-benchmark = cycles/s the masters' -P 16 SET rate would allow (SET/s / 2N,");
  line("   informational: plain pipelined SETs are cheaper than a lock cycle's SET NX PX + EVALSHA, not a limit)");
  const std::string top = "K=" + std::to_string(c.in_flight.back());
  std::string header = pad("N", 4);
  for (const std::size_t k : c.in_flight) header += pad("K=" + std::to_string(k), 18);
  header += pad("ceiling at " + top, 26) + "redis-benchmark";
  line(header);
  for (const std::size_t n : c.throughput_ns) {
    const std::string ck = "ceil." + tag(n) + ".sets_per_s";
    std::string row = pad(std::to_string(n), 4);
    for (const std::size_t k : c.in_flight) {
      const std::string key = "tp." + tag(n) + ".k" + std::to_string(k);
      std::string cell = run.has(key + ".cps") ? num(run.get(key + ".cps").median) : "-";
      if (run.has(key + ".share")) cell += format(" (%.0f%%)", run.get(key + ".share").median * 100.0);
      row += pad(cell, 18);
    }
    const std::string hi = "tp." + tag(n) + ".k" + std::to_string(c.in_flight.back()) + ".ceiling_cps";
    row += pad(run.has(hi) ? with_range(run.get(hi)) : "-", 26);
    row += run.has(ck) ? num(run.get(ck).median / (2.0 * static_cast<double>(n))) : "unavailable";
    line(row);
  }
  {
    const std::string hi = "tp." + tag(c.throughput_ns.back()) + ".k" + std::to_string(c.in_flight.back());
    if (run.has(hi + ".available_cpus")) {
      line(format("   at N=%zu %s: the masters ran %s CPUs of %s available and waited %s CPUs on run queues (runnable,",
                  c.throughput_ns.back(), top.c_str(), num(run.get(hi + ".masters_cpus").median).c_str(),
                  num(run.get(hi + ".available_cpus").median).c_str(),
                  num(run.get(hi + ".masters_wait_cpus").median).c_str()));
      line(format("   not running: behind each other or other processes); this process used %s CPUs. Masters and",
                  num(run.get(hi + ".client_cpus").median).c_str()));
      line("   client both well short of their CPUs = other processes had them (see the load average above)");
      if (run.has(hi + ".idle_cpus")) {
        line(format("   %s in the same windows (/proc/stat): idle %s CPUs, other processes %s CPUs; the masters' share of",
                    meta["pinned"].get<bool>() ? "CPU 1" : "all CPUs", num(run.get(hi + ".idle_cpus").median).c_str(),
                    num(run.get(hi + ".others_cpus").median).c_str()));
        line(format("   what other processes left them (masters / (masters + idle)): %s",
                    with_range(run.get(hi + ".share_left")).c_str()));
      }
    }
  }
  {
    double failed = 0;
    for (const auto& [name, values] : run.figures) {
      if (name.rfind("tp.", 0) == 0 && name.size() > 7 && name.compare(name.size() - 7, 7, ".failed") == 0) {
        for (const double v : values) failed += v;
      }
    }
    line(format("   failed cycles in all throughput windows: %.0f", failed));
    line("   CPU per unit of work: this client process per cycle / redis-server per command (µs), at K=1 and K=" +
         std::to_string(c.in_flight.back()) + ":");
    for (const std::size_t n : c.throughput_ns) {
      const std::string lo = "tp." + tag(n) + ".k" + std::to_string(c.in_flight.front());
      const std::string hi = "tp." + tag(n) + ".k" + std::to_string(c.in_flight.back());
      if (!run.has(lo + ".client_us_per_cycle") || !run.has(hi + ".client_us_per_cycle")) continue;
      std::string row = format("   N=%zu: client %s -> %s us/cycle", n,
                               num(run.get(lo + ".client_us_per_cycle").median).c_str(),
                               num(run.get(hi + ".client_us_per_cycle").median).c_str());
      if (run.has(lo + ".server_us_per_cmd") && run.has(hi + ".server_us_per_cmd")) {
        row += format(", server %s -> %s us/command", num(run.get(lo + ".server_us_per_cmd").median).c_str(),
                      num(run.get(hi + ".server_us_per_cmd").median).c_str());
      }
      line(row);
    }
  }
  line("");

  // 3. frozen
  if (run.has("frozen.healthy.p50")) {
    line(format("== 3. One master of 5 frozen (SIGSTOP), %d acquires per series and repetition", c.frozen_samples));
    line("   command_timeout 50 ms (default); stall_timeout 600 s, longer than the measurement, so the frozen master");
    line("   stays in the set instead of being dropped and reconnected after the default 3 s");
    line(pad("series", w0) + pad("p50", w1) + pad("p90", w2) + pad("p99", w1) + pad("max", w2) + "failed");
    for (const auto& [label, key] : {std::pair<std::string, std::string>{"all 5 healthy", "frozen.healthy"},
                                     {"1 of 5 frozen", "frozen.frozen"}}) {
      line(pad(label, w0) + pad(with_range(run.get(key + ".p50")), w1) + pad(num(run.get(key + ".p90").median), w2) +
           pad(with_range(run.get(key + ".p99")), w1) + pad(num(run.get(key + ".max").median), w2) +
           num(run.get(key + ".failed").median));
    }
    line(format("   the frozen master was 'pending' (decision taken without it) in %.0f%% of frozen acquires",
                run.get("frozen.frozen.pending_share").median * 100.0));
    line("");
  }

  // 3b. reconnect
  if (run.has("rc.plain.p50") || run.has("rc.fresh_tls.p50")) {
    line(format("== 3b. Reconnect, N=1, %d drops (or fresh connects) per series and repetition", c.reconnect_samples));
    line("   drop = CLIENT KILL TYPE normal on the server; time from its reply to the first granted acquire");
    line("   (reconnect_min = reconnect_max = 1 ms, command_timeout 1 s); 'failed/drop' = acquires that failed");
    line("   in between (sent on the dead connection). The library always offers its cached TLS session on a");
    line("   reconnect (no option turns that off); the server's tls-session-caching turns resumption off.");
    line("   fresh = a new Client each time (no cached session: full handshake), constructor start to the first");
    line("   grant (the acquire is sent as soon as the constructor returns and waits while it connects)");
    line("   srv/drop = redis-server CPU per drop (µs; accept, TLS handshake, the library's INFO/CONFIG GET, and");
    line("   one acquire+release before and after): a resumed TLS handshake saves the server its signature");
    line(pad("series", w0 + 10) + pad("p50 µs", w1) + pad("p90", w2) + pad("p99", w2) + pad("max", w2) +
         pad("failed/drop", 12) + "srv/drop");
    for (const auto& [label, key] :
         {std::pair<std::string, std::string>{"drop -> grant, plain", "rc.plain"},
          {"drop -> grant, TLS, server cache on", "rc.tls_session_cache_on"},
          {"drop -> grant, TLS, server cache off", "rc.tls_session_cache_off"},
          {"fresh Client -> grant, plain", "rc.fresh_plain"},
          {"fresh Client -> grant, TLS", "rc.fresh_tls"}}) {
      if (!run.has(key + ".p50")) continue;
      const bool drop = key.find("fresh") == std::string::npos;
      line(pad(label, w0 + 10) + pad(with_range(run.get(key + ".p50")), w1) + pad(num(run.get(key + ".p90").median), w2) +
           pad(num(run.get(key + ".p99").median), w2) + pad(num(run.get(key + ".max").median), w2) +
           pad(drop ? num(run.get(key + ".failed_attempts").median) : "-", 12) +
           (run.has(key + ".server_us_per_drop") ? with_range(run.get(key + ".server_us_per_drop")) : "-"));
    }
    if (run.has("rc.fresh_tls.ctor_p50")) {
      line(format("   Client constructor alone, p50: plain %s µs, TLS %s µs (TLS builds the OpenSSL context, loads the CA)",
                  num(run.get("rc.fresh_plain.ctor_p50").median).c_str(),
                  num(run.get("rc.fresh_tls.ctor_p50").median).c_str()));
    }
    double no_grant = 0;
    for (const char* key : {"rc.plain.failed", "rc.tls_session_cache_on.failed", "rc.tls_session_cache_off.failed",
                            "rc.fresh_plain.failed", "rc.fresh_tls.failed"}) {
      const auto it = run.figures.find(key);
      if (it != run.figures.end()) {
        for (const double v : it->second) no_grant += v;
      }
    }
    line(format("   drops without a grant within 5 s (or fresh Clients whose first acquire failed), all series: %.0f",
                no_grant));
    line("");
  }

  // 4. client cost
  if (run.has("cost.blocking.cpu_us")) {
    line("== 4. Client cost per acquire+release cycle, N=5 (this process: caller + loop thread)");
    line("   CPU = getrusage(RUSAGE_SELF) user+sys; allocations = heap allocations, every malloc in the process");
    line("   (operator new, hiredis, libuv and the bench alike: bench/alloc_counter.h); redis-server CPU not included");
    line("   switches = context switches of the process (each a sleep or a preemption); r/w calls = read- and");
    line("   write-family system calls (/proc/self/io: epoll_wait and futex are not among them)");
    line(pad("mode", w0) + pad("CPU us/cycle", w1) + pad("of which system", 17) + pad("heap allocs/cycle", w1) +
         pad("bytes/cycle", 13) + pad("switches", 10) + pad("r/w calls", 11) + "acquire p50 us");
    for (const auto& [label, key] : {std::pair<std::string, std::string>{"blocking, 1 in flight", "cost.blocking"},
                                     {"async, 1 in flight", "cost.async1"},
                                     {"async, 64 in flight", "cost.async64"}}) {
      if (!run.has(key + ".cpu_us")) continue;
      line(pad(label, w0) + pad(with_range(run.get(key + ".cpu_us")), w1) + pad(num(run.get(key + ".sys_us").median), 17) +
           pad(with_range(run.get(key + ".allocs")), w1) + pad(num(run.get(key + ".bytes").median), 13) +
           pad(num(run.get(key + ".switches").median), 10) + pad(num(run.get(key + ".rw_calls").median), 11) +
           (run.has(key + ".acquire_p50") ? with_range(run.get(key + ".acquire_p50")) : std::string("-")));
    }
    line("   blocking and async x1 alternate in halves of the same cycles; async x1 calls from the callbacks");
    line("");
  }

  // 5. holding locks
  if (run.has("hold.count")) {
    const auto kib = [&](const char* key) { return run.get(key).median / 1024.0; };
    line(format("== 5. Holding %.0f locks at once, N=5, ttl 60 s (acquired 512 in flight at a time; once per run,",
                run.get("hold.count").median));
    line("   first, before the other phases; VmHWM reset just before it, ru_maxrss covers the process so far)");
    line(format("   RSS before %.1f MiB, with the locks held %.1f MiB (%.0f bytes per held lock, of which %.0f are the",
                kib("hold.rss_before_kib"), kib("hold.rss_held_kib"), run.get("hold.bytes_per_lock").median,
                run.get("hold.lock_value_bytes").median));
    line(format("   caller's Lock values); peak RSS while acquiring, holding and releasing %.1f MiB (max of VmHWM %.1f,",
                kib("hold.peak_kib"), kib("hold.hwm_kib")));
    line(format("   ru_maxrss %.1f and the reading while held: the kernel updates its high-water mark lazily)",
                kib("hold.maxrss_kib")));
    line(format("   after releasing all and destroying the Client %.1f MiB", kib("hold.rss_after_kib")));
    line(format("   acquire %.0f locks/s, release %.0f locks/s with 512 in flight", run.get("hold.acquire_per_s").median,
                run.get("hold.release_per_s").median));
    line("");
  }

  // 6. targets
  line("== 6. Targets (informational: printed, never asserted; the exit code does not depend on them)");
  line(pad("figure", 50) + pad("value [min..max]", 24) + pad("target", 10) + "verdict");
  for (const auto& tg : targets(run)) {
    std::string target = tg.op == "~" ? (tg.limit > 0 ? "~" + num(tg.limit) : "") : tg.op + " " + num(tg.limit);
    std::string v = verdict(tg);
    if (!tg.comment.empty()) v += " (" + tg.comment + ")";
    line(pad(tg.name, 50) + pad(tg.value ? with_range(*tg.value) : "n/a", 24) + pad(target, 10) + v);
  }
  line("   ratios are taken per repetition (both figures from the same repetition), then the median");
  if (!run.notes.empty()) {
    line("");
    line("notes:");
    for (const auto& n : run.notes) line("  - " + n);
  }
  return t;
}

// ------------------------------------------------------------------------------ plots

std::string slug(const std::string& label) {
  std::string out;
  for (const char ch : label) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')) {
      out += ch;
    } else if (ch >= 'A' && ch <= 'Z') {
      out += static_cast<char>(ch - 'A' + 'a');
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

// latency fraction_at_or_below fraction_at_or_above, at most ~2000 points plus the tail.
void write_cdf(const std::filesystem::path& path, std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  std::ofstream out(path);
  out << "# latency_us  fraction_le  fraction_ge\n";
  const std::size_t s = samples.size();
  const std::size_t step = std::max<std::size_t>(1, s / 2000);
  for (std::size_t i = 0; i < s; ++i) {
    // Every sample of the top 1 %, a thinned-out selection below it.
    if (i % step != 0 && i + 1 != s && i < s - s / 100) continue;
    out << samples[i] << ' ' << static_cast<double>(i + 1) / static_cast<double>(s) << ' '
        << static_cast<double>(s - i) / static_cast<double>(s) << '\n';
  }
}

std::string quoted(const std::filesystem::path& p) { return "'" + p.string() + "'"; }

struct Series {
  std::string label;
  std::filesystem::path file;
  int color;
  int dash;
};

// The series of the zones plot: figure-name part and title, in plotting order.
const std::vector<std::pair<std::string, std::string>>& zone_series() {
  static const std::vector<std::pair<std::string, std::string>> series = {
      {"near", "N=1 nearest"}, {"far", "N=1 farthest"}, {"par.n3", "quorum N=3"},
      {"par.n5", "quorum N=5"}, {"seq.n3", "sequential N=3"}, {"seq.n5", "sequential N=5"}};
  return series;
}

std::string gnuplot_script(const Run& run, const std::filesystem::path& dir, const std::string& terminal,
                           const std::string& ext, std::vector<std::string>& outputs) {
  const Config& c = run.config;
  std::string s;
  s += "# Generated by redlock_compare; run with: gnuplot plots.gp\n";
  s += "set terminal " + terminal + "\n";
  s += "set grid\nset key bottom right\nset style data lines\n";
  static const char* kColors[] = {"#000000", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b",
                                  "#17becf"};

  std::vector<Series> latency;
  int color = 0;
  for (const std::size_t n : c.latency_ns) {
    const std::string label = n == 1 ? "floor: single node N=1" : "quorum N=" + std::to_string(n);
    if (run.cdf.count(label) != 0) latency.push_back({label, dir / ("cdf_" + slug(label) + ".dat"), color, 1});
    ++color;
  }
  color = 1;
  for (const std::size_t n : c.latency_ns) {
    if (n == 1) continue;
    const std::string label = "sequential N=" + std::to_string(n);
    if (run.cdf.count(label) != 0) latency.push_back({label, dir / ("cdf_" + slug(label) + ".dat"), color, 2});
    ++color;
  }
  for (const std::size_t n : c.tls_ns) {  // dotted, in the colour of the same N's plain series
    const std::string label = "TLS N=" + std::to_string(n);
    const auto at = std::find(c.latency_ns.begin(), c.latency_ns.end(), n);
    const int same_n = static_cast<int>(at - c.latency_ns.begin());
    if (run.cdf.count(label) != 0) latency.push_back({label, dir / ("cdf_" + slug(label) + ".dat"), same_n, 3});
  }
  const auto plot_cdf = [&](const std::vector<Series>& series, const std::string& name, const std::string& title,
                            bool tail) {
    const auto file = dir / (name + "." + ext);
    outputs.push_back(file.string());
    s += "\nset output " + quoted(file) + "\n";
    s += "set title '" + title + "'\n";
    s += "set xlabel 'acquire latency, microseconds (log scale)'\nset logscale x\n";
    if (tail) {
      s += "set ylabel 'fraction of acquires at or above (log scale)'\nset logscale y\nset key top right\n";
    } else {
      s += "set ylabel 'fraction of acquires at or below'\nunset logscale y\nset yrange [0:1]\nset key bottom right\n";
    }
    s += "plot ";
    for (std::size_t i = 0; i < series.size(); ++i) {
      const auto& x = series[i];
      s += (i ? ", \\\n     " : "") + quoted(x.file) + " using 1:" + (tail ? "3" : "2") + " title '" + x.label +
           "' lw 2 dt " + std::to_string(x.dash) + " lc rgb '" + kColors[x.color % 8] + "'";
    }
    s += "\nset autoscale y\nunset yrange\n";
  };
  if (!latency.empty()) {
    plot_cdf(latency, "latency_cdf",
             "Acquire latency CDF: single node vs quorum (parallel, solid) vs sequential fan-out (dashed) vs TLS (dotted)",
             false);
    plot_cdf(latency, "latency_tail", "Acquire latency tail (1 - CDF): single node vs quorum vs sequential", true);
  }
  std::vector<Series> frozen;
  for (const auto& [label, col] : {std::pair<std::string, int>{"frozen: all healthy", 0}, {"frozen: 1 of 5 frozen", 3}}) {
    if (run.cdf.count(label) != 0) frozen.push_back({label, dir / ("cdf_" + slug(label) + ".dat"), col, 1});
  }
  if (!frozen.empty()) plot_cdf(frozen, "frozen_cdf", "Acquire latency CDF, N=5: all healthy vs one master frozen", false);

  // Throughput vs concurrency, with each N's ceiling expressed in cycles/s (ceiling / 2N).
  const auto file = dir / ("throughput." + ext);
  outputs.push_back(file.string());
  s += "\nset output " + quoted(file) + "\n";
  s += "set title \"Throughput vs locks in flight (one client); dashed: the masters' CPU ceiling at that K; dotted: "
       "redis-benchmark -P16 SET/s / 2N (informational)\"\n";
  s += "set xlabel 'locks in flight K (log scale)'\nset ylabel 'acquire+release cycles per second'\n";
  s += "set logscale x 2\nunset logscale y\nset yrange [0:*]\nset key top right box opaque\n";
  s += "set xrange [" + std::to_string(c.in_flight.front()) + "/1.4:" + std::to_string(c.in_flight.back()) +
       "*1.4]\nset xtics (";
  for (std::size_t i = 0; i < c.in_flight.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(c.in_flight[i]);
  }
  s += ")\nplot ";
  bool first = true;
  for (const std::size_t n : c.throughput_ns) {
    const auto data = dir / ("throughput_" + tag(n) + ".dat");
    const std::string rgb = kColors[(n == 1 ? 0 : (n - 1) / 2) % 8];
    s += (first ? "" : ", \\\n     ") + quoted(data) + " using 1:2:3:4 with yerrorlines lw 2 lc rgb '" + rgb +
         "' title 'N=" + std::to_string(n) + "'";
    first = false;
    if (run.has("tp." + tag(n) + ".k" + std::to_string(c.in_flight.back()) + ".ceiling_cps")) {
      s += ", \\\n     " + quoted(data) + " using 1:5 with lines dt 2 lw 1 lc rgb '" + rgb + "' title 'N=" +
           std::to_string(n) + " CPU ceiling'";
    }
    if (run.has("ceil." + tag(n) + ".sets_per_s")) {
      s += ", \\\n     " + quoted(data) + " using 1:6 with lines dt 3 lw 1 lc rgb '" + rgb + "' title 'N=" +
           std::to_string(n) + " redis-benchmark'";
    }
  }
  s += "\n";

  // Zones: acquire p50 per profile, one bar per series, error bars min..max of the repetitions.
  if (run.has("zone." + zone_profiles().front().id + ".near.p50")) {
    const auto zones = dir / ("zones." + ext);
    outputs.push_back(zones.string());
    const auto data = dir / "zones.dat";
    s += "\nset output " + quoted(zones) + "\n";
    s += "set title 'Single node vs quorum across zones: acquire p50 per round-trip profile (bars: median, "
         "error bars: min..max of the repetitions)'\n";
    s += "set xlabel 'round trips added in front of masters 1..5'\nset ylabel 'acquire p50, ms (log scale)'\n";
    s += "unset logscale x\nset autoscale x\nset xtics auto\nset logscale y\nset yrange [0.1:*]\n";
    s += "set key top left box opaque\nset style data histogram\nset style histogram errorbars gap 2 lw 1\n";
    s += "set style fill solid 0.7 border -1\nset boxwidth 0.9\nplot ";
    int column = 2;
    int bar = 0;
    for (const auto& [key, title] : zone_series()) {
      s += (column == 2 ? "" : ", \\\n     ") + quoted(data) + " using " + std::to_string(column) + ":" +
           std::to_string(column + 1) + ":" + std::to_string(column + 2) + (column == 2 ? ":xtic(1)" : "") +
           " title '" + title + "' lc rgb '" + kColors[bar % 8] + "'";
      column += 3;
      ++bar;
    }
    s += "\nset style data lines\nset style fill empty\nunset logscale y\nset autoscale y\n";
  }
  return s;
}

void write_plot_data(const Run& run, const std::filesystem::path& dir) {
  for (const auto& [label, samples] : run.cdf) write_cdf(dir / ("cdf_" + slug(label) + ".dat"), samples);
  if (run.has("zone." + zone_profiles().front().id + ".near.p50")) {
    std::ofstream out(dir / "zones.dat");
    out << "# profile, then per series (";
    for (const auto& [key, title] : zone_series()) out << title << "; ";
    out << ") acquire p50 in ms: median min max over the repetitions\n";
    for (const ZoneProfile& profile : zone_profiles()) {
      out << '"' << profile.label << '"';
      for (const auto& [key, title] : zone_series()) {
        const Spread p = run.get("zone." + profile.id + "." + key + ".p50");
        out << ' ' << p.median / 1000.0 << ' ' << p.min / 1000.0 << ' ' << p.max / 1000.0;
      }
      out << '\n';
    }
  }
  for (const std::size_t n : run.config.throughput_ns) {
    std::ofstream out(dir / ("throughput_" + tag(n) + ".dat"));
    out << "# in_flight  cycles_per_s_median  min  max  masters_cpu_ceiling_cycles_per_s  "
           "redis_benchmark_sets_per_s_over_2n\n";
    const Spread ceiling = run.get("ceil." + tag(n) + ".sets_per_s");
    for (const std::size_t k : run.config.in_flight) {
      const std::string key = "tp." + tag(n) + ".k" + std::to_string(k);
      const Spread s = run.get(key + ".cps");
      out << k << ' ' << s.median << ' ' << s.min << ' ' << s.max << ' ' << run.get(key + ".ceiling_cps").median << ' '
          << ceiling.median / (2.0 * static_cast<double>(n)) << '\n';
    }
  }
}

void make_plots(Run& run, const std::filesystem::path& dir) {
  write_plot_data(run, dir);
  const std::string gnuplot = find_executable("gnuplot");
  struct Choice {
    const char* terminal;
    const char* ext;
  };
  const Choice choices[] = {{"pngcairo size 1100,700 font 'sans,10'", "png"},
                            {"png size 1100,700", "png"},
                            {"svg size 1100,700", "svg"}};
  for (const auto& choice : choices) {
    std::vector<std::string> outputs;
    const std::string script = gnuplot_script(run, dir, choice.terminal, choice.ext, outputs);
    {
      std::ofstream out(dir / "plots.gp");
      out << script;
    }
    if (gnuplot.empty() || !run.config.plots) break;
    const auto [output, ok] = run_capture({gnuplot, (dir / "plots.gp").string()});
    if (ok) {
      for (const auto& o : outputs) std::fprintf(stderr, "  plot: %s\n", o.c_str());
      return;
    }
  }
  if (!run.config.plots) {
    run.note("plots skipped (--no-plots); data files and plots.gp are in the output folder");
  } else if (gnuplot.empty()) {
    run.note("gnuplot not installed: plots skipped (apt install gnuplot-nox); run 'gnuplot plots.gp' later");
  } else {
    run.note("gnuplot failed with pngcairo, png and svg terminals; see plots.gp");
  }
}

}  // namespace

void write_report(Run& run, const json& meta) {
  const std::filesystem::path dir = std::filesystem::absolute(run.config.out);
  std::filesystem::create_directories(dir);
  make_plots(run, dir);  // first: it may add notes

  const std::string text = table(run, meta);
  {
    std::ofstream out(dir / "table.txt");
    out << text;
  }
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);

  std::ofstream out(dir / "results.jsonl");
  json m = meta;
  m["notes"] = run.notes;
  out << m.dump() << '\n';
  for (const auto& record : run.records) out << record.dump() << '\n';
  for (const auto& [name, values] : run.figures) {
    const Spread s = spread(values);
    out << json{{"type", "summary"}, {"figure", name}, {"median", s.median}, {"min", s.min}, {"max", s.max},
                {"reps", s.reps}, {"values", values}}
               .dump()
        << '\n';
  }
  for (const auto& tg : targets(run)) {
    json j = {{"type", "target"}, {"name", tg.key}, {"description", tg.name}, {"verdict", verdict(tg)}};
    if (tg.value) j.update({{"median", tg.value->median}, {"min", tg.value->min}, {"max", tg.value->max}});
    if (tg.op != "~") j.update({{"op", tg.op}, {"limit", tg.limit}});
    if (tg.op == "~" && tg.limit > 0) j["expected"] = tg.limit;
    out << j.dump() << '\n';
  }
  std::fprintf(stderr, "  wrote %s, %s\n", (dir / "results.jsonl").c_str(), (dir / "table.txt").c_str());
}

}  // namespace bench

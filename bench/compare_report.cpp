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
  for (const std::size_t n : run.config.throughput_ns) {
    const auto frac = ratio(run, "tp." + tag(n) + ".k256.cps", "ceil." + tag(n) + ".sets_per_s",
                            [n](double cps, double ceiling) { return cps * 2.0 * static_cast<double>(n) / ceiling; });
    out.push_back({"throughput K=256 / ceiling, N=" + std::to_string(n), "throughput_k256_over_ceiling_n" +
                                                                             std::to_string(n),
                   frac, n == 5 ? ">=" : "~", 0.5, n == 5 ? "" : "informational for N != 5"});
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

  // 2. throughput
  line("== 2. Throughput, K locks in flight from one client process (acquire_async -> release_async chains)");
  line(format("   acquire+release cycles/s over %.2f s windows, and the share of the masters' ceiling measured in this "
              "run:",
              c.throughput_seconds));
  line("   ceiling = pipelined SETs/s the same N masters took at once (redis-benchmark -P 16 -c 4 per master);");
  line("   a cycle is 2 commands per master (SET NX PX + EVALSHA release), so share = cycles/s x 2N / ceiling");
  std::string header = pad("N", 4) + pad("ceiling SET/s", 26);
  for (const std::size_t k : c.in_flight) header += pad("K=" + std::to_string(k), 22);
  line(header);
  for (const std::size_t n : c.throughput_ns) {
    const std::string ck = "ceil." + tag(n) + ".sets_per_s";
    std::string row = pad(std::to_string(n), 4) + pad(run.has(ck) ? with_range(run.get(ck)) : "unavailable", 26);
    for (const std::size_t k : c.in_flight) {
      const std::string key = "tp." + tag(n) + ".k" + std::to_string(k) + ".cps";
      std::string cell = run.has(key) ? num(run.get(key).median) : "-";
      const auto share = ratio(run, key, ck, [n](double cps, double ceiling) {
        return cps * 2.0 * static_cast<double>(n) / ceiling;
      });
      if (share) cell += format(" (%.0f%%)", share->median * 100.0);
      row += pad(cell, 22);
    }
    line(row);
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

  // 4. client cost
  if (run.has("cost.blocking.cpu_us")) {
    line("== 4. Client cost per acquire+release cycle, N=5 (this process: caller + loop thread)");
    line("   CPU = getrusage(RUSAGE_SELF) user+sys; allocations = global operator new calls (malloc inside hiredis");
    line("   and libuv is not counted); redis-server CPU is not included");
    line(pad("mode", w0) + pad("CPU us/cycle", w1) + pad("of which system", 17) + pad("operator new/cycle", w1) +
         "bytes/cycle");
    for (const auto& [label, key] : {std::pair<std::string, std::string>{"blocking, 1 in flight", "cost.blocking"},
                                     {"async, 64 in flight", "cost.async64"}}) {
      line(pad(label, w0) + pad(with_range(run.get(key + ".cpu_us")), w1) + pad(num(run.get(key + ".sys_us").median), 17) +
           pad(with_range(run.get(key + ".allocs")), w1) + num(run.get(key + ".bytes").median));
    }
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
    plot_cdf(latency, "latency_cdf", "Acquire latency CDF: single node vs quorum (parallel, solid) vs sequential fan-out (dashed)",
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
  s += "set title 'Throughput vs locks in flight (one client); dashed: the masters ceiling in cycles/s (SET/s / 2N)'\n";
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
    if (run.has("ceil." + tag(n) + ".sets_per_s")) {
      s += ", \\\n     " + quoted(data) + " using 1:5 with lines dt 2 lw 1 lc rgb '" + rgb + "' title 'N=" +
           std::to_string(n) + " ceiling'";
    }
  }
  s += "\n";
  return s;
}

void write_plot_data(const Run& run, const std::filesystem::path& dir) {
  for (const auto& [label, samples] : run.cdf) write_cdf(dir / ("cdf_" + slug(label) + ".dat"), samples);
  for (const std::size_t n : run.config.throughput_ns) {
    std::ofstream out(dir / ("throughput_" + tag(n) + ".dat"));
    out << "# in_flight  cycles_per_s_median  min  max  ceiling_in_cycles_per_s\n";
    const Spread ceiling = run.get("ceil." + tag(n) + ".sets_per_s");
    for (const std::size_t k : run.config.in_flight) {
      const Spread s = run.get("tp." + tag(n) + ".k" + std::to_string(k) + ".cps");
      out << k << ' ' << s.median << ' ' << s.min << ' ' << s.max << ' '
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

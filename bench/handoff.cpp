// SPDX-License-Identifier: Apache-2.0
// redlock_handoff — how fast does a released lock reach a waiter in another process, and who
// gets it? (issue 11)
//
// Starts N redis-servers, then for each mode W worker processes (this binary, exec'd again
// with --worker) contend for ONE resource: acquire (waiting), hold it `hold` (default 1 ms),
// stamp CLOCK_MONOTONIC, release, and at once try again, until a common end time. Every
// worker reports its grant and release-start stamps (CLOCK_MONOTONIC is one clock for all
// processes of the machine); this process merges them in grant order and reports:
//   handoff     = next holder's grant - previous holder's release start, when the next
//                 holder is another process (p50/p99), and the same for a re-win by the
//                 releaser itself;
//   grants/s    = all grants in the window / window;
//   spread      = each process's share of the grants, min and max as a multiple of even
//                 (1/W), and how often the releaser won again;
//   wait        = an acquire call's start to its grant, every grant.
// Modes: polling (ClientOptions::release_notifications = false) at the default retry delay
// (200 ms +- 100 ms) and at 10 ms (+- 5 ms); pub/sub wake-ups (release_notifications =
// true), with fairness (ClientOptions::yield_to_waiters) off and on. The pub/sub modes need
// those options in redlock/options.h; a build without them reports the modes unavailable.
// Figures are printed, never asserted. The exit code is 1 only when the orchestration failed
// or the lock was not exclusive (a grant stamped before the previous holder's release start).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "redlock/redlock.h"
#include "support/redis_server.h"
#include "sys.h"

extern char** environ;

namespace bench {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::ordered_json;
using redlock::Milliseconds;

constexpr const char* kResource = "handoff";

std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until_ns(std::int64_t when) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(when / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(when % 1'000'000'000);
  while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

// ---- the options being built in branch h-waiting (lease-api.md), set when this build has them

template <typename Options>
bool set_release_notifications(Options& options, [[maybe_unused]] bool on) {
  if constexpr (requires { options.release_notifications = on; }) {
    options.release_notifications = on;
    return true;
  } else {
    return false;
  }
}

template <typename Options>
bool set_yield_to_waiters(Options& options, [[maybe_unused]] Milliseconds yield) {
  if constexpr (requires { options.yield_to_waiters = yield; }) {
    options.yield_to_waiters = yield;
    return true;
  } else {
    return false;
  }
}

bool have_wakeups() {
  redlock::ClientOptions options;
  return set_release_notifications(options, true);
}
bool have_fairness() {
  redlock::ClientOptions options;
  return set_yield_to_waiters(options, Milliseconds{1});
}

struct Mode {
  std::string name;
  bool notifications = false;
  Milliseconds retry_delay{200};
  Milliseconds retry_jitter{100};
  Milliseconds yield{0};
  std::string describe() const {
    std::string out = notifications ? "pub/sub wake-ups" : "polling";
    out += ", retry_delay " + std::to_string(retry_delay.count()) + " +- " + std::to_string(retry_jitter.count()) +
           " ms";
    out += yield.count() > 0 ? ", yield_to_waiters " + std::to_string(yield.count()) + " ms" : ", fairness off";
    return out;
  }
};

std::optional<Mode> mode_named(const std::string& name, Milliseconds yield) {
  if (name == "poll-200") return Mode{name, false, 200ms, 100ms, 0ms};
  if (name == "poll-10") return Mode{name, false, 10ms, 5ms, 0ms};
  if (name == "pubsub") return Mode{name, true, 200ms, 100ms, 0ms};
  if (name == "pubsub-fair") return Mode{name, true, 200ms, 100ms, yield};
  return std::nullopt;
}

// ----------------------------------------------------------------------------- worker

struct WorkerArgs {
  int id = 0;
  std::vector<std::string> uris;
  Mode mode;
  std::int64_t hold_us = 1000;
};

// Protocol on the pipes: the worker writes "ready\n" once connected; the parent writes
// "START_NS END_NS\n"; the worker contends until END_NS and writes one line per event
// ("A call_ns grant_ns release_ns", "F call_ns fail_ns outcome"), then "done\n".
int worker_main(const WorkerArgs& args) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  redlock::ClientOptions options;
  options.masters = args.uris;
  options.key_prefix = "handoff:";
  options.ttl = 10s;
  options.restart_guard = false;  // the masters were started seconds ago (as in redlock_compare)
  options.retry_delay = args.mode.retry_delay;
  options.retry_jitter = args.mode.retry_jitter;
  options.on_warning = [](const std::string&) {};
  const bool notifications_set = set_release_notifications(options, args.mode.notifications);
  if (args.mode.notifications && !notifications_set) {
    std::fprintf(stderr, "worker %d: this build has no ClientOptions::release_notifications\n", args.id);
    return 3;
  }
  if (args.mode.yield.count() > 0 && !set_yield_to_waiters(options, args.mode.yield)) {
    std::fprintf(stderr, "worker %d: this build has no ClientOptions::yield_to_waiters\n", args.id);
    return 3;
  }
  redlock::Client client(std::move(options));
  if (!client.wait_connected(args.uris.size(), 10s)) {
    std::fprintf(stderr, "worker %d: not connected to all masters within 10 s\n", args.id);
    return 4;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  long long start_ns = 0, end_ns = 0;
  if (std::scanf("%lld %lld", &start_ns, &end_ns) != 2) return 5;
  sleep_until_ns(start_ns);

  struct Event {
    char kind;
    std::int64_t call, grant, release;
    std::string outcome;
  };
  std::vector<Event> events;
  events.reserve(100'000);
  const std::int64_t hold_ns = args.hold_us * 1000;
  while (true) {
    const std::int64_t call = mono_ns();
    if (call >= end_ns) break;
    redlock::AcquireOptions acquire;
    acquire.retry_count = -1;  // keep trying until `wait` runs out
    acquire.wait = std::chrono::duration_cast<Milliseconds>(std::chrono::nanoseconds(end_ns - call)) + 1ms;
    redlock::Result result = client.acquire(kResource, acquire);
    const std::int64_t granted = mono_ns();
    if (!result) {
      events.push_back({'F', call, granted, 0, std::string(redlock::to_string(result.outcome))});
      continue;
    }
    sleep_until_ns(granted + hold_ns);
    const std::int64_t release = mono_ns();  // stamped before the release is sent
    client.release(*result.lock);
    events.push_back({'A', call, granted, release, {}});
  }
  for (const auto& e : events) {
    if (e.kind == 'A') {
      std::printf("A %lld %lld %lld\n", static_cast<long long>(e.call), static_cast<long long>(e.grant),
                  static_cast<long long>(e.release));
    } else {
      std::printf("F %lld %lld %s\n", static_cast<long long>(e.call), static_cast<long long>(e.grant),
                  e.outcome.c_str());
    }
  }
  std::printf("done\n");
  std::fflush(stdout);
  return 0;
}

// ----------------------------------------------------------------------------- parent

struct Worker {
  pid_t pid = -1;
  FILE* to = nullptr;    // its stdin
  FILE* from = nullptr;  // its stdout
};

Worker spawn_worker(const std::vector<std::string>& argv) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    throw std::runtime_error("pipe2 failed");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
  }
  return Worker{pid, ::fdopen(in[1], "w"), ::fdopen(out[0], "r")};
}

// Stops a worker by its PID (SIGKILL unless it already exited) and reaps it. Returns its
// exit code, or -1 when it had to be killed or died of a signal.
int stop_worker(Worker& w, bool kill_it) {
  if (w.to != nullptr) std::fclose(std::exchange(w.to, nullptr));
  if (w.from != nullptr) std::fclose(std::exchange(w.from, nullptr));
  if (w.pid <= 0) return -1;
  if (kill_it) ::kill(w.pid, SIGKILL);
  int status = 0;
  while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
  }
  w.pid = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool read_line(FILE* from, std::string& line) {
  line.clear();
  char buffer[256];
  while (std::fgets(buffer, sizeof(buffer), from) != nullptr) {
    line += buffer;
    if (!line.empty() && line.back() == '\n') {
      line.pop_back();
      return true;
    }
  }
  return !line.empty();
}

struct Hold {
  int worker;
  std::int64_t call, grant, release;
};

struct ModeResult {
  Mode mode;
  bool ran = false;
  std::string skipped;  // why not
  std::vector<Hold> holds;
  std::map<std::string, int> failures;  // outcome -> count (acquires that ran out of `wait`)
  int overlaps = 0;                     // a grant stamped before the previous release start
  double window_s = 0;
};

struct Config {
  std::size_t masters = 3;
  int workers = 4;
  std::int64_t hold_us = 1000;
  double seconds = 5;
  int reps = 1;
  Milliseconds yield{5};
  std::vector<std::string> modes = {"poll-200", "poll-10", "pubsub", "pubsub-fair"};
  std::string out = "handoff-results";
  std::vector<std::string> argv;
};

ModeResult run_mode(const Config& config, const std::string& self, const std::vector<std::string>& uris,
                    const Mode& mode) {
  ModeResult result;
  result.mode = mode;
  if (mode.notifications && !have_wakeups()) {
    result.skipped = "ClientOptions::release_notifications is not in this build (branch h-waiting not merged)";
    return result;
  }
  if (mode.yield.count() > 0 && !have_fairness()) {
    result.skipped = "ClientOptions::yield_to_waiters is not in this build (branch h-waiting not merged)";
    return result;
  }
  std::string joined;
  for (const auto& u : uris) joined += (joined.empty() ? "" : ",") + u;
  std::vector<Worker> workers;
  const auto stop_all = [&](bool kill_them) {
    for (auto& w : workers) stop_worker(w, kill_them);
  };
  try {
    for (int i = 0; i < config.workers; ++i) {
      workers.push_back(spawn_worker({self, "--worker", std::to_string(i), "--uris", joined, "--mode", mode.name,
                                      "--hold-us", std::to_string(config.hold_us), "--yield-ms",
                                      std::to_string(mode.yield.count())}));
    }
    std::string line;
    for (auto& w : workers) {
      if (!read_line(w.from, line) || line != "ready") throw std::runtime_error("a worker did not get ready");
    }
    // Every worker starts at the same moment, a little after the last one is ready.
    const std::int64_t start = mono_ns() + 50'000'000;
    const auto window_ns = static_cast<std::int64_t>(config.seconds * 1e9);
    const std::int64_t end = start + window_ns;
    for (auto& w : workers) {
      std::fprintf(w.to, "%lld %lld\n", static_cast<long long>(start), static_cast<long long>(end));
      std::fflush(w.to);
    }
    result.window_s = config.seconds;
    for (int i = 0; i < config.workers; ++i) {
      bool done = false;
      while (read_line(workers[static_cast<std::size_t>(i)].from, line)) {
        if (line == "done") {
          done = true;
          break;
        }
        std::istringstream in(line);
        char kind = 0;
        long long call = 0, grant = 0, release = 0;
        in >> kind >> call >> grant;
        if (kind == 'A') {
          in >> release;
          if (grant >= start && grant < end) result.holds.push_back({i, call, grant, release});
        } else if (kind == 'F') {
          std::string outcome;
          in >> outcome;
          ++result.failures[outcome];
        }
      }
      if (!done) throw std::runtime_error("worker " + std::to_string(i) + " stopped without reporting");
    }
    for (auto& w : workers) {
      const int code = stop_worker(w, false);
      if (code != 0) throw std::runtime_error("a worker exited with " + std::to_string(code));
    }
  } catch (...) {
    stop_all(true);
    throw;
  }
  std::sort(result.holds.begin(), result.holds.end(),
            [](const Hold& a, const Hold& b) { return a.grant < b.grant; });
  for (std::size_t i = 1; i < result.holds.size(); ++i) {
    if (result.holds[i].grant < result.holds[i - 1].release) ++result.overlaps;
  }
  result.ran = true;
  return result;
}

struct Summary {
  double grants_per_s = 0;
  std::size_t grants = 0, handoffs = 0, rewins = 0;
  Percentiles handoff_us, rewin_us, wait_us, waiter_wait_us;
  double min_share_x_even = 0, max_share_x_even = 0, rewin_share = 0;
  std::vector<std::size_t> per_worker;
};

Summary summarize(const ModeResult& r, int workers) {
  Summary s;
  s.grants = r.holds.size();
  s.grants_per_s = r.window_s > 0 ? static_cast<double>(s.grants) / r.window_s : 0;
  std::vector<double> handoff, rewin, wait;
  s.per_worker.assign(static_cast<std::size_t>(workers), 0);
  for (std::size_t i = 0; i < r.holds.size(); ++i) {
    const Hold& h = r.holds[i];
    ++s.per_worker[static_cast<std::size_t>(h.worker)];
    wait.push_back(static_cast<double>(h.grant - h.call) / 1000.0);
    if (i == 0) continue;
    const Hold& prev = r.holds[i - 1];
    const double gap = static_cast<double>(h.grant - prev.release) / 1000.0;
    (h.worker == prev.worker ? rewin : handoff).push_back(gap);
  }
  s.handoffs = handoff.size();
  s.rewins = rewin.size();
  s.handoff_us = percentiles(handoff);
  s.rewin_us = percentiles(rewin);
  s.wait_us = percentiles(wait);
  if (s.grants > 0) {
    const auto [lo, hi] = std::minmax_element(s.per_worker.begin(), s.per_worker.end());
    const double even = static_cast<double>(s.grants) / workers;
    s.min_share_x_even = static_cast<double>(*lo) / even;
    s.max_share_x_even = static_cast<double>(*hi) / even;
  }
  if (s.handoffs + s.rewins > 0) s.rewin_share = static_cast<double>(s.rewins) / static_cast<double>(s.handoffs + s.rewins);
  return s;
}

json percentiles_json(const Percentiles& p) {
  return {{"samples", p.count}, {"p50_us", p.p50}, {"p90_us", p.p90}, {"p99_us", p.p99}, {"max_us", p.max},
          {"mean_us", p.mean}};
}

std::string fmt_us(double us, std::size_t count) {
  if (count == 0) return "-";
  char b[32];
  if (us >= 100000) {
    std::snprintf(b, sizeof(b), "%.0f ms", us / 1000);
  } else if (us >= 1000) {
    std::snprintf(b, sizeof(b), "%.1f ms", us / 1000);
  } else {
    std::snprintf(b, sizeof(b), "%.0f us", us);
  }
  return b;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text + " ";
}

void usage(std::FILE* to) {
  std::fputs(
      "usage: redlock_handoff [--masters N] [--workers W] [--hold-ms MS] [--seconds S] [--reps R]\n"
      "                       [--modes LIST] [--yield-ms MS] [--quick] [--out DIR]\n"
      "\n"
      "  --masters N    redis-servers to start, one Client per worker over all of them (default 3)\n"
      "  --workers W    contending processes (default 4)\n"
      "  --hold-ms MS   how long each grant is held before the release (default 1, fractions allowed)\n"
      "  --seconds S    contention window per mode and repetition (default 5; --quick 2)\n"
      "  --reps R       repetitions of every mode; the modes alternate (default 1)\n"
      "  --modes LIST   comma-separated, from poll-200, poll-10, pubsub, pubsub-fair (default all)\n"
      "  --yield-ms MS  ClientOptions::yield_to_waiters in pubsub-fair (default 5)\n"
      "  --out DIR      where handoff.jsonl and table.txt go (default handoff-results)\n"
      "\n"
      "Starts its own redis-servers (redis-server in PATH) on 127.0.0.1 and its workers (this binary\n"
      "with --worker). Figures are printed, never asserted: exit 0 when the run completed, 1 when a\n"
      "worker failed or two holds overlapped.\n",
      to);
}

[[noreturn]] void bad(const std::string& what) {
  std::fprintf(stderr, "redlock_handoff: %s\n", what.c_str());
  usage(stderr);
  std::exit(2);
}

double number(const std::string& flag, const std::string& value, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) {
    bad(flag + " must be a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + value + "'");
  }
  return v;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  std::signal(SIGPIPE, SIG_IGN);
  if (argc >= 2 && std::string(argv[1]) == "--worker") {
    WorkerArgs w;
    std::string mode_name;
    Milliseconds yield{0};
    w.id = argc > 2 ? std::atoi(argv[2]) : 0;
    for (int i = 3; i + 1 < argc; i += 2) {
      const std::string flag = argv[i], value = argv[i + 1];
      if (flag == "--uris") w.uris = split(value);
      if (flag == "--mode") mode_name = value;
      if (flag == "--hold-us") w.hold_us = std::atoll(value.c_str());
      if (flag == "--yield-ms") yield = Milliseconds{std::atoll(value.c_str())};
    }
    const auto mode = mode_named(mode_name, yield);
    if (!mode || w.uris.empty()) return 2;
    w.mode = *mode;
    try {
      return worker_main(w);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "worker %d: %s\n", w.id, e.what());
      return 1;
    }
  }

  Config config;
  bool quick = false, seconds_given = false;
  for (int i = 0; i < argc; ++i) config.argv.emplace_back(argv[i]);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) bad(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--masters") {
      config.masters = static_cast<std::size_t>(number(arg, value(), 1, 7));
    } else if (arg == "--workers") {
      config.workers = static_cast<int>(number(arg, value(), 2, 64));
    } else if (arg == "--hold-ms") {
      config.hold_us = static_cast<std::int64_t>(number(arg, value(), 0, 10'000) * 1000);
    } else if (arg == "--seconds") {
      config.seconds = number(arg, value(), 0.1, 3600);
      seconds_given = true;
    } else if (arg == "--reps") {
      config.reps = static_cast<int>(number(arg, value(), 1, 50));
    } else if (arg == "--yield-ms") {
      config.yield = Milliseconds{static_cast<long long>(number(arg, value(), 1, 10'000))};
    } else if (arg == "--modes") {
      config.modes = split(value());
      for (const auto& m : config.modes) {
        if (!mode_named(m, config.yield)) bad("unknown mode '" + m + "' in --modes");
      }
    } else if (arg == "--quick") {
      quick = true;
    } else if (arg == "--out") {
      config.out = value();
    } else if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    } else {
      bad("unknown argument '" + arg + "'");
    }
  }
  if (quick && !seconds_given) config.seconds = 2;

  try {
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    std::filesystem::create_directories(config.out);
    const std::string load_start = load_average();
    const auto started = SteadyClock::now();
    std::fprintf(stderr, "redlock_handoff: starting %zu redis-servers, %d workers per mode\n", config.masters,
                 config.workers);
    redlock::support::RedisServerOptions server_options;
    server_options.bind = "127.0.0.1";
    redlock::support::RedisServerGroup masters(config.masters, server_options);
    const auto uris = masters.uris();

    std::vector<ModeResult> results;
    for (int rep = 0; rep < config.reps; ++rep) {
      for (std::size_t j = 0; j < config.modes.size(); ++j) {
        // Rotate the order per repetition, so drift on a busy machine does not favour one mode.
        const auto& name = config.modes[(j + static_cast<std::size_t>(rep)) % config.modes.size()];
        const Mode mode = *mode_named(name, config.yield);
        for (std::size_t m = 0; m < masters.size(); ++m) masters[m].command({"FLUSHALL"});
        ModeResult r = run_mode(config, self, uris, mode);
        if (r.ran) {
          const Summary s = summarize(r, config.workers);
          std::fprintf(stderr, "[rep %d] %-12s %zu grants, handoff p50 %s (%zu), re-won %.0f%%\n", rep + 1,
                       name.c_str(), s.grants, fmt_us(s.handoff_us.p50, s.handoffs).c_str(), s.handoffs,
                       s.rewin_share * 100);
        } else {
          std::fprintf(stderr, "[rep %d] %-12s skipped: %s\n", rep + 1, name.c_str(), r.skipped.c_str());
        }
        results.push_back(std::move(r));
      }
    }
    const double elapsed = micros(started, SteadyClock::now()) / 1e6;

    // ---- report: one block per mode (repetitions pooled), then the targets
    const std::filesystem::path dir = std::filesystem::absolute(config.out);
    std::ofstream jsonl(dir / "handoff.jsonl");
    json meta = {{"type", "meta"}, {"tool", "redlock_handoff"}, {"date_utc", utc_timestamp()},
                 {"host", hostname()}, {"cpus", online_cpus()}, {"cpu_model", cpu_model()},
                 {"kernel", kernel_release()}, {"masters", config.masters}, {"workers", config.workers},
                 {"hold_us", config.hold_us}, {"window_s", config.seconds}, {"reps", config.reps},
                 {"yield_ms", config.yield.count()}, {"argv", config.argv}, {"elapsed_s", elapsed},
                 {"load_average_start", load_start}, {"load_average_end", load_average()},
                 {"wakeups_in_build", have_wakeups()}, {"fairness_in_build", have_fairness()}};
    jsonl << meta.dump() << '\n';

    std::string t;
    const auto line = [&t](const std::string& s) { t += s + "\n"; };
    char b[400];
    line("redlock_handoff: W processes contend for one resource; handoff = next holder's grant - release start");
    std::snprintf(b, sizeof(b), "%s, host %s, %d CPUs, %zu masters, %d workers, hold %.2f ms, %.1f s per mode x %d",
                  utc_timestamp().c_str(), hostname().c_str(), online_cpus(), config.masters, config.workers,
                  static_cast<double>(config.hold_us) / 1000.0, config.seconds, config.reps);
    line(b);
    std::snprintf(b, sizeof(b), "load average (1, 5, 15 min) at start %s, at end %s; run took %.0f s",
                  load_start.c_str(), load_average().c_str(), elapsed);
    line(b);
    line("");
    line(pad("mode", 13) + pad("grants/s", 9) + pad("handoff p50", 12) + pad("p99", 9) + pad("(n)", 6) +
         pad("re-win p50", 11) + pad("re-won", 7) + pad("waiter wait p50", 16) + pad("p99", 9) +
         pad("min/max share x even", 21) + "overlaps");
    std::map<std::string, Summary> pooled;
    bool failed = false;
    for (const auto& name : config.modes) {
      ModeResult all;
      all.mode = *mode_named(name, config.yield);
      for (const auto& r : results) {
        if (r.mode.name != name) continue;
        if (!r.ran) {
          all.skipped = r.skipped;
          continue;
        }
        all.ran = true;
        all.window_s += r.window_s;
        all.overlaps += r.overlaps;
        for (const auto& [k, v] : r.failures) all.failures[k] += v;
        json rec = {{"type", "mode_rep"}, {"mode", name}, {"grants", r.holds.size()}, {"overlaps", r.overlaps}};
        jsonl << rec.dump() << '\n';
      }
      if (!all.ran) {
        line(pad(name, 13) + "skipped: " + all.skipped);
        jsonl << json{{"type", "mode"}, {"mode", name}, {"skipped", all.skipped}}.dump() << '\n';
        continue;
      }
      // Repetitions pooled, but pairs of consecutive holds are taken within one repetition
      // (the pair across two windows would be a gap of seconds).
      Summary s;
      {
        std::vector<double> handoff, rewin, wait, waiter_wait;
        std::vector<std::size_t> per_worker(static_cast<std::size_t>(config.workers), 0);
        std::size_t grants = 0;
        for (const auto& r : results) {
          if (r.mode.name != name || !r.ran) continue;
          const Summary one = summarize(r, config.workers);
          grants += one.grants;
          for (std::size_t w = 0; w < per_worker.size(); ++w) per_worker[w] += one.per_worker[w];
          for (std::size_t i = 0; i < r.holds.size(); ++i) {
            wait.push_back(static_cast<double>(r.holds[i].grant - r.holds[i].call) / 1000.0);
            if (i == 0) continue;
            const double gap = static_cast<double>(r.holds[i].grant - r.holds[i - 1].release) / 1000.0;
            (r.holds[i].worker == r.holds[i - 1].worker ? rewin : handoff).push_back(gap);
            if (r.holds[i].worker != r.holds[i - 1].worker) {
              waiter_wait.push_back(static_cast<double>(r.holds[i].grant - r.holds[i].call) / 1000.0);
            }
          }
        }
        s.grants = grants;
        s.grants_per_s = all.window_s > 0 ? static_cast<double>(grants) / all.window_s : 0;
        s.handoffs = handoff.size();
        s.rewins = rewin.size();
        s.handoff_us = percentiles(handoff);
        s.rewin_us = percentiles(rewin);
        s.wait_us = percentiles(wait);
        s.waiter_wait_us = percentiles(waiter_wait);
        s.per_worker = per_worker;
        if (grants > 0) {
          const auto [lo, hi] = std::minmax_element(per_worker.begin(), per_worker.end());
          const double even = static_cast<double>(grants) / config.workers;
          s.min_share_x_even = static_cast<double>(*lo) / even;
          s.max_share_x_even = static_cast<double>(*hi) / even;
        }
        if (s.handoffs + s.rewins > 0) {
          s.rewin_share = static_cast<double>(s.rewins) / static_cast<double>(s.handoffs + s.rewins);
        }
      }
      pooled[name] = s;
      if (all.overlaps > 0 || s.grants == 0) failed = true;
      std::snprintf(b, sizeof(b), "%.2f / %.2f", s.min_share_x_even, s.max_share_x_even);
      line(pad(name, 13) + pad(std::to_string(static_cast<long long>(std::llround(s.grants_per_s))), 9) +
           pad(fmt_us(s.handoff_us.p50, s.handoffs), 12) + pad(fmt_us(s.handoff_us.p99, s.handoffs), 9) +
           pad(std::to_string(s.handoffs), 6) + pad(fmt_us(s.rewin_us.p50, s.rewins), 11) +
           pad(std::to_string(static_cast<int>(std::lround(s.rewin_share * 100))) + "%", 7) +
           pad(fmt_us(s.waiter_wait_us.p50, s.waiter_wait_us.count), 16) +
           pad(fmt_us(s.waiter_wait_us.p99, s.waiter_wait_us.count), 9) +
           pad(b, 21) + std::to_string(all.overlaps));
      json failures = json::object();
      for (const auto& [k, v] : all.failures) failures[k] = v;
      json rec = {{"type", "mode"},
                  {"mode", name},
                  {"settings", all.mode.describe()},
                  {"grants", s.grants},
                  {"grants_per_s", s.grants_per_s},
                  {"handoff_other_process", percentiles_json(s.handoff_us)},
                  {"rewin_same_process", percentiles_json(s.rewin_us)},
                  {"rewin_share", s.rewin_share},
                  {"acquire_call_to_grant", percentiles_json(s.wait_us)},
                  {"waiter_call_to_grant", percentiles_json(s.waiter_wait_us)},
                  {"grants_per_worker", s.per_worker},
                  {"min_share_x_even", s.min_share_x_even},
                  {"max_share_x_even", s.max_share_x_even},
                  {"overlaps", all.overlaps},
                  {"acquires_without_grant", failures}};
      jsonl << rec.dump() << '\n';
    }
    line("");
    line("   handoff = grant in another process - the previous holder's release start (CLOCK_MONOTONIC, both");
    line("   processes); (n) = how many; re-win = the releaser itself got it again (and its gap); re-won = share");
    line("   of grants that went back to the releaser; waiter wait = acquire call's start to its grant, for the");
    line("   grants that came from another process's release (how long the one who got it had waited); share x even =");
    line("   a process's share of the grants / (1/W); overlaps = grants stamped before the previous release start");
    line("   (must be 0). Modes:");
    for (const auto& name : config.modes) line("     " + pad(name, 12) + mode_named(name, config.yield)->describe());
    line("");

    struct Target {
      std::string name, value, target, verdict;
    };
    std::vector<Target> targets;
    const auto has = [&](const char* m) { return pooled.count(m) != 0 && pooled[m].handoffs > 0; };
    const auto verdict = [](bool pass) { return std::string(pass ? "PASS" : "MISS"); };
    if (has("pubsub")) {
      const double p50 = pooled["pubsub"].handoff_us.p50;
      targets.push_back({"handoff p50, pub/sub (fairness off)", fmt_us(p50, 1), "<= 1 ms", verdict(p50 <= 1000)});
    }
    if (has("pubsub-fair")) {
      const double p50 = pooled["pubsub-fair"].handoff_us.p50;
      targets.push_back({"handoff p50, pub/sub (fairness on)", fmt_us(p50, 1), "<= 1 ms", verdict(p50 <= 1000)});
    }
    for (const char* wake : {"pubsub", "pubsub-fair"}) {
      if (has("poll-200") && has(wake)) {
        const double x = pooled["poll-200"].handoff_us.p50 / std::max(1.0, pooled[wake].handoff_us.p50);
        std::snprintf(b, sizeof(b), "%.1fx", x);
        targets.push_back({std::string("handoff p50, poll-200 / ") + wake, b, ">= 20x", verdict(x >= 20)});
        const double w = pooled["poll-200"].waiter_wait_us.p50 / std::max(1.0, pooled[wake].waiter_wait_us.p50);
        std::snprintf(b, sizeof(b), "%.1fx", w);
        targets.push_back({std::string("waiter wait p50, poll-200 / ") + wake, b, "", "info"});
        // The mean, because polling's cost is its tail: most cross-process grants under polling
        // are a poll that slipped into a releaser's slow release, a few waited out retry delays.
        const double m = pooled["poll-200"].waiter_wait_us.mean / std::max(1.0, pooled[wake].waiter_wait_us.mean);
        std::snprintf(b, sizeof(b), "%.1fx", m);
        targets.push_back({std::string("waiter wait mean, poll-200 / ") + wake, b, "", "info"});
        const double re = pooled["poll-200"].rewin_share * 100, rw = pooled[wake].rewin_share * 100;
        std::snprintf(b, sizeof(b), "%.0f%% / %.0f%%", re, rw);
        targets.push_back({std::string("re-won, poll-200 / ") + wake, b, "", "info"});
      }
    }
    for (const char* m : {"pubsub-fair", "pubsub", "poll-10", "poll-200"}) {
      if (pooled.count(m) == 0 || pooled[m].grants == 0) continue;
      const auto& s = pooled[m];
      std::snprintf(b, sizeof(b), "%.2f .. %.2f", s.min_share_x_even, s.max_share_x_even);
      const bool fair = std::string(m) == "pubsub-fair";
      targets.push_back({std::string("grant share x even, ") + m, b, fair ? "0.5 .. 2" : "",
                         fair ? verdict(s.max_share_x_even <= 2 && s.min_share_x_even >= 0.5) : "info"});
    }
    line("Targets (informational: printed, never asserted)");
    line(pad("figure", 40) + pad("value", 14) + pad("target", 10) + "verdict");
    for (const auto& tg : targets) {
      line(pad(tg.name, 40) + pad(tg.value, 14) + pad(tg.target, 10) + tg.verdict);
      jsonl << json{{"type", "target"}, {"name", tg.name}, {"value", tg.value}, {"target", tg.target},
                    {"verdict", tg.verdict}}
                   .dump()
            << '\n';
    }
    if (targets.empty()) line("   (none computable: no cross-process handoffs, or the pub/sub modes were skipped)");
    {
      std::ofstream table(dir / "table.txt");
      table << t;
    }
    std::fputs(t.c_str(), stdout);
    std::fflush(stdout);
    if (failed) {
      std::fprintf(stderr, "redlock_handoff: a mode had no grant at all or overlapping holds (see the table)\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redlock_handoff: %s\n", e.what());
    return 1;
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// The measurements of redlock_compare. Each phase builds its own Client(s) on the masters
// the run started, measures, and adds named figures (one value per repetition) plus one JSON
// record. Public API only: redlock::Client and redlock::support::RedisServer.
#include <uv.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <semaphore>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "alloc_counter.h"
#include "compare.h"
#include "redlock/redlock.h"

namespace bench {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::ordered_json;
using redlock::Client;
using redlock::MasterStatus;
using redlock::Result;

// A 128-bit token as the library makes them (32 hex characters), for redis-benchmark's SETs.
constexpr const char* kTokenLike = "0123456789abcdef0123456789abcdef";
constexpr auto kTtl = 10s;

// (Appending rather than "n" + std::to_string(n): GCC 12 -O3 reports a false -Wrestrict there.)
std::string tag(std::size_t n) {
  std::string out = "n";
  out += std::to_string(n);
  return out;
}

// The masters were started by this run seconds ago: with the restart guard on, their grants
// would not count for one max_lock_ttl (11 s at ttl 10 s, 61 s for the 60 s locks of the
// hold phase). The guard's cost once the masters are trusted is a clock comparison per
// reply, so the benchmark turns it off rather than waiting (and says so in the notes).
void disable_restart_guard(redlock::ClientOptions& options) { options.restart_guard = false; }

redlock::ClientOptions options_for(std::vector<std::string> uris) {
  redlock::ClientOptions options;
  options.masters = std::move(uris);
  options.key_prefix = "bench:";
  options.ttl = kTtl;
  options.retry_count = 0;  // one attempt: we measure rounds, never retry pauses
  disable_restart_guard(options);
  return options;
}

std::unique_ptr<Client> connect(redlock::ClientOptions options) {
  const std::size_t n = options.masters.size();
  auto client = std::make_unique<Client>(std::move(options));
  if (!client->wait_connected(n, 5s)) throw std::runtime_error("could not connect to all masters within 5 s");
  return client;
}

std::vector<std::string> names(const std::string& prefix, int count) {
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

// The library's own send-to-decision time of an acquire: the latency of the reply that
// completed the quorum (the quorum-th fastest grant), as reported in the Result.
double decision_us(const Result& result, std::size_t quorum) {
  std::vector<long long> granted;
  for (const auto& m : result.masters) {
    if (m.status == MasterStatus::ok) granted.push_back(m.latency.count());
  }
  if (granted.size() < quorum) return 0;
  std::nth_element(granted.begin(), granted.begin() + static_cast<long>(quorum - 1), granted.end());
  return static_cast<double>(granted[quorum - 1]);
}

// CPU time the first n masters have used so far (ns), or -1 when /proc does not say.
long long masters_run_ns(const Run& run, std::size_t n) {
  long long total = 0;
  for (std::size_t i = 0; i < n && i < run.masters.size(); ++i) {
    const long long ns = process_run_ns(run.masters[i]->pid());
    if (ns < 0) return -1;
    total += ns;
  }
  return total;
}

// Server CPU per command (µs) between two masters_run_ns readings.
double server_us_per_command(long long before, long long after, double commands) {
  if (before < 0 || after < 0 || commands <= 0) return -1;
  return static_cast<double>(after - before) / 1000.0 / commands;
}

json percentiles_json(const Percentiles& p) {
  return {{"samples", p.count}, {"p50_us", p.p50}, {"p90_us", p.p90}, {"p99_us", p.p99},
          {"max_us", p.max}, {"mean_us", p.mean}};
}

void add_percentiles(Run& run, const std::string& prefix, const Percentiles& p) {
  run.add(prefix + ".p50", p.p50);
  run.add(prefix + ".p90", p.p90);
  run.add(prefix + ".p99", p.p99);
  run.add(prefix + ".max", p.max);
}

void append(std::vector<double>& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); }

// A libuv loop run by a thread of ours, for Clients attached with ClientOptions::loop.
// Such Clients must be created and destroyed on the loop's thread: run() executes a task
// there and waits for it. The loop owns them (`clients`) so that they are destroyed there
// even when a phase throws.
class SharedLoop {
 public:
  SharedLoop() {
    if (uv_loop_init(&loop_) != 0) throw std::runtime_error("uv_loop_init failed");
    uv_async_init(&loop_, &wake_, &SharedLoop::on_wake);
    wake_.data = this;
    thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  }
  ~SharedLoop() {
    // Closing our handle lets uv_run return once the Clients' handles are closed too.
    run([this] {
      clients.clear();
      uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
    });
    thread_.join();
    uv_loop_close(&loop_);
  }
  SharedLoop(const SharedLoop&) = delete;
  SharedLoop& operator=(const SharedLoop&) = delete;

  std::vector<std::unique_ptr<Client>> clients;  // touched on the loop thread only (via run)

  uv_loop_t* get() { return &loop_; }
  void run(const std::function<void()>& task) {
    std::promise<void> done;
    {
      const std::lock_guard lock(mutex_);
      tasks_.push_back([&] {
        task();
        done.set_value();
      });
    }
    uv_async_send(&wake_);
    done.get_future().get();
  }

 private:
  static void on_wake(uv_async_t* handle) {
    auto* self = static_cast<SharedLoop*>(handle->data);
    std::vector<std::function<void()>> tasks;
    {
      const std::lock_guard lock(self->mutex_);
      tasks.swap(self->tasks_);
    }
    for (auto& t : tasks) t();
  }

  uv_loop_t loop_{};
  uv_async_t wake_{};
  std::mutex mutex_;
  std::vector<std::function<void()>> tasks_;
  std::thread thread_;
};

// K chains of acquire_async -> release_async -> next acquire, all on the Client's loop
// thread. Each completion starts the next cycle; stop() lets the chains run dry.
class Pump {
 public:
  Pump(Client& client, std::string prefix) : client_(client), prefix_(std::move(prefix)) {}
  ~Pump() { stop_and_wait(10s); }
  Pump(const Pump&) = delete;
  Pump& operator=(const Pump&) = delete;

  void start(std::size_t chains) {
    active_.store(chains);
    for (std::size_t i = 0; i < chains; ++i) next();
  }
  bool stop_and_wait(std::chrono::milliseconds timeout) {
    stop_.store(true);
    std::unique_lock lock(mutex_);
    return idle_.wait_for(lock, timeout, [this] { return active_.load() == 0; });
  }
  [[nodiscard]] std::uint64_t done() const { return done_.load(std::memory_order_relaxed); }
  [[nodiscard]] std::uint64_t failed() const { return failed_.load(std::memory_order_relaxed); }
  // What the failed operations reported: outcome -> count, and per-master status -> count.
  [[nodiscard]] json failures() const {
    const std::lock_guard lock(failure_mutex_);
    json out = json::object();
    json outcomes = json::object(), statuses = json::object();
    for (const auto& [name, count] : outcomes_) outcomes[name] = count;
    for (const auto& [name, count] : statuses_) statuses[name] = count;
    out["outcomes"] = outcomes;
    out["master_statuses"] = statuses;
    return out;
  }

 private:
  void next() {
    if (stop_.load(std::memory_order_relaxed)) {
      // Under the mutex: the waiter cannot see zero (and destroy us) before we let go.
      const std::lock_guard lock(mutex_);
      if (active_.fetch_sub(1) == 1) idle_.notify_all();
      return;
    }
    // Short names stay within std::string's small-buffer: the bench adds no allocation.
    std::string name = prefix_ + std::to_string(seq_.fetch_add(1, std::memory_order_relaxed));
    client_.acquire_async(std::move(name), [this](Result result) { on_acquired(std::move(result)); });
  }
  void on_acquired(Result result) {
    if (!result.ok()) {
      note_failure("acquire ", result);
      next();
      return;
    }
    client_.release_async(std::move(*result.lock), [this](Result released) {
      if (released.ok()) {
        done_.fetch_add(1, std::memory_order_relaxed);
      } else {
        note_failure("release ", released);
      }
      next();
    });
  }
  void note_failure(const char* what, const Result& result) {
    failed_.fetch_add(1, std::memory_order_relaxed);
    const std::lock_guard lock(failure_mutex_);
    ++outcomes_[what + std::string(redlock::to_string(result.outcome))];
    for (const auto& m : result.masters) ++statuses_[std::string(redlock::to_string(m.status))];
  }

  Client& client_;
  const std::string prefix_;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> active_{0};
  std::atomic<std::uint64_t> seq_{0}, done_{0}, failed_{0};
  mutable std::mutex failure_mutex_;
  std::map<std::string, std::uint64_t> outcomes_, statuses_;
  std::mutex mutex_;
  std::condition_variable idle_;
};

// One pass over N single-master Clients, one master after another: step(i) acquires (or
// releases) on master i and its callback runs step(i + 1). Shared, so that the loop thread
// may still be returning from the last callback when the waiting caller moves on.
struct SequentialChain : std::enable_shared_from_this<SequentialChain> {
  SequentialChain(std::vector<std::unique_ptr<Client>>& c, std::vector<std::optional<redlock::Lock>>& h, bool a,
                  std::string r)
      : clients(c), held(h), acquiring(a), resource(std::move(r)) {}

  void step(std::size_t i) {
    const std::size_t n = clients.size();
    while (i < n && !acquiring && !held[i]) ++i;  // release only where we hold it
    if (i == n) {
      done.set_value(granted);
      return;
    }
    auto self = shared_from_this();
    if (acquiring) {
      clients[i]->acquire_async(resource, [self, i](Result r) {
        if (r) {
          self->held[i] = std::move(*r.lock);
          ++self->granted;
        }
        self->step(i + 1);
      });
    } else {
      redlock::Lock lock = std::move(*held[i]);
      held[i].reset();
      clients[i]->release_async(std::move(lock), [self, i](Result) { self->step(i + 1); });
    }
  }

  std::vector<std::unique_ptr<Client>>& clients;
  std::vector<std::optional<redlock::Lock>>& held;  // the caller reads it after `done` only
  const bool acquiring;
  const std::string resource;
  std::size_t granted = 0;
  std::promise<std::size_t> done;
};

int pump_id() {
  static std::atomic<int> next{0};
  return next.fetch_add(1);
}

}  // namespace

// ------------------------------------------------------------------------------------------

void phase_latency_parallel(Run& run, std::size_t n, int rep) {
  auto client = connect(options_for(run.uris(n)));
  const int samples = run.config.latency_samples;
  const int warmup = std::max(20, samples / 10);
  const auto resources = names("lp" + std::to_string(n) + "." + std::to_string(rep) + ".", warmup + samples);
  std::vector<double> acquire_us, loop_us;
  acquire_us.reserve(static_cast<std::size_t>(samples));
  loop_us.reserve(static_cast<std::size_t>(samples));
  // ranked[k]: send-to-reply time of the (k+1)-th fastest reply of each acquire, as the
  // library measured it. Evenly spaced ranks mean the masters answered one after another
  // (they share CPUs), not in parallel.
  std::vector<std::vector<double>> ranked(n);
  std::vector<long long> replies;
  int failures = 0;
  for (int i = 0; i < warmup; ++i) {
    const Result r = client->acquire(resources[static_cast<std::size_t>(i)]);
    if (r) client->release(*r.lock);
  }
  const long long server0 = masters_run_ns(run, n);
  const auto begin = SteadyClock::now();
  for (int i = warmup; i < warmup + samples; ++i) {
    const auto t0 = SteadyClock::now();
    const Result r = client->acquire(resources[static_cast<std::size_t>(i)]);
    const auto t1 = SteadyClock::now();
    acquire_us.push_back(micros(t0, t1));
    if (r) {
      loop_us.push_back(decision_us(r, client->quorum()));
      replies.clear();
      for (const auto& m : r.masters) {
        if (m.status != MasterStatus::pending && m.latency.count() > 0) replies.push_back(m.latency.count());
      }
      std::sort(replies.begin(), replies.end());
      for (std::size_t k = 0; k < replies.size(); ++k) ranked[k].push_back(static_cast<double>(replies[k]));
      client->release(*r.lock);
    } else {
      ++failures;
    }
  }
  const double seconds = micros(begin, SteadyClock::now()) / 1e6;
  const double cycles_per_s = samples / seconds;
  // Every cycle sends one SET and one release script to each master.
  const double server_us =
      server_us_per_command(server0, masters_run_ns(run, n), 2.0 * static_cast<double>(n) * samples);

  const std::string label = n == 1 ? "floor: single node N=1" : "quorum N=" + std::to_string(n);
  append(run.cdf[label], acquire_us);
  const Percentiles p = percentiles(acquire_us);
  const Percentiles loop = percentiles(loop_us);
  const std::string key = "lat.par." + tag(n);
  add_percentiles(run, key, p);
  run.add(key + ".loop_p50", loop.p50);
  if (server_us >= 0) run.add(key + ".server_us_per_cmd", server_us);
  json ranks = json::array();
  for (std::size_t k = 0; k < n; ++k) {
    if (ranked[k].empty()) break;
    const double p50 = percentiles(ranked[k]).p50;
    run.add(key + ".reply" + std::to_string(k + 1) + "_p50", p50);
    ranks.push_back(p50);
  }
  run.add(key + ".cps", cycles_per_s);
  run.add(key + ".failed", failures);
  json record = {{"type", "latency"}, {"mode", "parallel"}, {"n", n}, {"rep", rep}, {"acquire", percentiles_json(p)},
                 {"loop_decision_p50_us", loop.p50}, {"reply_rank_p50_us", ranks},
                 {"server_cpu_us_per_command", server_us},
                 {"cycles_per_s", cycles_per_s}, {"failed", failures}};
  char line[200];
  std::snprintf(line, sizeof(line), "latency parallel   N=%zu: p50 %.1f us, p99 %.1f us, %.0f cycles/s", n, p.p50,
                p.p99, cycles_per_s);
  record["progress"] = line;
  run.record(std::move(record));
}

void phase_latency_sequential(Run& run, std::size_t n, int rep) {
  // A model of clients that lock one master after another, waiting for each reply before
  // sending to the next: N single-master Clients on ONE event loop (ClientOptions::loop),
  // each acquire_async started from the previous one's callback. Same connection and loop
  // code as the parallel Client, same two thread hand-offs per call (caller -> loop ->
  // caller); only the fan-out differs. A grant when a majority said OK with positive
  // validity (ttl - elapsed - drift, elapsed from before the first send); then released
  // one master after another, as such clients do.
  SharedLoop loop;
  auto& clients = loop.clients;
  const auto uris = run.uris(n);
  loop.run([&] {
    for (const auto& uri : uris) {
      auto options = options_for({uri});
      options.loop = loop.get();
      clients.push_back(std::make_unique<Client>(std::move(options)));
    }
  });
  for (auto& c : clients) {
    if (!c->wait_connected(1, 5s)) throw std::runtime_error("sequential: could not connect within 5 s");
  }
  const std::size_t quorum = n / 2 + 1;
  const auto drift = clients.front()->drift(kTtl);
  const int samples = run.config.latency_samples;
  const int warmup = std::max(20, samples / 10);
  const auto resources = names("ls" + std::to_string(n) + "." + std::to_string(rep) + ".", warmup + samples);
  std::vector<double> acquire_us;
  acquire_us.reserve(static_cast<std::size_t>(samples));
  int failures = 0;
  std::vector<std::optional<redlock::Lock>> held(n);

  const auto chain = [&](bool acquiring, const std::string& resource) {
    auto c = std::make_shared<SequentialChain>(clients, held, acquiring, resource);
    auto future = c->done.get_future();
    c->step(0);
    return future.get();
  };
  const auto cycle = [&](const std::string& resource, bool measure) {
    const auto t0 = SteadyClock::now();
    const std::size_t granted = chain(true, resource);
    const auto t1 = SteadyClock::now();
    const auto validity = std::chrono::duration_cast<std::chrono::microseconds>(kTtl - (t1 - t0)) - drift;
    const bool ok = granted >= quorum && validity.count() > 0;
    if (measure) {
      acquire_us.push_back(micros(t0, t1));
      if (!ok) ++failures;
    }
    chain(false, resource);
  };
  for (int i = 0; i < warmup; ++i) cycle(resources[static_cast<std::size_t>(i)], false);
  const auto begin = SteadyClock::now();
  for (int i = warmup; i < warmup + samples; ++i) cycle(resources[static_cast<std::size_t>(i)], true);
  const double seconds = micros(begin, SteadyClock::now()) / 1e6;
  const double cycles_per_s = samples / seconds;

  append(run.cdf["sequential N=" + std::to_string(n)], acquire_us);
  const Percentiles p = percentiles(acquire_us);
  const std::string key = "lat.seq." + tag(n);
  add_percentiles(run, key, p);
  run.add(key + ".cps", cycles_per_s);
  run.add(key + ".failed", failures);
  json record = {{"type", "latency"}, {"mode", "sequential"}, {"n", n}, {"rep", rep},
                 {"acquire", percentiles_json(p)}, {"cycles_per_s", cycles_per_s}, {"failed", failures}};
  char line[200];
  std::snprintf(line, sizeof(line), "latency sequential N=%zu: p50 %.1f us, p99 %.1f us, %.0f cycles/s", n, p.p50,
                p.p99, cycles_per_s);
  record["progress"] = line;
  run.record(std::move(record));
}

void phase_floor_redis_benchmark(Run& run, int rep) {
  if (run.redis_benchmark.empty()) {
    run.note("redis-benchmark not installed: no redis-benchmark -c 1 floor (apt install redis-tools)");
    return;
  }
  const auto& master = *run.masters.front();
  // The lock's own command, one connection, one request at a time: the round trip floor
  // of a C client with no event-loop thread hand-off.
  const std::vector<std::string> argv = {run.redis_benchmark, "-h", master.host(), "-p",
                                         std::to_string(master.port()), "-c", "1", "-n",
                                         std::to_string(run.config.floor_requests), "-r", "100000000", "--csv",
                                         "SET", "bench:rb:__rand_int__", kTokenLike, "NX", "PX", "10000"};
  const auto [output, ok] = run_capture(argv);
  const auto figures = parse_redis_benchmark_csv(output);
  if (!ok || !figures) {
    run.note("redis-benchmark -c 1 failed or printed nothing parseable; floor from redis-benchmark skipped");
    return;
  }
  run.add("rb.floor.p50", figures->p50_ms * 1000.0);
  run.add("rb.floor.p99", figures->p99_ms * 1000.0);
  run.add("rb.floor.max", figures->max_ms * 1000.0);
  run.add("rb.floor.rps", figures->rps);
  json record = {{"type", "floor_redis_benchmark"}, {"rep", rep}, {"command", "SET key token NX PX 10000"},
                 {"clients", 1}, {"requests", run.config.floor_requests}, {"rps", figures->rps},
                 {"p50_us", figures->p50_ms * 1000.0}, {"p95_us", figures->p95_ms * 1000.0},
                 {"p99_us", figures->p99_ms * 1000.0}, {"max_us", figures->max_ms * 1000.0}};
  char line[200];
  std::snprintf(line, sizeof(line), "redis-benchmark -c 1 SET NX PX: p50 %.1f us, %.0f requests/s",
                figures->p50_ms * 1000.0, figures->rps);
  record["progress"] = line;
  run.record(std::move(record));
}

void phase_throughput(Run& run, std::size_t n, std::size_t k, int rep) {
  auto client = connect(options_for(run.uris(n)));
  const double window = run.config.throughput_seconds;
  const auto warmup = std::chrono::duration<double>(std::clamp(window / 5, 0.05, 0.3));
  std::uint64_t done = 0, failed = 0;
  double seconds = 0, server_us = -1, client_us = -1;
  json failures;
  {
    Pump pump(*client, "t" + std::to_string(pump_id()) + ".");
    pump.start(k);
    std::this_thread::sleep_for(warmup);
    const auto t0 = SteadyClock::now();
    const std::uint64_t d0 = pump.done(), f0 = pump.failed();
    const long long server0 = masters_run_ns(run, n);
    const CpuTimes client0 = process_cpu();
    std::this_thread::sleep_for(std::chrono::duration<double>(window));
    const auto t1 = SteadyClock::now();
    done = pump.done() - d0;
    failed = pump.failed() - f0;
    const long long server1 = masters_run_ns(run, n);
    const CpuTimes client1 = process_cpu();
    server_us = server_us_per_command(server0, server1, 2.0 * static_cast<double>(n * done));
    if (done > 0) client_us = (client1.total() - client0.total()) * 1e6 / static_cast<double>(done);
    seconds = micros(t0, t1) / 1e6;
    if (!pump.stop_and_wait(10s)) run.note("throughput: chains did not drain within 10 s");
    failures = pump.failures();  // over the whole run of the pump, warm-up and drain included
  }
  const double cycles_per_s = static_cast<double>(done) / seconds;
  const std::string key = "tp." + tag(n) + ".k" + std::to_string(k);
  run.add(key + ".cps", cycles_per_s);
  run.add(key + ".failed", static_cast<double>(failed));
  if (server_us >= 0) run.add(key + ".server_us_per_cmd", server_us);
  if (client_us >= 0) run.add(key + ".client_us_per_cycle", client_us);
  json record = {{"type", "throughput"}, {"n", n}, {"in_flight", k}, {"rep", rep}, {"seconds", seconds},
                 {"cycles", done}, {"failed", failed}, {"cycles_per_s", cycles_per_s},
                 {"server_cpu_us_per_command", server_us}, {"client_cpu_us_per_cycle", client_us},
                 {"failures", failures},
                 {"commands_per_s", cycles_per_s * 2.0 * static_cast<double>(n)}};
  char line[200];
  std::snprintf(line, sizeof(line), "throughput N=%zu K=%zu: %.0f cycles/s (%llu failed)", n, k, cycles_per_s,
                static_cast<unsigned long long>(failed));
  record["progress"] = line;
  if (failed > 0) {
    run.note("throughput N=" + std::to_string(n) + " K=" + std::to_string(k) + " repetition " +
             std::to_string(rep + 1) + ": " + std::to_string(failed) + " failed cycles; " + failures.dump());
  }
  run.record(std::move(record));
}

void phase_ceiling(Run& run, std::size_t n, int rep) {
  if (run.redis_benchmark.empty()) {
    run.note("ceiling unavailable: redis-benchmark is not installed (apt install redis-tools)");
    return;
  }
  // Pipelined SETs (-P 16, 4 connections) against each of the n masters at once, one
  // redis-benchmark process per master, all started together.
  const std::uint64_t per_master = run.config.ceiling_requests;
  std::vector<Child> children;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& master = *run.masters[i];
    auto child = spawn_capture({run.redis_benchmark, "-h", master.host(), "-p", std::to_string(master.port()), "-c",
                                "4", "-P", "16", "-n", std::to_string(per_master), "-r", "100000", "--csv", "SET",
                                "bench:cl:__rand_int__", kTokenLike, "PX", "10000"});
    if (child) children.push_back(*child);
  }
  std::vector<double> rps;
  bool all_ok = children.size() == n;
  for (auto& child : children) {
    const auto [output, ok] = finish(child);
    const auto figures = parse_redis_benchmark_csv(output);
    if (ok && figures) {
      rps.push_back(figures->rps);
    } else {
      all_ok = false;
    }
  }
  flush_masters(run);
  if (!all_ok || rps.empty()) {
    run.note("ceiling unavailable for N=" + std::to_string(n) + ": a redis-benchmark run failed");
    return;
  }
  // Total requests over the longest of the runs: they overlapped for at most that long, so
  // this does not credit a master for time it had the core to itself.
  double longest = 0;
  for (const double r : rps) longest = std::max(longest, static_cast<double>(per_master) / r);
  double sum = 0;
  for (const double r : rps) sum += r;
  const double ceiling = static_cast<double>(per_master * n) / longest;
  run.add("ceil." + tag(n) + ".sets_per_s", ceiling);
  json record = {{"type", "ceiling"}, {"n", n}, {"rep", rep}, {"command", "SET key token PX 10000"},
                 {"pipeline", 16}, {"connections_per_master", 4}, {"requests_per_master", per_master},
                 {"per_master_rps", rps}, {"sum_of_rps", sum}, {"sets_per_s", ceiling}};
  char line[200];
  std::snprintf(line, sizeof(line), "ceiling N=%zu: %.0f pipelined SETs/s over the masters", n, ceiling);
  record["progress"] = line;
  run.record(std::move(record));
}

void phase_frozen(Run& run, int rep) {
  if (run.masters.size() < 5) return;
  auto options = options_for(run.uris(5));
  options.command_timeout = 50ms;  // the default, stated
  // The Client drops a connection whose oldest command waited stall_timeout and reconnects;
  // keep the frozen master in the set for the whole measurement.
  options.stall_timeout = 600s;
  auto client = connect(std::move(options));
  const int samples = run.config.frozen_samples;
  const int warmup = std::max(20, samples / 10);

  struct Series {
    std::vector<double> acquire_us;
    int failures = 0;
    std::size_t frozen_pending = 0, frozen_timeout = 0, frozen_ok = 0;
  };
  const auto measure = [&](const std::string& prefix) {
    Series s;
    s.acquire_us.reserve(static_cast<std::size_t>(samples));
    const auto resources = names(prefix, warmup + samples);
    for (int i = 0; i < warmup + samples; ++i) {
      const auto t0 = SteadyClock::now();
      const Result r = client->acquire(resources[static_cast<std::size_t>(i)]);
      const auto t1 = SteadyClock::now();
      if (i >= warmup) {
        s.acquire_us.push_back(micros(t0, t1));
        if (!r) ++s.failures;
        const auto status = r.masters.size() == 5 ? r.masters[4].status : MasterStatus::pending;
        s.frozen_pending += status == MasterStatus::pending ? 1u : 0u;
        s.frozen_timeout += status == MasterStatus::timeout ? 1u : 0u;
        s.frozen_ok += status == MasterStatus::ok ? 1u : 0u;
      }
      if (r) client->release(*r.lock);
    }
    return s;
  };

  Series healthy = measure("fh" + std::to_string(rep) + ".");
  run.masters[4]->freeze();
  Series frozen;
  try {
    frozen = measure("ff" + std::to_string(rep) + ".");
  } catch (...) {
    run.masters[4]->thaw();
    throw;
  }
  run.masters[4]->thaw();
  // The thawed master now works through the SETs and releases queued while it was stopped.
  std::this_thread::sleep_for(300ms);
  client.reset();

  append(run.cdf["frozen: all healthy"], healthy.acquire_us);
  append(run.cdf["frozen: 1 of 5 frozen"], frozen.acquire_us);
  const Percentiles h = percentiles(healthy.acquire_us);
  const Percentiles f = percentiles(frozen.acquire_us);
  add_percentiles(run, "frozen.healthy", h);
  add_percentiles(run, "frozen.frozen", f);
  run.add("frozen.healthy.failed", healthy.failures);
  run.add("frozen.frozen.failed", frozen.failures);
  run.add("frozen.frozen.pending_share", static_cast<double>(frozen.frozen_pending) / samples);
  run.add("frozen.ratio.p50", h.p50 > 0 ? f.p50 / h.p50 : 0);
  run.add("frozen.ratio.p99", h.p99 > 0 ? f.p99 / h.p99 : 0);
  json record = {{"type", "frozen"}, {"n", 5}, {"rep", rep}, {"frozen_master", 5},
                 {"command_timeout_ms", 50}, {"stall_timeout_ms", 600000},
                 {"healthy", percentiles_json(h)}, {"frozen", percentiles_json(f)},
                 {"healthy_failed", healthy.failures}, {"frozen_failed", frozen.failures},
                 {"frozen_master_status", {{"pending", frozen.frozen_pending},
                                           {"timeout", frozen.frozen_timeout},
                                           {"ok", frozen.frozen_ok}}}};
  char line[200];
  std::snprintf(line, sizeof(line), "one of 5 frozen: p50 %.1f -> %.1f us, p99 %.1f -> %.1f us", h.p50, f.p50, h.p99,
                f.p99);
  record["progress"] = line;
  run.record(std::move(record));
}

void phase_client_cost(Run& run, int rep) {
  auto client = connect(options_for(run.uris(5)));
  const int cycles = run.config.cost_cycles;
  const auto resources = names("c" + std::to_string(rep) + ".", cycles + 200);
  for (int i = 0; i < 200; ++i) {
    const Result r = client->acquire(resources[static_cast<std::size_t>(i)]);
    if (r) client->release(*r.lock);
  }

  // Blocking calls, one lock at a time (what the latency phase measures).
  int failures = 0;
  const AllocCount a0 = alloc_count();
  const CpuTimes c0 = process_cpu();
  const auto w0 = SteadyClock::now();
  for (int i = 200; i < cycles + 200; ++i) {
    const Result r = client->acquire(resources[static_cast<std::size_t>(i)]);
    if (r) {
      client->release(*r.lock);
    } else {
      ++failures;
    }
  }
  const double wall = micros(w0, SteadyClock::now()) / 1e6;
  const CpuTimes c1 = process_cpu();
  const AllocCount a1 = alloc_count();
  const double cpu = c1.total() - c0.total();
  const double blocking_cpu_us = cpu * 1e6 / cycles;
  const double blocking_sys_us = (c1.system - c0.system) * 1e6 / cycles;
  const double blocking_allocs = static_cast<double>(a1.calls - a0.calls) / cycles;
  const double blocking_bytes = static_cast<double>(a1.bytes - a0.bytes) / cycles;
  run.add("cost.blocking.cpu_us", blocking_cpu_us);
  run.add("cost.blocking.allocs", blocking_allocs);
  run.add("cost.blocking.bytes", blocking_bytes);
  run.add("cost.blocking.sys_us", blocking_sys_us);
  run.add("cost.blocking.cpu_share", cpu / wall);

  // Asynchronous chains, 64 in flight (the throughput phase's shape).
  const std::size_t k = 64;
  double async_cpu_us = 0, async_sys_us = 0, async_allocs = 0, async_bytes = 0;
  std::uint64_t done = 0;
  {
    Pump pump(*client, "a" + std::to_string(pump_id()) + ".");
    pump.start(k);
    std::this_thread::sleep_for(100ms);
    const std::uint64_t d0 = pump.done();
    const AllocCount b0 = alloc_count();
    const CpuTimes e0 = process_cpu();
    std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.2, run.config.throughput_seconds)));
    const CpuTimes e1 = process_cpu();
    const AllocCount b1 = alloc_count();
    done = pump.done() - d0;
    pump.stop_and_wait(10s);
    if (done > 0) {
      async_cpu_us = (e1.total() - e0.total()) * 1e6 / static_cast<double>(done);
      async_sys_us = (e1.system - e0.system) * 1e6 / static_cast<double>(done);
      async_allocs = static_cast<double>(b1.calls - b0.calls) / static_cast<double>(done);
      async_bytes = static_cast<double>(b1.bytes - b0.bytes) / static_cast<double>(done);
    }
  }
  run.add("cost.async64.cpu_us", async_cpu_us);
  run.add("cost.async64.sys_us", async_sys_us);
  run.add("cost.async64.allocs", async_allocs);
  run.add("cost.async64.bytes", async_bytes);

  json record = {{"type", "client_cost"}, {"n", 5}, {"rep", rep},
                 {"blocking", {{"cycles", cycles}, {"failed", failures}, {"cpu_us_per_cycle", blocking_cpu_us},
                               {"system_cpu_us_per_cycle", blocking_sys_us},
                               {"operator_new_per_cycle", blocking_allocs}, {"bytes_per_cycle", blocking_bytes},
                               {"cpu_share_of_wall", cpu / wall}}},
                 {"async_64_in_flight", {{"cycles", done}, {"cpu_us_per_cycle", async_cpu_us},
                                         {"system_cpu_us_per_cycle", async_sys_us},
                                         {"operator_new_per_cycle", async_allocs},
                                         {"bytes_per_cycle", async_bytes}}}};
  char line[240];
  std::snprintf(line, sizeof(line),
                "client cost N=5: blocking %.1f us CPU, %.1f news/cycle; async x64 %.1f us CPU, %.1f news/cycle",
                blocking_cpu_us, blocking_allocs, async_cpu_us, async_allocs);
  record["progress"] = line;
  run.record(std::move(record));
}

void phase_hold_locks(Run& run) {
  const std::size_t count = run.config.hold_locks;
  auto options = options_for(run.uris(5));
  options.ttl = 60s;
  options.command_timeout = 1000ms;  // a deep queue must not turn into timeouts
  auto client = connect(std::move(options));
  constexpr std::ptrdiff_t kBatch = 512;  // acquires in flight at once: the loop is never swamped

  const bool hwm_reset = reset_hwm();  // so that VmHWM below is this phase's peak
  const long rss_before = rss_kib();
  std::vector<redlock::Lock> locks(count);  // the caller keeps the Lock values: part of holding
  std::atomic<std::size_t> granted{0}, refused{0}, released{0};
  std::counting_semaphore<kBatch> slots(kBatch);

  const auto t0 = SteadyClock::now();
  for (std::size_t i = 0; i < count; ++i) {
    slots.acquire();
    client->acquire_async("h" + std::to_string(i), [&, i](Result r) {
      if (r) {
        locks[i] = std::move(*r.lock);
        granted.fetch_add(1);
      } else {
        refused.fetch_add(1);
      }
      slots.release();
    });
  }
  for (std::ptrdiff_t i = 0; i < kBatch; ++i) slots.acquire();  // every callback has run
  const double acquire_s = micros(t0, SteadyClock::now()) / 1e6;
  const long rss_held = rss_kib();
  std::size_t lock_bytes = 0;  // what the caller's Lock values occupy (object + heap strings)
  for (const auto& lock : locks) {
    lock_bytes += sizeof(redlock::Lock);
    for (const std::string* s : {&lock.resource, &lock.key, &lock.token}) {
      if (s->capacity() > 15) lock_bytes += s->capacity() + 1;
    }
  }
  for (std::ptrdiff_t i = 0; i < kBatch; ++i) slots.release();

  const auto t1 = SteadyClock::now();
  for (std::size_t i = 0; i < count; ++i) {
    if (locks[i].token.empty()) continue;
    slots.acquire();
    client->release_async(std::move(locks[i]), [&](Result r) {
      if (r) released.fetch_add(1);
      slots.release();
    });
  }
  for (std::ptrdiff_t i = 0; i < kBatch; ++i) slots.acquire();
  const double release_s = micros(t1, SteadyClock::now()) / 1e6;
  // Peaks over acquiring, holding and releasing (the release queue holds its own copies).
  const long hwm_held = hwm_kib();
  const long maxrss_held = maxrss_kib();
  for (std::ptrdiff_t i = 0; i < kBatch; ++i) slots.release();
  client.reset();
  locks.clear();
  locks.shrink_to_fit();
  const long rss_after = rss_kib();

  const double held = static_cast<double>(granted.load());
  const double per_lock = held > 0 ? static_cast<double>(rss_held - rss_before) * 1024.0 / held : 0;
  if (!hwm_reset) run.note("could not reset VmHWM (/proc/self/clear_refs): the hold phase's peak is the process's");
  run.add("hold.count", held);
  run.add("hold.rss_before_kib", static_cast<double>(rss_before));
  run.add("hold.rss_held_kib", static_cast<double>(rss_held));
  // The kernel updates its high-water mark lazily: a reading taken while holding can exceed it.
  const long peak = std::max({hwm_held, maxrss_held, rss_held});
  run.add("hold.hwm_kib", static_cast<double>(hwm_held));
  run.add("hold.peak_kib", static_cast<double>(peak));
  run.add("hold.maxrss_kib", static_cast<double>(maxrss_held));
  run.add("hold.rss_after_kib", static_cast<double>(rss_after));
  run.add("hold.bytes_per_lock", per_lock);
  run.add("hold.lock_value_bytes", held > 0 ? static_cast<double>(lock_bytes) / held : 0);
  run.add("hold.acquire_per_s", held / acquire_s);
  run.add("hold.release_per_s", static_cast<double>(released.load()) / release_s);
  json record = {{"type", "hold_locks"}, {"n", 5}, {"locks", count}, {"granted", granted.load()},
                 {"refused", refused.load()}, {"released", released.load()}, {"in_flight", kBatch},
                 {"ttl_ms", 60000}, {"command_timeout_ms", 1000}, {"rss_before_kib", rss_before}, {"rss_held_kib", rss_held},
                 {"vm_hwm_kib", hwm_held}, {"vm_hwm_reset_before", hwm_reset}, {"ru_maxrss_kib", maxrss_held},
                 {"peak_rss_kib", peak}, {"rss_after_release_kib", rss_after},
                 {"bytes_per_held_lock", per_lock},
                 {"lock_value_bytes_per_lock", held > 0 ? static_cast<double>(lock_bytes) / held : 0},
                 {"acquire_seconds", acquire_s}, {"release_seconds", release_s}};
  char line[240];
  std::snprintf(line, sizeof(line), "holding %zu locks (N=5): RSS %ld -> %ld KiB, peak %ld KiB, %.0f B/lock", count,
                rss_before, rss_held, peak, per_lock);
  record["progress"] = line;
  run.record(std::move(record));
}

void flush_masters(Run& run) {
  // ASYNC: the server frees the keys in a background thread and answers at once. A busy
  // machine can still make one call miss the support helper's 1 s timeout: retry, and on
  // failure go on with the keys left in place rather than abort the run.
  for (auto& master : run.masters) {
    if (!master->running()) continue;
    for (int attempt = 1;; ++attempt) {
      try {
        master->command({"FLUSHALL", "ASYNC"});
        break;
      } catch (const std::exception& e) {
        if (attempt == 3) {
          run.note(std::string("FLUSHALL failed 3 times, keys left in place: ") + e.what());
          break;
        }
        std::this_thread::sleep_for(100ms);
      }
    }
  }
}

}  // namespace bench

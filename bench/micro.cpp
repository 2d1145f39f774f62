// SPDX-License-Identifier: Apache-2.0
// redlock_micro — Google Benchmark binaries for the hot paths reachable through the public API.
//
// Network benchmarks run against real redis-servers this binary starts on 127.0.0.1 and use
// UseRealTime() (the caller mostly waits: CPU time of the calling thread would mean nothing).
// Token generation, command encoding and the quorum tally live in lib/detail, which bench/
// does not include: they are measured end-to-end (BM_AcquireRelease_*, BM_AcquireTaken_N5,
// BM_HandOff_InvalidResource) and, for the token, by the syscall it is made of
// (BM_Getrandom16). Every benchmark that allocates reports `allocs/op`: heap allocations per
// iteration, every malloc of the process, all threads, hiredis and libuv included
// (alloc_counter.h); batches also report `allocs/cycle` and `cpu_us/cycle` (process CPU).
//
//   redlock_micro [--pin] [Google Benchmark flags, e.g. --benchmark_filter=AcquireRelease]
#include <sys/random.h>
#include <sys/resource.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <future>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "alloc_counter.h"
#include "detail/event_loop.h"
#include "redlock/redlock.h"
#include "support/redis_server.h"
#include "sys.h"

namespace {

using namespace std::chrono_literals;
using redlock::Client;
using redlock::Result;

std::vector<std::unique_ptr<redlock::support::RedisServer>> g_masters;
std::atomic<std::uint64_t> g_sequence{0};

// Setup acquires (outside the timed loop) retry: on a busy machine one attempt can miss its
// 50 ms deadline.
redlock::AcquireOptions with_retries() {
  redlock::AcquireOptions options;
  options.retry_count = 10;
  return options;
}

// A fresh resource name (short enough for std::string's small buffer: no allocation).
// (Appending rather than "m" + std::to_string(): GCC 12 -O3 reports a false -Wrestrict there.)
std::string fresh_name() {
  std::string name = "m";
  name += std::to_string(g_sequence.fetch_add(1, std::memory_order_relaxed));
  return name;
}

std::unique_ptr<Client> connect(std::size_t n) {
  redlock::ClientOptions options;
  for (std::size_t i = 0; i < n; ++i) options.masters.push_back(g_masters.at(i)->uri());
  options.key_prefix = "micro:";
  options.retry_count = 0;
  // The masters were started by this binary seconds ago; the restart guard would not count
  // their grants for one max_lock_ttl. Its per-acquire cost once they are trusted is nil.
  options.restart_guard = false;
  auto client = std::make_unique<Client>(options);
  client->wait_connected(n, 5s);
  return client;
}

// CPU time of this whole process (every thread: the caller and the Client's loop thread).
struct ProcessCpu {
  std::chrono::microseconds user{0};
  std::chrono::microseconds system{0};
};
ProcessCpu process_cpu() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto us = [](const timeval& tv) { return std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec); };
  return {us(usage.ru_utime), us(usage.ru_stime)};
}

// Reports heap allocations per iteration since construction: `allocs/op`, every malloc of
// the process, all threads (alloc_counter.h). Given the cycles of one iteration (a batch),
// also `allocs/cycle`, `cpu_us/cycle` (process CPU, user + system) and `user_us/cycle` (user
// only: the kernel's part is mostly loopback TCP, which on this machine delivers the
// masters' packets in our system time too).
class AllocScope {
 public:
  explicit AllocScope(benchmark::State& state) : AllocScope(state, 0) {}
  AllocScope(benchmark::State& state, std::int64_t cycles_per_iteration)
      : state_(state), per_iteration_(cycles_per_iteration), start_(bench::alloc_count()), cpu_start_(process_cpu()) {}
  ~AllocScope() {
    const auto end = bench::alloc_count();
    const ProcessCpu now = process_cpu();
    const auto user = now.user - cpu_start_.user;
    const auto cpu = user + (now.system - cpu_start_.system);
    const auto calls = static_cast<double>(end.calls - start_.calls);
    state_.counters["allocs/op"] = benchmark::Counter(calls, benchmark::Counter::kAvgIterations);
    if (per_iteration_ > 0 && state_.iterations() > 0) {
      const auto cycles = static_cast<double>(state_.iterations()) * static_cast<double>(per_iteration_);
      state_.counters["allocs/cycle"] = calls / cycles;
      state_.counters["cpu_us/cycle"] = static_cast<double>(cpu.count()) / cycles;
      state_.counters["user_us/cycle"] = static_cast<double>(user.count()) / cycles;
    }
  }
  AllocScope(const AllocScope&) = delete;
  AllocScope& operator=(const AllocScope&) = delete;

 private:
  benchmark::State& state_;
  const std::int64_t per_iteration_;
  const bench::AllocCount start_;
  const ProcessCpu cpu_start_;
};

// ---------------------------------------------------------------------- over the network

void acquire_release(benchmark::State& state, std::size_t n) {
  auto client = connect(n);
  std::uint64_t failed = 0;
  {
    const AllocScope allocs(state, 1);  // one cycle an iteration: cpu_us/cycle
    for (auto _ : state) {
      const Result r = client->acquire(fresh_name());
      if (r) {
        client->release(*r.lock);
      } else {
        ++failed;
      }
    }
  }
  state.counters["failed"] = static_cast<double>(failed);
}

// One blocking acquire + release cycle (2 rounds), fresh resource each time.
void BM_AcquireRelease_N1(benchmark::State& state) { acquire_release(state, 1); }
void BM_AcquireRelease_N3(benchmark::State& state) { acquire_release(state, 3); }
void BM_AcquireRelease_N5(benchmark::State& state) { acquire_release(state, 5); }
BENCHMARK(BM_AcquireRelease_N1)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AcquireRelease_N3)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AcquireRelease_N5)->UseRealTime()->Unit(benchmark::kMicrosecond);

// A fenced acquire (AcquireOptions::fencing: one more parallel round for the fencing
// counter) + release. Waits first until every master's counter has been caught up.
void BM_AcquireReleaseFenced_N5(benchmark::State& state) {
  auto client = connect(5);
  redlock::AcquireOptions fenced;
  fenced.fencing = true;
  for (int i = 0; i < 200; ++i) {  // catch-up runs in the background after connecting
    const Result r = client->acquire(fresh_name(), fenced);
    if (r) {
      client->release(*r.lock);
      if (r.count(redlock::MasterStatus::ok) == 5) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  std::uint64_t failed = 0;
  {
    const AllocScope allocs(state);
    for (auto _ : state) {
      const Result r = client->acquire(fresh_name(), fenced);
      if (r) {
        client->release(*r.lock);
      } else {
        ++failed;
      }
    }
  }
  state.counters["failed"] = static_cast<double>(failed);
}
BENCHMARK(BM_AcquireReleaseFenced_N5)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The failure path: every master answers nil (held by another owner), the round is decided
// "taken", and the library releases the attempt in the background. Reply handling of
// refusals plus the quorum decision, end to end.
void BM_AcquireTaken_N5(benchmark::State& state) {
  auto owner = connect(5);
  auto contender = connect(5);
  const std::string resource = fresh_name();
  redlock::AcquireOptions hold = with_retries();
  hold.ttl = 60s;
  const Result held = owner->acquire(resource, hold);
  if (!held) {
    state.SkipWithError("could not take the resource for the contender to fail on");
    return;
  }
  std::uint64_t unexpected = 0;
  {
    const AllocScope allocs(state);
    for (auto _ : state) {
      const Result r = contender->acquire(resource);
      if (r.outcome != redlock::Outcome::taken) ++unexpected;
    }
  }
  owner->release(*held.lock);
  state.counters["unexpected"] = static_cast<double>(unexpected);
}
BENCHMARK(BM_AcquireTaken_N5)->UseRealTime()->Unit(benchmark::kMicrosecond);

// K acquire_async -> release_async cycles started together; the iteration ends when all K
// have completed. items_per_second = cycles per second with K in flight (batch-synchronous;
// redlock_compare measures the steady-state pipeline). `name` makes each resource name.
template <typename MakeName>
void acquire_release_batch(benchmark::State& state, MakeName name) {
  auto client = connect(5);
  const auto k = static_cast<std::ptrdiff_t>(state.range(0));
  std::atomic<std::uint64_t> failed{0};
  {
    const AllocScope allocs(state, k);
    for (auto _ : state) {
      std::latch all_done(k);
      // The callbacks capture one pointer, which fits in std::function's own storage: the
      // harness adds no allocation of its own to the library's (three references would).
      struct Batch {
        Client& client;
        std::atomic<std::uint64_t>& failed;
        std::latch& all_done;
      } batch{*client, failed, all_done};
      for (std::ptrdiff_t i = 0; i < k; ++i) {
        client->acquire_async(name(), [b = &batch](Result r) {
          if (!r) {
            b->failed.fetch_add(1);
            b->all_done.count_down();
            return;
          }
          b->client.release_async(std::move(*r.lock), [b](Result released) {
            if (!released) b->failed.fetch_add(1);
            b->all_done.count_down();
          });
        });
      }
      all_done.wait();
    }
  }
  state.SetItemsProcessed(state.iterations() * k);
  state.counters["failed"] = static_cast<double>(failed.load());
}

// Short resource names (the key fits std::string's small buffer).
void BM_AcquireReleaseBatch_N5(benchmark::State& state) { acquire_release_batch(state, fresh_name); }
BENCHMARK(BM_AcquireReleaseBatch_N5)->Arg(1)->Arg(16)->Arg(64)->Arg(256)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same with a realistic resource name (over std::string's small buffer): 9 allocations a
// cycle, not 4, by a uprobe on glibc's malloc (2026-11-27): the caller's name, the operation's
// key, the Lock's key, and a copy of the key in each of the two rounds (RoundArgs::key; a
// decided release round keeps it for a late NOSCRIPT's resend).
void BM_AcquireReleaseBatchLongName_N5(benchmark::State& state) {
  acquire_release_batch(state, [] { return "orders:customer-4711:invoice-" + fresh_name(); });
}
BENCHMARK(BM_AcquireReleaseBatchLongName_N5)->Arg(1)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

// K extend_async of K held locks started together (a lease's renewal, without the lease):
// one round each; the Lock goes back in for the next iteration. A lock whose extend failed
// is taken again, untimed (`failed` counts them).
void BM_ExtendBatch_N5(benchmark::State& state) {
  auto client = connect(5);
  const auto k = static_cast<std::size_t>(state.range(0));
  std::vector<redlock::Lock> locks;
  for (std::size_t i = 0; i < k; ++i) {
    redlock::AcquireOptions hold = with_retries();
    hold.ttl = 60s;
    Result r = client->acquire(fresh_name(), hold);
    if (!r) {
      state.SkipWithError("could not take the locks to extend");
      return;
    }
    locks.push_back(std::move(*r.lock));
  }
  std::atomic<std::uint64_t> failed{0};
  {
    const AllocScope allocs(state, static_cast<std::int64_t>(k));
    for (auto _ : state) {
      std::latch all_done(static_cast<std::ptrdiff_t>(k));
      struct Batch {
        std::atomic<std::uint64_t>& failed;
        std::latch& all_done;
      } batch{failed, all_done};
      for (std::size_t i = 0; i < k; ++i) {
        redlock::Lock* slot = &locks[i];
        // Moved in and out: extending costs no copy of the Lock. (Two pointers: no allocation.)
        client->extend_async(std::move(*slot), [b = &batch, slot](Result r) {
          if (r) {
            *slot = std::move(*r.lock);
          } else {
            b->failed.fetch_add(1);  // (a timeout on a busy machine): the slot is refilled below
          }
          b->all_done.count_down();
        });
      }
      all_done.wait();
      for (auto& lock : locks) {
        if (!lock.token.empty()) continue;
        state.PauseTiming();  // (its allocations still count: see `failed`)
        redlock::AcquireOptions hold = with_retries();
        hold.ttl = 60s;
        Result r = client->acquire(fresh_name(), hold);
        if (r) lock = std::move(*r.lock);
        state.ResumeTiming();
      }
    }
  }
  for (const auto& lock : locks) {
    if (!lock.token.empty()) client->release(lock);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(k));
  state.counters["failed"] = static_cast<double>(failed.load());
}
BENCHMARK(BM_ExtendBatch_N5)->Arg(1)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------- no network

// N acquires of one held key wait (listening for its release, no poll within their wait) and
// give up together. cpu_us/cycle = process CPU per waiter for its whole wait: attempt, watch,
// give-up. It stays flat as N grows: leaving the line is O(log N) (with a vector's erase it
// was O(N): 30,000 waiters giving up together held the loop thread for seconds).
void BM_WaitersGivingUpTogether(benchmark::State& state) {
  redlock::ClientOptions options;
  options.masters = {g_masters.at(0)->uri()};
  options.key_prefix = "micro:";
  options.restart_guard = false;
  options.retry_delay = 60s;  // no poll within the wait: they only listen
  Client client(options);
  client.wait_connected(1, 5s);
  g_masters.at(0)->command({"SET", "micro:held", "someone-else", "PX", "600000"});
  const auto n = static_cast<std::ptrdiff_t>(state.range(0));
  redlock::AcquireOptions waiting;
  waiting.retry_count = -1;
  waiting.wait = 300ms;
  std::atomic<std::uint64_t> acquired{0};
  {
    const AllocScope allocs(state, n);
    for (auto _ : state) {
      std::latch all_done(n);
      for (std::ptrdiff_t i = 0; i < n; ++i) {
        client.acquire_async("held", [&](Result r) {
          if (r) acquired.fetch_add(1);
          all_done.count_down();
        }, waiting);
      }
      all_done.wait();
    }
  }
  g_masters.at(0)->command({"DEL", "micro:held"});
  state.counters["acquired"] = static_cast<double>(acquired.load());  // 0: the key stayed held
}
BENCHMARK(BM_WaitersGivingUpTogether)->Arg(1000)->Arg(10000)->Arg(100000)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);

// The fixed cost of a blocking call: post to the loop thread, validate, answer, wake the
// caller. An empty resource is rejected on the loop before anything is sent.
void BM_HandOff_InvalidResource(benchmark::State& state) {
  auto client = connect(1);
  std::uint64_t unexpected = 0;
  {
    const AllocScope allocs(state);
    for (auto _ : state) {
      const Result r = client->acquire("");
      if (r.outcome != redlock::Outcome::invalid_argument) ++unexpected;
    }
  }
  state.counters["unexpected"] = static_cast<double>(unexpected);
}
BENCHMARK(BM_HandOff_InvalidResource)->UseRealTime()->Unit(benchmark::kMicrosecond);

// One pass of the loop's timers in which every task due schedules another task, due at once
// and ahead of the rest of the pass in deadline order (lib/detail/event_loop.h: those wait
// for the next pass). N tasks, then N more: about N log N. A pass that rescanned from the
// start past the new tasks (before d2ec4c0) cost N squared: Complexity() prints which.
void BM_TimerPass_EachDueTaskSchedulesOneDue(benchmark::State& state) {
  redlock::detail::EventLoop loop(nullptr);
  const auto n = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    std::promise<void> done;
    std::size_t ran = 0;
    loop.post([&] {
      const std::uint64_t due = redlock::detail::now_ns();
      for (std::size_t i = 0; i < n; ++i) {
        loop.schedule_at(due + 1 + i, [&, due] {
          loop.schedule_at(due, [&] {
            if (++ran == n) done.set_value();
          });
        });
      }
    });
    done.get_future().wait();
  }
  loop.post([&] { loop.close(); });
  loop.join();
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_TimerPass_EachDueTaskSchedulesOneDue)
    ->RangeMultiplier(4)
    ->Range(256, 16384)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Complexity(benchmark::oNLogN);

// The syscall behind every token: 16 bytes from getrandom(2) (the library then hex-encodes
// them; that part is internal and not measured here).
void BM_Getrandom16(benchmark::State& state) {
  unsigned char bytes[16];
  for (auto _ : state) {
    const ssize_t got = getrandom(bytes, sizeof(bytes), 0);
    benchmark::DoNotOptimize(got);
    benchmark::DoNotOptimize(bytes);
  }
}
BENCHMARK(BM_Getrandom16);

// A realistic five-master Result, taken from a real acquire.
Result sample_result() {
  static const Result result = [] {
    auto client = connect(5);
    Result r = client->acquire(fresh_name(), with_retries());
    if (r) client->release(*r.lock);
    return r;
  }();
  return result;
}

void BM_ResultFormat(benchmark::State& state) {
  const Result r = sample_result();
  const AllocScope allocs(state);
  for (auto _ : state) benchmark::DoNotOptimize(redlock::format_result(r));
}
BENCHMARK(BM_ResultFormat);

// What handing a Result around by value costs (callbacks take it by value).
void BM_ResultCopy_N5(benchmark::State& state) {
  const Result r = sample_result();
  const AllocScope allocs(state);
  for (auto _ : state) {
    Result copy = r;
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_ResultCopy_N5);

void BM_ResultCount_N5(benchmark::State& state) {
  const Result r = sample_result();
  for (auto _ : state) benchmark::DoNotOptimize(r.count(redlock::MasterStatus::ok));
}
BENCHMARK(BM_ResultCount_N5);

// A lock holder's check before doing work.
void BM_Remaining(benchmark::State& state) {
  auto client = connect(1);
  const Result r = client->acquire(fresh_name(), with_retries());
  if (!r) {
    state.SkipWithError("acquire failed");
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(client->remaining(*r.lock));
  client->release(*r.lock);
}
BENCHMARK(BM_Remaining);

// Configuration path (not hot, but public): one master URI with credentials and a db.
void BM_EndpointParse(benchmark::State& state) {
  const AllocScope allocs(state);
  for (auto _ : state) {
    benchmark::DoNotOptimize(redlock::Endpoint::parse("redis://user:s%40cret@127.0.0.1:6380/2"));
  }
}
BENCHMARK(BM_EndpointParse);

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first (Google Benchmark rejects flags it does not know).
  bool pin = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--pin") == 0) {
      pin = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::signal(SIGPIPE, SIG_IGN);
  if (pin && bench::online_cpus() >= 2) pin = bench::pin_this_thread(0);

  for (int i = 0; i < 5; ++i) {
    g_masters.push_back(std::make_unique<redlock::support::RedisServer>());
    if (pin) bench::pin_process(g_masters.back()->pid(), 1);
  }
  benchmark::AddCustomContext("masters", "5 local redis-servers on 127.0.0.1");
  benchmark::AddCustomContext("pinned", pin ? "client CPU 0, masters CPU 1" : "no");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_masters.clear();
  return 0;
}

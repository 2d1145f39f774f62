// SPDX-License-Identifier: Apache-2.0
// bench/sys.h — small OS and statistics helpers shared by the benchmark binaries.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/process_memory.h"

namespace bench {

using SteadyClock = std::chrono::steady_clock;

// Microseconds between two steady_clock readings, as a double.
inline double micros(SteadyClock::time_point from, SteadyClock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

// ---- statistics

struct Percentiles {
  std::size_t count = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};
// Nearest-rank percentiles of `samples` (sorted in place).
Percentiles percentiles(std::vector<double>& samples);
// Nearest-rank percentile of already sorted samples, q in [0, 1].
double percentile_sorted(const std::vector<double>& sorted, double q);

// Median, minimum and maximum of one figure across repetitions.
struct Spread {
  double median = 0, min = 0, max = 0;
  std::size_t reps = 0;
};
Spread spread(std::vector<double> values);

// ---- CPU placement

int online_cpus();
// Pins the calling thread (and so every thread it creates afterwards) to `cpu`.
bool pin_this_thread(int cpu);
// Pins every thread of process `pid` (each entry of /proc/PID/task) to `cpu`.
// Returns how many threads were pinned; 0 on failure.
int pin_process(pid_t pid, int cpu);

// ---- CPU time of another process

// Nanoseconds process `pid` has run on a CPU, summed over its threads
// (/proc/PID/task/*/schedstat, first field); -1 if unavailable.
long long process_run_ns(pid_t pid);
// The same plus the time its threads waited on a run queue, runnable but not running
// (second field); both -1 if unavailable.
struct SchedNs {
  long long run = -1, wait = -1;
};
SchedNs process_sched_ns(pid_t pid);

// Per CPU (index = CPU number): seconds busy (user, nice, system, irq, softirq), idle (idle,
// iowait) and stolen by the hypervisor since boot, from /proc/stat (USER_HZ ticks, 10 ms);
// empty if unavailable.
struct CpuStat {
  double busy_s = 0, idle_s = 0, steal_s = 0;
};
std::vector<CpuStat> cpu_stats();

// ---- resource usage of this process

struct CpuTimes {
  double user = 0, system = 0;  // seconds
  [[nodiscard]] double total() const { return user + system; }
};
CpuTimes process_cpu();        // all threads of this process (getrusage RUSAGE_SELF)
// Children that have ended and been waited for (getrusage RUSAGE_CHILDREN): a redis-benchmark
// run once reaped; not the masters, which are children too but still running.
CpuTimes reaped_children_cpu();
// What the kernel did for this process (all threads): context switches (getrusage
// ru_nvcsw + ru_nivcsw: each is one sleep or preemption) and read- and write-family system
// calls (/proc/self/io syscr, syscw; epoll_wait and futex are not in them).
struct KernelCounts {
  double voluntary_switches = 0, involuntary_switches = 0, read_calls = 0, write_calls = 0;
};
KernelCounts process_kernel_counts();
double process_cpu_seconds();  // process_cpu().total()
using redlock::support::hwm_kib;        // support/process_memory.h: VmRSS, VmHWM, resetting VmHWM
using redlock::support::reset_hwm;
using redlock::support::rss_kib;
long maxrss_kib();             // getrusage ru_maxrss (lifetime peak; cannot be reset)

// ---- child processes

// Absolute path of `name` found in PATH, or empty.
std::string find_executable(const std::string& name);

// A child started with its stdout on a pipe (stderr to /dev/null); inherits this process's
// CPU affinity.
struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;
};
std::optional<Child> spawn_capture(const std::vector<std::string>& argv);
// Reads the child's stdout to EOF and reaps it. Returns the output and whether it exited 0.
std::pair<std::string, bool> finish(Child child);
// spawn_capture + finish.
std::pair<std::string, bool> run_capture(const std::vector<std::string>& argv);

// ---- ports

// A TCP port of 127.0.0.1 that was free a moment ago (bound to port 0, read, closed), or 0.
// Racy by nature: whoever listens on it next must cope with losing the race.
std::uint16_t free_loopback_port();

// ---- redis-benchmark

struct RedisBenchmarkFigures {
  double rps = 0;
  double avg_ms = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
  std::uint64_t requests = 0;
};
// Parses the last data line of `redis-benchmark --csv` output.
std::optional<RedisBenchmarkFigures> parse_redis_benchmark_csv(const std::string& output);

// ---- description of the machine

std::string cpu_model();
std::string kernel_release();
std::string hostname();
std::string utc_timestamp();  // "2024-01-01T12:00:00Z"
std::string load_average();   // first three fields of /proc/loadavg, e.g. "0.52 0.61 0.70"

}  // namespace bench

// SPDX-License-Identifier: Apache-2.0
#include "sys.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

extern char** environ;

namespace bench {

// ------------------------------------------------------------------ statistics

double percentile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  // Nearest rank: the smallest sample with at least q of the samples at or below it.
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const auto index = static_cast<std::size_t>(std::max(1.0, rank)) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}

Percentiles percentiles(std::vector<double>& samples) {
  Percentiles p;
  p.count = samples.size();
  if (samples.empty()) return p;
  std::sort(samples.begin(), samples.end());
  p.p50 = percentile_sorted(samples, 0.50);
  p.p90 = percentile_sorted(samples, 0.90);
  p.p99 = percentile_sorted(samples, 0.99);
  p.max = samples.back();
  double sum = 0;
  for (const double s : samples) sum += s;
  p.mean = sum / static_cast<double>(samples.size());
  return p;
}

Spread spread(std::vector<double> values) {
  Spread s;
  s.reps = values.size();
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  s.median = n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
  s.min = values.front();
  s.max = values.back();
  return s;
}

// ------------------------------------------------------------------ CPU placement

int online_cpus() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

namespace {

bool set_affinity(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<std::size_t>(cpu), &set);
  return ::sched_setaffinity(tid, sizeof(set), &set) == 0;
}

}  // namespace

bool pin_this_thread(int cpu) { return set_affinity(0, cpu); }

int pin_process(pid_t pid, int cpu) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return set_affinity(pid, cpu) ? 1 : 0;
  int pinned = 0;
  while (const dirent* entry = ::readdir(d)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const auto tid = static_cast<pid_t>(std::strtol(entry->d_name, nullptr, 10));
    if (set_affinity(tid, cpu)) ++pinned;
  }
  ::closedir(d);
  return pinned;
}

SchedNs process_sched_ns(pid_t pid) {
  if (pid <= 0) return {};
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return {};
  SchedNs total{0, 0};
  bool any = false;
  while (const dirent* entry = ::readdir(d)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::ifstream in(dir + "/" + entry->d_name + "/schedstat");
    long long run = 0, wait = 0;
    if (in >> run >> wait) {
      total.run += run;
      total.wait += wait;
      any = true;
    }
  }
  ::closedir(d);
  return any ? total : SchedNs{};
}

long long process_run_ns(pid_t pid) { return process_sched_ns(pid).run; }

std::vector<CpuStat> cpu_stats() {
  std::vector<CpuStat> out;
  std::ifstream in("/proc/stat");
  const double tick = 1.0 / static_cast<double>(std::max(1L, ::sysconf(_SC_CLK_TCK)));
  std::string line;
  while (std::getline(in, line)) {
    // "cpuN user nice system idle iowait irq softirq steal ..." (the "cpu " total is skipped)
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream fields(line.substr(3));
    std::size_t cpu = 0;
    long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!(fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) continue;
    fields >> steal;  // absent on old kernels
    if (out.size() <= cpu) out.resize(cpu + 1);
    out[cpu].busy_s = static_cast<double>(user + nice + system + irq + softirq) * tick;
    out[cpu].idle_s = static_cast<double>(idle + iowait) * tick;
    out[cpu].steal_s = static_cast<double>(steal) * tick;
  }
  return out;
}

// ------------------------------------------------------------------ resource usage

namespace {
CpuTimes cpu_of(int who) {
  rusage usage{};
  ::getrusage(who, &usage);
  const auto seconds = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return {seconds(usage.ru_utime), seconds(usage.ru_stime)};
}
}  // namespace

CpuTimes process_cpu() { return cpu_of(RUSAGE_SELF); }
CpuTimes reaped_children_cpu() { return cpu_of(RUSAGE_CHILDREN); }

double process_cpu_seconds() { return process_cpu().total(); }

KernelCounts process_kernel_counts() {
  KernelCounts counts;
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  counts.voluntary_switches = static_cast<double>(usage.ru_nvcsw);
  counts.involuntary_switches = static_cast<double>(usage.ru_nivcsw);
  std::ifstream io("/proc/self/io");
  std::string name;
  double value = 0;
  while (io >> name >> value) {
    if (name == "syscr:") counts.read_calls = value;
    if (name == "syscw:") counts.write_calls = value;
  }
  return counts;
}


long maxrss_kib() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// ------------------------------------------------------------------ child processes

std::string find_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : std::string();
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string candidate = (end > begin ? dirs.substr(begin, end - begin) : std::string(".")) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return {};
}

std::optional<Child> spawn_capture(const std::vector<std::string>& argv) {
  if (argv.empty()) return std::nullopt;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  std::vector<std::string> args = argv;
  std::vector<char*> raw;
  raw.reserve(args.size() + 1);
  for (auto& a : args) raw.push_back(a.data());
  raw.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0].c_str(), &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return std::nullopt;
  }
  return Child{pid, fds[0]};
}

std::pair<std::string, bool> finish(Child child) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(child.stdout_fd, buffer, sizeof(buffer));
    if (got > 0) {
      out.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(child.stdout_fd);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) == -1 && errno == EINTR) {
  }
  return {out, WIFEXITED(status) && WEXITSTATUS(status) == 0};
}

std::pair<std::string, bool> run_capture(const std::vector<std::string>& argv) {
  auto child = spawn_capture(argv);
  if (!child) return {{}, false};
  return finish(*child);
}

// ------------------------------------------------------------------ ports

std::uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  std::uint16_t port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  ::close(fd);
  return port;
}

// ------------------------------------------------------------------ redis-benchmark

namespace {

// Splits one CSV line of quoted fields: "a","b","c".
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> fields;
  std::string current;
  bool quoted = false;
  for (const char c : line) {
    if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      fields.push_back(current);
      current.clear();
    } else if (c != '\r') {
      current += c;
    }
  }
  fields.push_back(current);
  return fields;
}

}  // namespace

std::optional<RedisBenchmarkFigures> parse_redis_benchmark_csv(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  std::optional<RedisBenchmarkFigures> last;
  while (std::getline(in, line)) {
    const auto f = csv_fields(line);
    if (f.size() < 8 || f[1] == "rps") continue;
    char* end = nullptr;
    const double rps = std::strtod(f[1].c_str(), &end);
    if (end == f[1].c_str()) continue;
    RedisBenchmarkFigures r;
    r.rps = rps;
    r.avg_ms = std::strtod(f[2].c_str(), nullptr);
    r.p50_ms = std::strtod(f[4].c_str(), nullptr);
    r.p95_ms = std::strtod(f[5].c_str(), nullptr);
    r.p99_ms = std::strtod(f[6].c_str(), nullptr);
    r.max_ms = std::strtod(f[7].c_str(), nullptr);
    last = r;
  }
  return last;
}

// ------------------------------------------------------------------ machine

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}

std::string kernel_release() {
  utsname u{};
  if (::uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release;
}

std::string hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "unknown";
  return a + " " + b + " " + c;
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace bench

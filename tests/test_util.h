// SPDX-License-Identifier: Apache-2.0
// Shared helpers for tests that run against real redis-server processes.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "redlock/redlock.h"
#include "support/redis_server.h"

namespace redlock::testing {

using namespace std::chrono_literals;
using support::RedisServer;
using support::RedisServerGroup;
using support::Reply;

// Options for a test client: no retries unless a test asks, and deadlines generous enough
// for a loaded machine running a sanitizer build.
inline ClientOptions options_for(const std::vector<std::string>& masters) {
  ClientOptions options;
  options.masters = masters;
  options.retry_count = 0;
  options.retry_delay = 5ms;
  options.retry_jitter = 3ms;
  options.command_timeout = 500ms;
  options.reconnect_min = 20ms;
  options.reconnect_max = 200ms;
  // The suite's masters were started a moment ago and have never held a lock, so there is
  // nothing a restart could have made them forget; restart_guard_test turns it on.
  options.restart_guard = false;
  return options;
}

inline std::size_t quorum_of_n(std::size_t n) { return n / 2 + 1; }

// One acquire with this ttl and the Client's other defaults (the tests' most common call).
inline Result acquire_with_ttl(Client& client, const std::string& resource, Milliseconds ttl) {
  AcquireOptions options;
  options.ttl = ttl;
  return client.acquire(resource, options);
}

inline ClientOptions options_for(const RedisServerGroup& group) { return options_for(group.uris()); }

inline std::optional<std::string> get(const RedisServer& server, const std::string& key) {
  const Reply reply = server.command({"GET", key});
  if (reply.type == Reply::Type::nil) return std::nullopt;
  return reply.str;
}

// How many masters hold `key` with exactly `value`.
inline std::size_t holding(const RedisServerGroup& group, const std::string& key, const std::string& value) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (group[i].running() && get(group[i], key) == value) ++count;
  }
  return count;
}

// Processes a test forked: SIGKILLed and reaped when it leaves early (a failed ASSERT), so
// none is left stopped or looping. A child it reaped itself is taken off with reaped().
class ForkedChildren {
 public:
  ForkedChildren() = default;
  ForkedChildren(const ForkedChildren&) = delete;
  ForkedChildren& operator=(const ForkedChildren&) = delete;
  ~ForkedChildren() {
    for (const pid_t pid : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  void add(pid_t pid) { pids_.push_back(pid); }
  void reaped(pid_t pid) { std::erase(pids_, pid); }

 private:
  std::vector<pid_t> pids_;
};

// The state letter of thread `tid` of this process (/proc: 'S' while it sleeps in a wait).
inline char thread_state(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(") ");
  return paren == std::string::npos || paren + 2 >= text.size() ? '?' : text[paren + 2];
}

// Every thread of this process but the caller sleeps in a wait (a Client's loop thread: in
// its poll, holding no lock).
inline bool other_threads_asleep() {
  const auto self = static_cast<pid_t>(::syscall(SYS_gettid));
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    const auto tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    if (tid != self && thread_state(tid) != 'S') return false;
  }
  return true;
}

// Waits for `child` and says how it ended: "exit N" or "killed by signal N".
inline std::string how_it_ended(pid_t child) {
  int status = 0;
  if (::waitpid(child, &status, 0) != child) return std::string("waitpid: ") + std::strerror(errno);
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "exit " + std::to_string(WEXITSTATUS(status));
}

// Runs `in_child` in a child of fork() and says how the child ended: "exit 0" if it returned
// true, "killed by signal 14" if it hung for 10 s.
inline std::string in_a_child(const std::function<bool()>& in_child) {
  const pid_t child = ::fork();
  if (child < 0) return std::string("fork: ") + std::strerror(errno);
  if (child == 0) {
    ::alarm(10);  // a hang in here ends the child with SIGALRM
    ::_exit(in_child() ? 0 : 1);
  }
  return how_it_ended(child);
}

// One field of one command's line in the master's INFO commandstats (`command` in lower case,
// as INFO names it; field "calls", "rejected_calls", ...): 0 when the command has not run since
// the server started; nullopt when the reply is not the statistics (an error, such as BUSY) or
// the line has no such field.
inline std::optional<long long> command_stat(const RedisServer& server, const std::string& command,
                                             const std::string& field) {
  const Reply reply = server.command({"INFO", "commandstats"});
  if (reply.type != Reply::Type::string || reply.str.find("# Commandstats") == std::string::npos) return std::nullopt;
  const auto begin = reply.str.find("cmdstat_" + command + ":");
  if (begin == std::string::npos) return 0;
  const std::string line = reply.str.substr(begin, reply.str.find('\n', begin) - begin);
  for (const char before : {':', ','}) {
    if (const auto at = line.find(before + field + "="); at != std::string::npos) {
      return std::stoll(line.substr(at + field.size() + 2));
    }
  }
  return std::nullopt;
}

// The master's own count of calls of `command` ("evalsha" counts every extend, release and
// waiting retry of the library, "set" first attempts); 0 also when the master answered an error.
inline long long command_calls(const RedisServer& server, const std::string& command) {
  return command_stat(server, command, "calls").value_or(0);
}

// Whether every master's fencing counter is caught up on `client` (Client::status()).
inline bool every_fence_caught_up(Client& client) {
  const FleetStatus status = client.status();
  return std::all_of(status.masters.begin(), status.masters.end(),
                     [](const MasterReport& master) { return master.fence_caught_up; });
}

// Lua scripts the master has run (EVALSHA and EVAL: every release and extend of the library,
// and the handshake's permission probes).
inline long long scripts_run(const RedisServer& server) {
  return command_calls(server, "evalsha") + command_calls(server, "eval");
}

// A redis:// uri of a test server with `userinfo` ("user:password", ":password") put in.
inline std::string with_auth(const std::string& uri, const std::string& userinfo) {
  return "redis://" + userinfo + "@" + uri.substr(std::string("redis://").size());
}

inline std::size_t with_key(const RedisServerGroup& group, const std::string& key) {
  std::size_t count = 0;
  for (std::size_t i = 0; i < group.size(); ++i) {
    if (group[i].running() && group[i].command({"EXISTS", key}).integer == 1) ++count;
  }
  return count;
}

// Polls `condition` until it holds or `limit` passes. For effects that follow a decided
// round (stragglers' replies, background releases), not for measuring time.
template <class Condition>
bool eventually(Condition condition, std::chrono::milliseconds limit = 5s) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// With the restart guard on: whether every master comes to count `client`'s grants within
// `limit` (the age rule and the keyspace mark's first contact passed). Asked of status too: an
// acquire decided by two masters leaves the third's row pending, which says nothing of whether
// it is counted yet (CI run 4: a master counted only 1 s later).
inline bool every_master_counts(Client& client, const std::string& probe, std::chrono::milliseconds limit = 10s) {
  return eventually(
      [&] {
        if (client.status().voters < client.size()) return false;
        const Result r = client.acquire(probe);
        if (r) client.release(*r.lock);
        return r.ok() && r.count(MasterStatus::not_counted) == 0;
      },
      limit);
}

// steady_clock plus an offset a test can move forward (monotonic as long as it only grows):
// a validity clock whose rate differs from the loop's CLOCK_MONOTONIC for a moment, as after
// a suspend of the machine (SteadyClock counts it, the loop's timers do not).
class JumpingClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const override {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(offset_ms.load());
  }
  std::atomic<long long> offset_ms{0};
};

}  // namespace redlock::testing

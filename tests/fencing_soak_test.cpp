// SPDX-License-Identifier: Apache-2.0
// 2,000+ sequential fenced grants across 4 client processes while masters are restarted
// without persistence (one at a time, restart guard on) and single masters are frozen.
// Every grant records when it was held, on CLOCK_MONOTONIC (shared by all processes on the
// machine): from the acquire's return, through a short hold, to just before its release, cut
// at the lock's validity deadline. No two such windows may overlap, and in grant order the
// tokens must strictly increase.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <thread>

#include "test_util.h"

namespace redlock::testing {
namespace {

constexpr int kProcesses = 4;
constexpr long kGrants = 2000;

struct Shared {
  std::atomic<long> grants{0};
  std::atomic<bool> stop{false};
};

struct Grant {
  long long granted_ns = 0;
  long long released_ns = 0;
  std::uint64_t fence = 0;
  int process = 0;
};

long long monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One client process. Runs in a forked child: no gtest, and it leaves by _exit().
void run_client(int process, const std::vector<std::string>& masters, Shared& shared, const std::string& path) {
  int code = 0;
  try {
    auto options = options_for(masters);
    options.restart_guard = true;
    options.ttl = 1000ms;  // max_lock_ttl defaults to 2 s
    options.command_timeout = 200ms;
    options.retry_delay = 2ms;
    options.retry_jitter = 2ms;
    Client client(options);
    std::ofstream out(path);
    AcquireOptions fenced;
    fenced.fencing = true;
    fenced.retry_count = -1;
    fenced.wait = 1000ms;  // come back now and then to look at the stop flag
    while (!shared.stop.load()) {
      const Result held = client.acquire("soak", fenced);
      if (!held) continue;
      const long long granted = monotonic_ns();
      std::this_thread::sleep_for(500us);  // the work: a window another holder would overlap
      // Past the validity deadline the lock is not ours any more (a descheduled process).
      const long long deadline =
          std::chrono::duration_cast<std::chrono::nanoseconds>(held.lock->deadline.time_since_epoch()).count();
      const long long released = std::min(monotonic_ns(), deadline);
      out << granted << ' ' << released << ' ' << held.lock->fence << ' ' << process << '\n';
      client.release(*held.lock);
      shared.grants.fetch_add(1);
    }
  } catch (...) {
    code = 20;
  }
  ::_exit(code);
}

std::vector<Grant> read_grants(const std::string& path) {
  std::vector<Grant> grants;
  std::ifstream in(path);
  Grant g;
  while (in >> g.granted_ns >> g.released_ns >> g.fence >> g.process) grants.push_back(g);
  return grants;
}

TEST(FencingSoak, TokensIncreaseInGrantOrderUnderRestartsAndFreezes) {
  RedisServerGroup masters(5);
  const std::vector<std::string> uris = masters.uris();
  char dir_template[] = "/tmp/redlock-soak-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;

  void* memory = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  auto* shared = new (memory) Shared;

  std::vector<pid_t> children;
  ForkedChildren unreaped;  // killed if an ASSERT below leaves before they were told to stop
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) run_client(p, uris, *shared, dir + "/grants-" + std::to_string(p));
    children.push_back(pid);
    unreaped.add(pid);
  }

  // Faults: a master restarted without persistence every 2.5 s (each a different one, the
  // restart guard keeping it out for 2 s), and one other master frozen for 100-300 ms in
  // between. At most two of five are out at any time: a quorum of three remains.
  std::mt19937 rng(20261121);
  int restarts = 0;
  int freezes = 0;
  const auto start = std::chrono::steady_clock::now();
  auto next_restart = start + 2500ms;
  std::size_t last_restarted = masters.size();
  while (restarts < 3 || shared->grants.load() < kGrants) {
    if (std::chrono::steady_clock::now() - start > 90s) break;  // bounded, whatever happens
    if (restarts < 3 && std::chrono::steady_clock::now() >= next_restart) {
      last_restarted = (last_restarted + 1 + rng() % 4) % masters.size();
      masters[last_restarted].kill();
      masters[last_restarted].restart();
      ++restarts;
      next_restart += 2500ms;
      continue;
    }
    std::size_t frozen = rng() % masters.size();
    if (frozen == last_restarted) frozen = (frozen + 1) % masters.size();
    masters[frozen].freeze();
    std::this_thread::sleep_for(std::chrono::milliseconds(100 + rng() % 200));
    masters[frozen].thaw();
    ++freezes;
    std::this_thread::sleep_for(100ms);
  }
  shared->stop.store(true);
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    unreaped.reaped(pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "client process " << pid << " failed";
  }

  std::vector<Grant> grants;
  for (int p = 0; p < kProcesses; ++p) {
    const auto mine = read_grants(dir + "/grants-" + std::to_string(p));
    EXPECT_FALSE(mine.empty()) << "process " << p << " never got the lock";
    grants.insert(grants.end(), mine.begin(), mine.end());
  }
  std::sort(grants.begin(), grants.end(), [](const Grant& a, const Grant& b) { return a.granted_ns < b.granted_ns; });
  EXPECT_GE(static_cast<long>(grants.size()), kGrants);
  EXPECT_EQ(restarts, 3);
  EXPECT_GE(freezes, 5);
  // A window recorded after its deadline (the process was descheduled past the ttl) held
  // nothing: it is neither checked for overlap nor ordered.
  std::erase_if(grants, [](const Grant& g) { return g.released_ns <= g.granted_ns; });
  int out_of_order = 0;
  int overlaps = 0;
  long long held_until = 0;  // the latest end of the windows before grant i
  for (std::size_t i = 0; i < grants.size(); ++i) {
    if (i > 0 && grants[i].fence <= grants[i - 1].fence) {
      if (++out_of_order <= 5) {
        ADD_FAILURE() << "token " << grants[i].fence << " (process " << grants[i].process << ") granted after token "
                      << grants[i - 1].fence << " (process " << grants[i - 1].process << ")";
      }
    }
    if (grants[i].granted_ns < held_until && ++overlaps <= 5) {
      ADD_FAILURE() << "token " << grants[i].fence << " (process " << grants[i].process << ") was held from "
                    << grants[i].granted_ns << " ns, before an earlier holder's window ended at " << held_until;
    }
    held_until = std::max(held_until, grants[i].released_ns);
  }
  EXPECT_EQ(out_of_order, 0);
  EXPECT_EQ(overlaps, 0);
  std::printf("grants %zu, restarts %d, freezes %d, last token %llu\n", grants.size(), restarts, freezes,
              static_cast<unsigned long long>(grants.empty() ? 0 : grants.back().fence));

  shared->~Shared();
  ::munmap(memory, sizeof(Shared));
  for (int p = 0; p < kProcesses; ++p) std::remove((dir + "/grants-" + std::to_string(p)).c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace redlock::testing

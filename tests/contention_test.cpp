// SPDX-License-Identifier: Apache-2.0
// Mutual exclusion under contention: 8 threads, each with its own Client (as separate
// processes would be), take one resource 200 times each through the blocking API on 5
// masters. Two independent checks: a counter of holders inside the critical section, and the
// grants' validity windows ([returned, min(released, deadline)], each held 300 us) compared
// after the run. A negative control shows the checks fire: Clients configured with
// overlapping master sets ({0,1,2} and {2,3,4}, a quorum of 2 each) hold at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "test_util.h"

namespace redlock::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Window {
  Clock::time_point from;
  Clock::time_point to;
};

struct Contention {
  int grants = 0;
  int inside_overlaps = 0;  // a holder found another inside
  int window_overlaps = 0;  // windows that began before an earlier one ended
  int failed_releases = 0;
  int expired_inside = 0;
  long long shared_counter = 0;
};

// `masters_of(i)`: the master URIs thread i's Client uses. `unsynchronised`: holders add to a
// counter that only the lock protects (a data race a TSan build reports when two hold at once;
// off for the negative control, where they do).
template <typename MastersOf>
Contention contend(int threads, int grants_each, MastersOf masters_of, bool unsynchronised = true) {
  Contention out;
  std::atomic<int> inside{0};
  std::atomic<int> inside_overlaps{0};
  std::atomic<int> failed_releases{0};
  std::atomic<int> expired_inside{0};
  std::mutex windows_mutex;
  std::vector<Window> windows;
  long long shared_counter = 0;  // deliberately unsynchronised: only the lock protects it

  auto worker = [&](int index) {
    auto options = options_for(masters_of(index));
    options.ttl = 10s;
    options.retry_delay = 1ms;
    options.retry_jitter = 1ms;
    Client client(options);
    AcquireOptions forever;
    forever.retry_count = -1;
    std::vector<Window> mine;
    for (int done = 0; done < grants_each;) {
      const Result result = client.acquire("contended", forever);
      if (!result) continue;  // e.g. validity_expired: not a grant
      const auto from = Clock::now();
      if (inside.fetch_add(1) != 0) inside_overlaps.fetch_add(1);
      if (unsynchronised) shared_counter += 1;
      std::this_thread::sleep_for(300us);  // a critical section wide enough to be met in
      if (client.remaining(*result.lock).count() <= 0) expired_inside.fetch_add(1);
      inside.fetch_sub(1);
      mine.push_back({from, std::min(Clock::now(), result.lock->deadline)});
      if (!client.release(*result.lock)) failed_releases.fetch_add(1);
      ++done;
    }
    const std::lock_guard guard(windows_mutex);
    windows.insert(windows.end(), mine.begin(), mine.end());
  };

  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker, i);
  for (auto& thread : pool) thread.join();

  std::sort(windows.begin(), windows.end(), [](const Window& a, const Window& b) { return a.from < b.from; });
  Clock::time_point latest_end{};
  for (const Window& window : windows) {
    if (window.from < latest_end) ++out.window_overlaps;
    latest_end = std::max(latest_end, window.to);
  }
  out.grants = static_cast<int>(windows.size());
  out.inside_overlaps = inside_overlaps.load();
  out.failed_releases = failed_releases.load();
  out.expired_inside = expired_inside.load();
  out.shared_counter = shared_counter;
  return out;
}

TEST(ContentionTest, EightThreadsTimesTwoHundredNeverOverlap) {
  constexpr int kThreads = 8;
  constexpr int kGrantsEach = 200;
  RedisServerGroup masters(5);
  const Contention run = contend(kThreads, kGrantsEach, [&](int) { return masters.uris(); });
  EXPECT_EQ(run.inside_overlaps, 0);
  EXPECT_EQ(run.window_overlaps, 0);
  EXPECT_EQ(run.grants, kThreads * kGrantsEach);
  EXPECT_EQ(run.shared_counter, kThreads * kGrantsEach);
  EXPECT_EQ(run.failed_releases, 0);
  EXPECT_EQ(run.expired_inside, 0);
  EXPECT_TRUE(eventually([&] { return with_key(masters, "redlock:contended") == 0; }));
}

// The negative control: the same run where mutual exclusion does not hold (two fleets that
// share one master), so both checks must report overlaps.
TEST(ContentionTest, ClientsOnOverlappingMasterSetsAreCaughtHoldingAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kGrantsEach = 50;
  RedisServerGroup masters(5);
  const auto all = masters.uris();
  const std::vector<std::string> left = {all[0], all[1], all[2]};
  const std::vector<std::string> right = {all[2], all[3], all[4]};
  const Contention run = contend(
      kThreads, kGrantsEach, [&](int i) { return i % 2 == 0 ? left : right; }, false);
  std::printf("[ figures ] overlapping fleets: %d grants, %d found another inside, %d windows overlapped\n", run.grants,
              run.inside_overlaps, run.window_overlaps);
  EXPECT_GT(run.inside_overlaps, 0);
  EXPECT_GT(run.window_overlaps, 0);
}

}  // namespace
}  // namespace redlock::testing

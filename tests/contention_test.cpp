// SPDX-License-Identifier: Apache-2.0
// Mutual exclusion under contention: 8 threads, each with its own Client (as separate
// processes would be), take one resource 200 times each through the blocking API on 5
// masters. An independent check inside the critical section proves no two holders overlap.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test_util.h"

namespace redlock::testing {
namespace {

TEST(ContentionTest, EightThreadsTimesTwoHundredNeverOverlap) {
  constexpr int kThreads = 8;
  constexpr int kGrantsEach = 200;
  RedisServerGroup masters(5);

  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> grants{0};
  std::atomic<int> failed_releases{0};
  std::atomic<int> expired_inside{0};
  long long shared_counter = 0;  // deliberately unsynchronised: only the lock protects it

  auto worker = [&] {
    auto options = options_for(masters);
    options.ttl = 10s;
    options.retry_delay = 1ms;
    options.retry_jitter = 1ms;
    Client client(options);
    AcquireOptions forever;
    forever.retry_count = -1;
    for (int done = 0; done < kGrantsEach;) {
      const Result result = client.acquire("contended", forever);
      if (!result) continue;  // e.g. validity_expired: not a grant
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      shared_counter += 1;
      if (client.remaining(*result.lock).count() <= 0) expired_inside.fetch_add(1);
      inside.fetch_sub(1);
      if (!client.release(*result.lock)) failed_releases.fetch_add(1);
      grants.fetch_add(1);
      ++done;
    }
  };

  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) threads.emplace_back(worker);
  for (auto& thread : threads) thread.join();

  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(grants.load(), kThreads * kGrantsEach);
  EXPECT_EQ(shared_counter, kThreads * kGrantsEach);
  EXPECT_EQ(failed_releases.load(), 0);
  EXPECT_EQ(expired_inside.load(), 0);
  EXPECT_TRUE(eventually([&] { return with_key(masters, "redlock:contended") == 0; }));
}

}  // namespace
}  // namespace redlock::testing

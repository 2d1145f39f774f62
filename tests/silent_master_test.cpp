// SPDX-License-Identifier: Apache-2.0
// A silent master (frozen: TCP up, nothing read or answered) under a steady load: what the
// client queues for it stays bounded (DESIGN.md "Hostile masters"). Without a bound every
// command sent to it keeps its round, and the round its operation, alive until the stall
// check drops the connection; here the stall check is far away, as it is for a master that
// black-holes traffic for a long time.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

#include "sanitizers.h"
#include "support/process_memory.h"
#include "test_util.h"

// Under AddressSanitizer freed memory waits in a quarantine (256 MB by default) before it is
// reused, so a peak taken under churn would measure the quarantine, not what the client
// holds. Read by ASan at start-up; unused otherwise.
extern "C" const char* __asan_default_options() { return "quarantine_size_mb=1"; }

namespace redlock::testing {
namespace {

constexpr std::size_t kFrozen = 2;

constexpr long kBoundKib = kUnderTsan ? 4 * 24 * 1024 : 24 * 1024;

// Runs `cycles` acquire+release cycles, at most `in_flight` at a time and started no faster
// than `per_second` (the calling thread paces them); records the first unexpected result.
// Paced because the rounds alive within their deadline (command_timeout: the frozen master's
// row is pending until then) grow with the rate, and the bound is about what is queued for
// the frozen master, not about how fast the machine is: unpaced, a fast run (20,000 cycles
// in 0.4 s) grew by +27 MB against +13 MB at 15,000 cycles/s, and failed the bound.
class Load {
 public:
  Load(Client& client, int in_flight) : client_(client), in_flight_(in_flight) {}

  // Returns the first unexpected result's text, or "".
  std::string run(int cycles, double per_second) {
    const auto begin = std::chrono::steady_clock::now();
    for (int i = 0; i < cycles; ++i) {
      std::this_thread::sleep_until(begin + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(i / per_second)));
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return running_ < in_flight_ || !failure_.empty(); });
      if (!failure_.empty()) break;
      ++running_;
      lock.unlock();
      start(i);
    }
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return running_ == 0; });
    return failure_;
  }
  [[nodiscard]] const Result& sample() const { return sample_; }
  // Releases refused at the frozen master although their SET had been queued there.
  [[nodiscard]] int refused_releases() const { return refused_releases_; }
  [[nodiscard]] const std::string& refused_release() const { return refused_release_; }

 private:
  void start(int i) {
    client_.acquire_async("silent" + std::to_string(i), [this](Result held) {
      if (!held) {
        end(format_result(held));
        return;
      }
      {
        std::lock_guard lock(mutex_);
        sample_ = held;
      }
      // Its SET went into the frozen master's queue: so must its release, or the key would
      // outlive the thaw there by up to a ttl.
      const bool set_queued = held.masters.at(kFrozen).status != MasterStatus::not_connected;
      client_.release_async(*held.lock, [this, set_queued](const Result& released) {
        if (set_queued && released.masters.at(kFrozen).status == MasterStatus::not_connected) {
          std::lock_guard lock(mutex_);
          if (refused_release_.empty()) refused_release_ = format_result(released);
          ++refused_releases_;
        }
        end("");
      });
    });
  }

  void end(const std::string& failure) {
    std::lock_guard lock(mutex_);
    if (failure_.empty()) failure_ = failure;
    --running_;
    changed_.notify_all();
  }

  Client& client_;
  const int in_flight_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int running_ = 0;
  std::string failure_;
  Result sample_;
  int refused_releases_ = 0;
  std::string refused_release_;
};

TEST(SilentMasterTest, WhatIsQueuedForAFrozenMasterStaysBounded) {
  RedisServerGroup masters(5);
  auto options = options_for(masters);
  options.command_timeout = 250ms;  // sanitizer builds are slow; the live four must answer
  options.stall_timeout = 60s;  // the stall check does not come to the rescue in this test
  Client client(options);
  ASSERT_TRUE(client.wait_connected(5, 5s));
  masters[kFrozen].freeze();

  // Held through the load, as a job holds its lock: its SET is queued for the frozen master
  // before the load fills the backlog.
  const Result first = client.acquire("held-through-the-load");
  ASSERT_TRUE(first) << format_result(first);
  ASSERT_NE(first.masters[kFrozen].status, MasterStatus::not_connected) << format_result(first);

  const bool peak_reset = support::reset_hwm();
  const long rss_before = support::rss_kib();
  const auto start = std::chrono::steady_clock::now();
  constexpr int kCycles = 60000;
  Load load(client, 16);
  const std::string failure = load.run(kCycles, 15000);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long peak = peak_reset ? support::hwm_kib() : support::rss_kib();
  EXPECT_EQ(failure, "") << "the four live masters decide every acquire";
  const MasterResult& row = load.sample().masters.at(kFrozen);
  std::printf("%d cycles in %.1f s with master %zu frozen: RSS %ld KiB before, %s %ld KiB (+%ld KiB); "
              "its row: %s %s\n",
              kCycles, seconds, kFrozen, rss_before, peak_reset ? "peak" : "now", peak, peak - rss_before,
              std::string(to_string(row.status)).c_str(), row.error.c_str());
  // The bound: 65536 late commands of a few dozen bytes each, 1 MiB of unsent bytes, the
  // rounds still inside their deadline, and sanitizer bookkeeping on top. ThreadSanitizer
  // maps shadow memory for every byte the client touches (measured: +39 MB where the plain
  // build shows +10 MB). 60,000 cycles pass 65536 commands: measured 2026-11-30 (dev build,
  // paced), +11.7 MB with the library's bounds, +31.2 MB with them lifted.
  EXPECT_LT(peak - rss_before, kBoundKib);

  // The load reached the bound: a new acquire is refused there.
  const Result held = client.acquire("after-the-load");
  ASSERT_TRUE(held) << format_result(held);
  EXPECT_NE(held.masters[kFrozen].error.find("backlog"), std::string::npos) << format_result(held);
  // Yet the release of every SET that went in below the bound goes in too, or its key would
  // outlive the thaw by up to a ttl: releases have a reserve of their own. The releases of the
  // SETs the bound refused have nothing to remove there and must not use it up (sent anyway,
  // they did: the release of the lock held through the load was refused).
  EXPECT_EQ(load.refused_releases(), 0) << "first: " << load.refused_release();
  const Result released = client.release(*first.lock);
  // Queued behind its SET (pending when the live four decided), neither refused nor skipped.
  EXPECT_EQ(released.masters[kFrozen].status, MasterStatus::pending) << format_result(released);
  masters[kFrozen].thaw();
}

}  // namespace
}  // namespace redlock::testing

// SPDX-License-Identifier: Apache-2.0
// The Client's event loop on its own (lib/detail/event_loop.h): timers, and a start that
// fails. No Redis needed.
#include "detail/event_loop.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace redlock::detail {
namespace {

using namespace std::chrono_literals;

// When a timer fires, the tasks due within the next millisecond run with it (the uv timer
// counts whole milliseconds), so a task can run up to a millisecond before its deadline. A
// task that checks the time itself and schedules itself again for the same deadline
// (FenceCatchUp waits out a safety delay this way; its masters' deadlines are a few
// microseconds apart) must not be run again at once, in the same pass, over and over until
// the deadline has passed: that spun the loop thread for up to a millisecond, allocating a
// timer each time round.
// How many times `task` ran for its deadline, `offset_ns` from now, with another timer due
// half a millisecond before it.
int runs_until_due(EventLoop& loop, std::uint64_t offset_ns) {
  std::promise<int> done;
  int runs = 0;
  std::uint64_t deadline = 0;
  std::function<void()> task = [&] {
    ++runs;
    if (now_ns() < deadline) {
      loop.schedule_at(deadline, task);
      return;
    }
    done.set_value(runs);
  };
  EXPECT_TRUE(loop.post([&] {
    deadline = now_ns() + offset_ns;
    loop.schedule_at(deadline - 500'000, [] {});
    loop.schedule_at(deadline, task);
  }));
  auto result = done.get_future();
  if (result.wait_for(10s) != std::future_status::ready) {
    ADD_FAILURE() << "the task never found its deadline passed";
    std::abort();  // the loop still refers to this frame's locals
  }
  return result.get();
}

TEST(EventLoopTest, ATimerTaskThatSchedulesItselfAgainIsNotSpunOnUntilItsDeadline) {
  EventLoop loop(nullptr);
  int most = 0;
  for (std::uint64_t offset_us = 1000; offset_us < 3000; offset_us += 100) {
    most = std::max(most, runs_until_due(loop, offset_us * 1000));
  }
  // Each early run re-arms the uv timer for the remainder (at least one millisecond): a
  // few runs at most, where the spin made dozens to hundreds.
  EXPECT_LE(most, 10) << "the task ran again at once in the same pass of the timers";
  ASSERT_TRUE(loop.post([&] { loop.close(); }));
  loop.join();
}

// Such a task is skipped, not stopped at: the tasks due in the pass that were scheduled
// before it still run in it, even when it sorts ahead of them (an earlier deadline).
TEST(EventLoopTest, ATaskScheduledDuringAPassDoesNotHoldBackTheOlderTasksDueInIt) {
  EventLoop loop(nullptr);
  std::promise<std::string> done;
  std::string order;
  const auto ran = [&](char task) {
    order += task;
    if (order.size() == 3) done.set_value(order);
  };
  ASSERT_TRUE(loop.post([&] {
    const std::uint64_t deadline = now_ns() + 2'000'000;
    loop.schedule_at(deadline, [&, deadline] {
      ran('T');
      loop.schedule_at(deadline - 1, [&] { ran('N'); });  // new, and first in deadline order
    });
    loop.schedule_at(deadline, [&] { ran('A'); });  // older, due in T's pass
  }));
  auto result = done.get_future();
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(result.get(), "TAN");
  ASSERT_TRUE(loop.post([&] { loop.close(); }));
  loop.join();
}

// A task scheduled during a pass, for a moment that has passed by the time the pass ends, runs
// after the loop's next poll, not in the same phase of the timers: libuv before 1.48 runs a
// timer started with a timeout of 0 from its own callback again at once. The stall check
// relies on this: it looks again for a reply once the loop has read (Connection::check_stall);
// run before the poll, it dropped masters whose replies waited in their sockets (a clean-clone
// CI run under ASan: "no reply for 2609 ms" from AsyncTest.RepliesWaitingWhileTheLoopWasHeld
// AreNotAStall, on a pass that took over a millisecond).
TEST(EventLoopTest, ATaskScheduledDuringAPassForAPassedMomentRunsAfterThePoll) {
  EventLoop loop(nullptr);
  std::promise<std::pair<std::uint64_t, std::uint64_t>> done;  // polls before A and before B
  ASSERT_TRUE(loop.post([&] {
    loop.schedule_at(now_ns(), [&] {
      const std::uint64_t polls_at_a = loop.passes();
      loop.schedule_at(now_ns() + 100'000, [&, polls_at_a] { done.set_value({polls_at_a, loop.passes()}); });
      const std::uint64_t busy_until = now_ns() + 2'000'000;  // a pass longer than a millisecond
      while (now_ns() < busy_until) {
      }
    });
  }));
  auto result = done.get_future();
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  const auto [polls_at_a, polls_at_b] = result.get();
  EXPECT_GT(polls_at_b, polls_at_a) << "the task ran in the pass that scheduled it, before any poll";
  ASSERT_TRUE(loop.post([&] { loop.close(); }));
  loop.join();
}

// A pass runs the tasks that were due when it began; one that an earlier task of the same
// pass cancelled does not run (a round's deadline cancelled by its decision, a renewal by a
// loss).
TEST(EventLoopTest, ATaskCancelledByAnEarlierTaskOfThePassDoesNotRun) {
  EventLoop loop(nullptr);
  std::promise<std::string> done;
  std::string order;
  EventLoop::TimerId victim = 0;
  ASSERT_TRUE(loop.post([&] {
    const std::uint64_t deadline = now_ns() + 2'000'000;
    loop.schedule_at(deadline, [&] {
      order += 'T';
      loop.cancel(victim);
    });
    victim = loop.schedule_at(deadline, [&] { order += 'C'; });
    loop.schedule_at(deadline, [&] { order += 'A'; });
    loop.schedule_at(deadline + 5'000'000, [&] { done.set_value(order); });
  }));
  auto result = done.get_future();
  ASSERT_EQ(result.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(result.get(), "TA");
  ASSERT_TRUE(loop.post([&] { loop.close(); }));
  loop.join();
}

// refuse_posts_and_run_accepted() from a task runs what was posted behind that task in the
// same batch (a Client's shutdown: a release queued behind it must be sent before the
// connections close), each task once, in posting order; later posts are refused.
TEST(EventLoopTest, WhatWasAcceptedRunsOnceBeforeTheRefusalReturns) {
  uv_loop_t uv;
  ASSERT_EQ(uv_loop_init(&uv), 0);
  std::string order;
  {
    EventLoop loop(&uv);  // a caller's loop: the three posts wait for one batch
    ASSERT_TRUE(loop.post([&] {
      order += "S(";
      loop.refuse_posts_and_run_accepted();
      order += ")";
      EXPECT_FALSE(loop.post([&] { order += "late"; }));
    }));
    ASSERT_TRUE(loop.post([&] { order += 'R'; }));
    ASSERT_TRUE(loop.post([&] { order += 'T'; }));
    uv_run(&uv, UV_RUN_NOWAIT);
    EXPECT_EQ(order, "S(RT)");
    loop.close();
    EXPECT_EQ(order, "S(RT)");
  }
  uv_run(&uv, UV_RUN_DEFAULT);
  EXPECT_EQ(uv_loop_close(&uv), 0);
}

// Descriptors held open so that exactly as many as a test wants are left under a lowered
// RLIMIT_NOFILE (ctest and the runtime leave gaps in the low numbers, so "lowest first" alone
// would not say how many are free).
class DescriptorSqueeze {
 public:
  DescriptorSqueeze() {
    if (::getrlimit(RLIMIT_NOFILE, &saved_) != 0) throw std::runtime_error("getrlimit");
    int highest = 2;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      highest = std::max(highest, std::stoi(entry.path().filename().string()));
    }
    rlimit window = saved_;
    window.rlim_cur = static_cast<rlim_t>(highest) + 64;
    lower_ = window;
    limit();
    fill();
    unlimit();  // lowered again around each attempt
  }
  ~DescriptorSqueeze() {
    unlimit();
    for (const int fd : held_) ::close(fd);
  }
  DescriptorSqueeze(const DescriptorSqueeze&) = delete;
  DescriptorSqueeze& operator=(const DescriptorSqueeze&) = delete;

  void leave_free(std::size_t count) {
    for (std::size_t i = 0; i < count && !held_.empty(); ++i) {
      ::close(held_.back());
      held_.pop_back();
    }
  }
  // Takes every free descriptor under the limit; returns how many there were.
  std::size_t fill() {
    std::size_t taken = 0;
    for (int fd = take(); fd >= 0; fd = take(), ++taken) held_.push_back(fd);
    return taken;
  }
  void limit() {
    if (::setrlimit(RLIMIT_NOFILE, &lower_) != 0) throw std::runtime_error("setrlimit (lower)");
  }
  void unlimit() noexcept { ::setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  static int take() noexcept { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

  rlimit saved_{};
  rlimit lower_{};
  std::vector<int> held_;
};

// A loop that cannot start (here: no descriptor left for its eventfd once libuv's loop has
// its own) says why and leaves nothing open: the constructor's half-made loop is closed.
TEST(EventLoopTest, ALoopThatCannotStartSaysWhyAndLeavesNoDescriptorOpen) {
  // One loop started and stopped first, with descriptors to spare: libuv's process-wide setup
  // (a pipe, made by the first loop) aborts if it fails, and UBSan checks a type's first
  // virtual calls through a pipe of its own (then remembers them).
  {
    EventLoop warm_up(nullptr);
    ASSERT_TRUE(warm_up.post([&] { warm_up.close(); }));
  }
  // More descriptors free each time, until the loop starts: the first failures are libuv's
  // own loop (uv_loop_init, which leaves a descriptor open when it fails: not counted), then ours.
  DescriptorSqueeze squeeze;
  bool eventfd_failed = false;
  for (std::size_t spare = 1; spare <= 16; ++spare) {
    squeeze.limit();
    squeeze.leave_free(spare);
    std::string error;
    std::size_t free_after = 0;
    try {
      EventLoop loop(nullptr);
      squeeze.unlimit();
      ASSERT_TRUE(loop.post([&] { loop.close(); }));
      break;  // started: the constructor's failure paths are all behind
    } catch (const std::exception& e) {
      free_after = squeeze.fill();
      // Unlimited again before anything else: UBSan's check of a virtual call (e.what(), and
      // gtest's messages) may need a descriptor of its own.
      squeeze.unlimit();
      error = e.what();
    }
    if (error.rfind("uv_loop_init", 0) == 0) continue;
    EXPECT_NE(error.find("eventfd"), std::string::npos) << error;
    eventfd_failed = true;
    EXPECT_EQ(free_after, spare) << "a loop that failed to start left a descriptor open: " << error;
  }
  EXPECT_TRUE(eventfd_failed) << "no number of free descriptors made the eventfd fail";
}

// libuv closes its loop's own descriptors (epoll, its eventfd, its signal pipe) with a raw close
// syscall that ThreadSanitizer does not see. The next thread to get one of those numbers then
// freed the bookkeeping the loop's thread made for it, unsynchronised, and TSan reported a race
// (CI, MutexTest: one Client destroyed while another's loop thread was connecting). Checked only
// under TSan (the tsan preset halts on the report); elsewhere there is nothing to see.
TEST(EventLoopTest, DescriptorsOfALoopClosedOnOneThreadAreReusedOnAnotherWithoutARaceReport) {
  EventLoop first(nullptr);
  std::atomic<bool> second_closed{false};  // relaxed: no happens-before from the closing thread
  std::promise<void> reused;
  ASSERT_TRUE(first.post([&] {
    while (!second_closed.load(std::memory_order_relaxed)) std::this_thread::sleep_for(1ms);
    std::vector<int> sockets;
    for (int i = 0; i < 6; ++i) sockets.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    for (const int fd : sockets) {
      if (fd >= 0) ::close(fd);
    }
    reused.set_value();
  }));
  {
    EventLoop second(nullptr);  // made and closed on this thread, after the task above was posted
    ASSERT_TRUE(second.post([&] { second.close(); }));
  }
  second_closed.store(true, std::memory_order_relaxed);
  reused.get_future().get();
  ASSERT_TRUE(first.post([&] { first.close(); }));
  first.join();
}

}  // namespace
}  // namespace redlock::detail

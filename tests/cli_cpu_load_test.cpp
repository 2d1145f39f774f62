// SPDX-License-Identifier: Apache-2.0
// `redlock run` against a command that keeps every CPU busy. A binary of its own so that ctest
// runs it alone (RUN_SERIAL, tests/CMakeLists.txt): its busy loops would starve the tests
// running beside it, and they would delay it.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_process.h"
#include "support/redis_server.h"

namespace {

using namespace redlock::cli_testing;
using redlock::support::RedisServerGroup;

// 100 busy loops on 2 cores, as `make -j` may run; they ignore SIGTERM, so SIGKILL must come.
// At the normal priority redlock was not scheduled at its SIGKILL point: the group was killed
// 14 to 68 ms after the lock's deadline, 4 of 4 (an outside review: another client was granted
// meanwhile). redlock runs at real-time priority (SCHED_FIFO; the command at the normal
// policy) where it may; where it may not, its report says why, and this test is skipped.
// The group's end came late too: at a 300 ms ttl the margin was 15 ms (10 ms floor), and the
// killed loops waited their turn behind the processes they had starved; the group outlived the
// deadline in a CI run (20 ms after SIGKILL) and in 1 of 10 runs here beside a niced build. The
// floor is 50 ms now and the killed group is raised to nice -20 (cli/run.cpp, kill_group).
TEST(CliCpuLoadTest, ACommandThatKeepsEveryCpuBusyIsStillKilledBeforeTheDeadline) {
  const RedisServerGroup masters(3);
  // ulimit -t: each loop is killed by the kernel after 2 s of CPU, whatever becomes of redlock
  // (a failing run must not leave them spinning).
  const std::string busy =
      "ulimit -t 2; trap '' TERM; i=0; while [ $i -lt 100 ]; do (while :; do :; done) & i=$((i + 1)); done; wait";
  const Finished f = run_tool(
      args_for(masters.uris(), {"--json", "--ttl", "300ms", "run", "--no-extend", "busy", "--", "sh", "-c", busy}), {},
      20s);
  EXPECT_EQ(f.exit_code, 75) << describe(f);
  const auto report = last_json_line(f.err);
  const auto lease = report.value("lease", nlohmann::json::object());
  ASSERT_TRUE(lease.contains("deadline_ns") && lease.at("sigkill_ns").is_number()) << f.err;
  if (report.value("scheduling", std::string()) != "realtime") {
    GTEST_SKIP() << "redlock could not run at real-time priority here: " << report.value("scheduling", std::string());
  }
  const auto deadline_ns = lease.at("deadline_ns").get<std::int64_t>();
  const auto sigkill_ns = lease.at("sigkill_ns").get<std::int64_t>();
  EXPECT_LT(sigkill_ns, deadline_ns) << "SIGKILL was sent " << (sigkill_ns - deadline_ns) / 1000
                                     << " us after the lock's deadline";
  ASSERT_TRUE(lease.at("group_gone_ns").is_number()) << lease.dump();
  EXPECT_LT(lease.at("group_gone_ns").get<std::int64_t>(), deadline_ns) << lease.dump();
  EXPECT_EQ(report.value("ran_past_deadline", true), false) << f.err;
  // Root may raise the killed group's priority (kill_group in cli/run.cpp): without it the last
  // loop sat runnable behind a niced compiler for up to 84 ms after SIGKILL.
  if (::geteuid() == 0) {
    EXPECT_EQ(lease.value("raised_after_sigkill", false), true) << lease.dump();
  }
}

// Started at real-time priority (chrt -f 1), redlock gave the command its own priority and
// stayed at it: the command's busy loops at FIFO 1 were never preempted by redlock's threads at
// FIFO 1, and the SIGKILL came 3.5 s after the lock's deadline while another client held it (a
// review, 2 of 2). redlock's threads now go one level above the command's.
TEST(CliCpuLoadTest, ACommandBusyAtTheRealTimePriorityRedlockWasStartedWithIsStillKilledInTime) {
  const RedisServerGroup masters(3);
  // The loops at FIFO 1 starve every normal process while they run: the kernel kills each
  // after 3 s of CPU (ulimit -t), so that a failing run ends (before the limit, one left the
  // machine starved for 10 minutes, until killed by hand).
  const std::vector<std::string> args =
      args_for(masters.uris(), {"--json", "--ttl", "1500ms", "run", "--no-extend", "busy-rt", "--", "sh", "-c",
                                "ulimit -t 3; trap '' TERM; for i in 1 2 3; do (while :; do :; done) & done; wait"});
  // This thread's policy is what the tool starts with (fork keeps it); put back right after.
  sched_param fifo{};
  fifo.sched_priority = 1;
  if (::sched_setscheduler(0, SCHED_FIFO, &fifo) != 0) GTEST_SKIP() << "no real-time priority here";
  std::optional<Process> tool;
  try {
    tool.emplace(args);
  } catch (...) {
    const sched_param normal{};
    ::sched_setscheduler(0, SCHED_OTHER, &normal);
    throw;
  }
  const sched_param normal{};
  ASSERT_EQ(::sched_setscheduler(0, SCHED_OTHER, &normal), 0);
  const Finished f = tool->wait(30s);
  EXPECT_EQ(f.exit_code, 75) << describe(f);
  const auto report = last_json_line(f.err);
  EXPECT_EQ(report.value("scheduling", std::string()), "realtime (FIFO 2, above the command's FIFO 1)") << f.err;
  const auto lease = report.value("lease", nlohmann::json::object());
  ASSERT_TRUE(lease.contains("deadline_ns") && lease.at("sigkill_ns").is_number()) << f.err;
  const auto deadline_ns = lease.at("deadline_ns").get<std::int64_t>();
  EXPECT_LT(lease.at("sigkill_ns").get<std::int64_t>(), deadline_ns)
      << "SIGKILL was sent " << (lease.at("sigkill_ns").get<std::int64_t>() - deadline_ns) / 1000
      << " us after the lock's deadline";
  EXPECT_EQ(report.value("ran_past_deadline", true), false) << f.err;
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// chaos/scenarios.h — the fault schedules the parent runs while the clients work.
//
// Each scenario loops until the run is over, recording every fault it injects (Run::
// fault_start / fault_end) and undoing it before it returns. What each one does and what it is
// expected to show is in chaos/README.md.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clock_control.h"
#include "config.h"
#include "partition.h"
#include "run.h"
#include "shared_state.h"
#include "support/redis_server.h"

namespace redlock::chaos {

// What a scenario may act on. Optional parts are set up only for the scenarios that need them.
struct Cluster {
  std::vector<std::unique_ptr<support::RedisServer>>& masters;
  std::vector<pid_t> clients;
  Shared& shared;
  Partitioner* partitioner = nullptr;                    // minority-/bridge-partition
  std::vector<std::unique_ptr<ClockControl>>* clocks = nullptr;  // clock-faults, clock-jump-k3: one per master
};

// Which optional machinery a scenario needs.
[[nodiscard]] bool needs_partitions(const std::string& scenario);
[[nodiscard]] bool needs_clock_shim(const std::string& scenario);
[[nodiscard]] bool needs_proxies(const std::string& scenario);

// Runs the configured scenario (or strategy-specific fault) until the run is over.
void run_scenario(const Config& config, Run& run, Cluster& cluster);

// failover strategy: seed 002's lost lock, one episode after another.
void failovers(Run& run, Shared& shared, support::RedisServer* master, support::RedisServer* replica);

}  // namespace redlock::chaos

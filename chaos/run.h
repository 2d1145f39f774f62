// SPDX-License-Identifier: Apache-2.0
// chaos/run.h — the parent's side of a run: its clock and seeded RNG, the fault records
// (faults.jsonl), and the progress line printed once a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "config.h"
#include "history.h"
#include "shared_state.h"

namespace redlock::chaos {

// SIGINT / SIGTERM end the run early but cleanly: faults are undone, the clients stopped,
// the history checked. Call once in the parent, before forking.
void end_runs_on_interrupt();

class Run {
 public:
  Run(const Config& config, Shared& shared, HistoryWriter& faults);

  // The run is over: its duration passed, or --grants were made.
  [[nodiscard]] bool over() const;
  // Sleeps up to `d` (less if the run is over), printing progress once a second.
  void sleep(std::chrono::steady_clock::duration d);
  // Sleeps exactly `d` even if the run is over (to finish a fault cleanly).
  void sleep_exactly(std::chrono::steady_clock::duration d);
  // Waits (sleeping 1 ms at a time) until `done()` or `limit` passed; returns done().
  template <class Done>
  bool wait_until(Done done, std::chrono::steady_clock::duration limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) sleep_exactly(std::chrono::milliseconds(1));
    return done();
  }

  // Records a fault; returns its id for fault_end.
  std::int64_t fault_start(const std::string& what);
  void fault_end(std::int64_t id);
  [[nodiscard]] std::int64_t faults() const { return fault_ids_; }
  // Faults currently active (for the progress line).
  [[nodiscard]] std::size_t active_faults() const { return active_.size(); }

  std::mt19937_64& rng() { return rng_; }
  long uniform(long lo, long hi) { return std::uniform_int_distribution<long>(lo, hi)(rng_); }
  std::chrono::milliseconds uniform_ms(long lo, long hi) { return std::chrono::milliseconds(uniform(lo, hi)); }
  // k distinct indices out of 0..n-1, at random.
  std::vector<std::size_t> pick(std::size_t n, std::size_t k);

  void progress();

 private:
  const Config& config_;
  Shared& shared_;
  HistoryWriter& faults_;
  std::mt19937_64 rng_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point end_;
  std::chrono::steady_clock::time_point next_progress_{};
  std::int64_t fault_ids_ = 0;
  std::vector<std::int64_t> active_;
};

}  // namespace redlock::chaos

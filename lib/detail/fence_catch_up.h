// SPDX-License-Identifier: Apache-2.0
// detail/fence_catch_up.h — the fencing counter catch-up (docs/fencing.md).
//
// A master seen for the first time, or after a restart, may have lost its counter. Before
// its fencing votes count, its counter is raised to the highest value read from enough
// OTHER masters that any quorum which acknowledged a token shares one with them
// (N - quorum + 1 of the others). Part of the MasterSet. Loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "redlock/options.h"

namespace redlock::detail {

class EventLoop;
class LockCommands;
class MasterSet;

class FenceCatchUp {
 public:
  FenceCatchUp(MasterSet& masters, EventLoop& loop, const LockCommands& commands, const ClientOptions& options);

  // Master `index` is a new incarnation: its counter is not trusted until a catch-up for
  // this incarnation succeeds (at once, when ClientOptions::fence_catch_up is off).
  void on_new_incarnation(std::uint32_t index);
  // A reconnect that the restart guard did not see as a new incarnation. `run_id_known`: the
  // master's run_id was read (INFO server). Then it is the same incarnation, and a catch-up
  // refused for want of permission (or given up) is tried again now. Without it nothing tells
  // a restart from a reconnect, and every reconnect is taken for a new incarnation.
  void on_reconnect(std::uint32_t index, bool run_id_known);
  // Master `index`'s connection is ready (again): a try under way for another master reads it
  // too (if it has not read it), and catch-ups waiting out a backoff after a failed try are
  // tried now, once enough other masters are ready to read, each at most once per its current
  // backoff: a try that failed for want of other masters need not wait up to reconnect_max
  // after they are back, and a master reconnecting over and over adds at most one try per wait.
  void on_master_ready(std::uint32_t index);
  // Whether master `index`'s counter is caught up for its current incarnation.
  [[nodiscard]] bool ready(std::uint32_t index) const { return masters_state_[index].ready; }
  // How many incarnations of master `index` it has been told of.
  [[nodiscard]] std::uint32_t generation(std::uint32_t index) const { return masters_state_[index].generation; }
  // Whether master `index` may have lost its counter and is not caught up yet: an incarnation
  // after the first one this Client saw (a new run_id, or any reconnect where INFO is denied).
  // A catch-up leaves such masters out while enough others are connected.
  [[nodiscard]] bool known_behind(std::uint32_t index) const {
    return masters_state_[index].generation > 1 && !masters_state_[index].ready;
  }

 private:
  class Attempt;
  struct State {
    bool ready = false;
    bool running = false;
    std::uint32_t generation = 0;  // bumps with every incarnation the catch-up is told of
    std::uint64_t seen_ns = 0;     // loop time when it was told of the current one
    Milliseconds backoff{0};       // the last wait after a failed try (detail/backoff.h); 0: none
    // The one timer that will call start() again (the A3 wait, or the backoff after a failed
    // try); 0: none. One per master: a reconnect's start() while one was pending added a
    // second retry loop for good, each reconnect another (review 64).
    std::uint64_t retry_timer = 0;
    std::uint64_t hurried_ns = 0;  // loop time of the last try on_master_ready made early; 0: none
    std::weak_ptr<Attempt> attempt;  // the try under way, while `running`
  };
  // How many other masters' counters a catch-up reads: N - Q + 1, so that any quorum that
  // acknowledged a token shares one with them.
  [[nodiscard]] std::uint32_t reads_needed() const;
  void start(std::uint32_t index);
  // Calls start(index) at `at` (loop time), replacing the master's pending retry, if any.
  void retry_at(std::uint32_t index, std::uint64_t at);
  void cancel_retry(State& state);
  void finished(std::uint32_t index, std::uint32_t generation, bool raised);

  MasterSet& masters_;
  EventLoop& loop_;
  const LockCommands& commands_;
  const ClientOptions& options_;
  std::vector<State> masters_state_;
};

}  // namespace redlock::detail

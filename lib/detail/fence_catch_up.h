// SPDX-License-Identifier: Apache-2.0
// detail/fence_catch_up.h — the fencing counter catch-up (docs/fencing.md).
//
// A master seen for the first time, or after a restart, may have lost its counter. Before
// its fencing votes count, its counter is raised to the highest value read from enough
// OTHER masters that any quorum which acknowledged a token shares one with them
// (N - quorum + 1 of the others). Part of the MasterSet. Loop thread only.
#pragma once

#include <cstdint>
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
  // A reconnect to the same incarnation: a catch-up refused for want of permission (or
  // given up) is tried again now.
  void on_reconnect(std::uint32_t index);
  // Whether master `index`'s counter is caught up for its current incarnation.
  [[nodiscard]] bool ready(std::uint32_t index) const { return masters_state_[index].ready; }

 private:
  class Attempt;
  struct State {
    bool ready = false;
    bool running = false;
  };
  void start(std::uint32_t index);
  void finished(std::uint32_t index, std::uint32_t epoch, bool raised);

  MasterSet& masters_;
  EventLoop& loop_;
  const LockCommands& commands_;
  const ClientOptions& options_;
  std::vector<State> masters_state_;
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/backoff.h — how the Client waits before it tries a master again: reconnect_min
// first, doubling up to reconnect_max, each wait jittered. Used by a connection's reconnects
// (Connection) and the fencing counter's catch-up (FenceCatchUp).
#pragma once

#include <algorithm>
#include <random>

#include "redlock/options.h"

namespace redlock::detail {

// +-25% so that many clients trying a restarted master again do not arrive together.
inline Milliseconds jittered(Milliseconds base) {
  thread_local std::minstd_rand rng{std::random_device{}()};
  const auto spread = base.count() / 4;
  if (spread <= 0) return base;
  std::uniform_int_distribution<long> offset(-spread, spread);
  return Milliseconds(base.count() + offset(rng));
}

// The wait after `current` (0: the first): reconnect_min, then twice the last, at most
// reconnect_max. Not jittered: the caller jitters the wait it schedules.
inline Milliseconds next_backoff(Milliseconds current, Milliseconds reconnect_min, Milliseconds reconnect_max) {
  return current.count() == 0 ? reconnect_min : std::min(current * 2, reconnect_max);
}

}  // namespace redlock::detail

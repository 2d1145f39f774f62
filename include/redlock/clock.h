// SPDX-License-Identifier: Apache-2.0
// redlock/clock.h — the monotonic clock all validity arithmetic uses.
//
// Lock validity is computed on a monotonic clock, never the wall clock: a wall-clock jump
// must not stretch or shrink a lease. Production code uses SteadyClock; a test may inject
// its own Clock to make elapsed time exact. Besides the loop thread, a blocking call's thread
// reads it once when the call returns (the validity left then: Result::validity).
#pragma once

#include <chrono>

namespace redlock {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  // Must be monotonic (never go backwards) and safe to call from any thread.
  [[nodiscard]] virtual time_point now() const = 0;
};

// std::chrono::steady_clock (CLOCK_MONOTONIC on Linux).
class SteadyClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace redlock

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

// The default: std::chrono::steady_clock's time base, counting the time the machine spent
// suspended. Linux stops CLOCK_MONOTONIC (steady_clock) during a suspend to RAM or disk (a
// hibernated VM too), while the masters go on counting their keys' ttl; measured on it, a
// lock's validity would come out of a suspend as long as it went in. This clock reads
// CLOCK_BOOTTIME, which counts the suspend: it equals steady_clock::now() (to within a
// microsecond) until this process lives through one, and is ahead of it by the time slept
// after. Compare a Lock's instants with Client::now(), not with steady_clock::now().
class SteadyClock final : public Clock {
 public:
  [[nodiscard]] time_point now() const override;
};

}  // namespace redlock

// SPDX-License-Identifier: Apache-2.0
// detail/boottime_clock.h — the validity clock behind SteadyClock: steady_clock's time base,
// counting the time the machine spent suspended.
//
// Linux stops CLOCK_MONOTONIC (std::chrono::steady_clock) while the system is suspended (to
// RAM or disk, a hibernated VM) and CLOCK_BOOTTIME does not. The masters, on other machines,
// count their keys' ttl through our suspend; a validity measured on CLOCK_MONOTONIC came out
// of one as long as it went in, and a holder heard "held" for keys that had expired and been
// granted to someone else. now() is CLOCK_BOOTTIME minus (CLOCK_BOOTTIME - CLOCK_MONOTONIC)
// as it was at construction: steady_clock::now() to within a microsecond until a suspend,
// ahead of it by the time slept after one.
#pragma once

#include <time.h>

#include <chrono>
#include <functional>

#include "redlock/clock.h"

namespace redlock::detail {

class BoottimeClock final : public Clock {
 public:
  // Reads a kernel clock (CLOCK_MONOTONIC or CLOCK_BOOTTIME) as nanoseconds since its epoch.
  // A test may pass its own to play a suspend; read_kernel_clock is the real one.
  using Reader = std::function<std::chrono::nanoseconds(clockid_t)>;
  explicit BoottimeClock(Reader read);
  [[nodiscard]] time_point now() const override;

  static std::chrono::nanoseconds read_kernel_clock(clockid_t id) noexcept;

 private:
  Reader read_;
  std::chrono::nanoseconds boottime_ahead_;  // CLOCK_BOOTTIME - CLOCK_MONOTONIC at construction
};

}  // namespace redlock::detail

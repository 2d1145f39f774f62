// SPDX-License-Identifier: Apache-2.0
#include "redlock/clock.h"

#include <time.h>

#include <utility>

#include "detail/boottime_clock.h"

namespace redlock {
namespace detail {

std::chrono::nanoseconds BoottimeClock::read_kernel_clock(clockid_t id) noexcept {
  timespec now{};
  (void)::clock_gettime(id, &now);  // cannot fail for these two clocks on Linux >= 2.6.39
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

BoottimeClock::BoottimeClock(Reader read) : read_(std::move(read)) {
  // The offset from the pair of readings that came closest together (a preemption between
  // them would shift this clock against steady_clock by its length).
  std::chrono::nanoseconds best_gap = std::chrono::nanoseconds::max();
  for (int i = 0; i < 5; ++i) {
    const auto before = read_(CLOCK_MONOTONIC);
    const auto boottime = read_(CLOCK_BOOTTIME);
    const auto after = read_(CLOCK_MONOTONIC);
    if (after - before < best_gap) {
      best_gap = after - before;
      boottime_ahead_ = boottime - (before + (after - before) / 2);
    }
  }
}

Clock::time_point BoottimeClock::now() const {
  return time_point(std::chrono::duration_cast<time_point::duration>(read_(CLOCK_BOOTTIME) - boottime_ahead_));
}

}  // namespace detail

SteadyClock::time_point SteadyClock::now() const {
  // One offset for the whole process, so every Client's instants compare (Client::adopt).
  static const detail::BoottimeClock clock(&detail::BoottimeClock::read_kernel_clock);
  return clock.now();
}

}  // namespace redlock

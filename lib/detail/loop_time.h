// SPDX-License-Identifier: Apache-2.0
// detail/loop_time.h — the Client's two time bases, explained once.
//
// 1. The validity clock (redlock::Clock, ClientImpl::clock(); SteadyClock by default:
//    steady_clock's time base read from CLOCK_BOOTTIME, so a suspend counts; a test may inject
//    its own). Everything a caller may rely on is measured on it:
//    a round's t0 (taken before its first byte is sent), a lock's `started` and `deadline`,
//    validity = deadline - now, Client::now() and remaining().
// 2. Loop time (now_ns() below: uv_hrtime, CLOCK_MONOTONIC nanoseconds). Everything the
//    event loop schedules is on it: timers, command deadlines, when a reply is late, the
//    restart guard's ages, backoffs. An injected test clock never moves a timer, nor does a
//    suspend (ClientImpl::check_for_sleep looks for one while leases live).
//
// A round records its start on both (Round::sent_at() and Round::sent_ns()). The two never
// mix in one subtraction.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>

#include <uv.h>

namespace redlock::detail {

// Monotonic nanoseconds, the time base of every deadline on the loop (uv_hrtime).
inline std::uint64_t now_ns() noexcept { return uv_hrtime(); }

// A millisecond duration in the nanoseconds of now_ns(): negative is 0, and a duration too
// long to express (milliseconds::max(), "wait forever") saturates instead of wrapping.
inline std::uint64_t to_ns(std::chrono::milliseconds value) noexcept {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  if (value.count() <= 0) return 0;
  const auto ms = static_cast<std::uint64_t>(value.count());
  return ms > kMax / 1'000'000u ? kMax : ms * 1'000'000u;
}

// `at + delay` in now_ns() time, saturating: a deadline that far away is "never".
inline std::uint64_t deadline_after(std::uint64_t at, std::uint64_t delay_ns) noexcept {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  return delay_ns > kMax - at ? kMax : at + delay_ns;
}
inline std::uint64_t deadline_after(std::uint64_t at, std::chrono::milliseconds delay) noexcept {
  return deadline_after(at, to_ns(delay));
}

// now + delay on steady_clock, saturating at time_point::max() (which callers read as
// "no deadline"): a caller's "wait forever" must not wrap into "already over".
inline std::chrono::steady_clock::time_point steady_deadline_after(std::chrono::milliseconds delay) noexcept {
  using Clock = std::chrono::steady_clock;
  const auto now = Clock::now();
  if (delay.count() <= 0) return now;
  if (delay >= std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + delay;
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/quorum.h — the vote counting of one round, free of I/O so it can be tested alone.
//
// A round sends one command to each of N masters. Each reply (or its absence) is a vote:
// for, against because of another owner / a missing key, or failed. The round is decided
// as soon as the outcome cannot change: `quorum` votes for, or more than N - quorum
// against.
#pragma once

#include <chrono>
#include <cstdint>

#include "redlock/result.h"

namespace redlock::detail {

// fence: round 2 of a fenced acquire (raise the counters to the granted token).
enum class RoundKind : std::uint8_t { acquire, extend, release, fence };
enum class Verdict : std::uint8_t { undecided, success, failure };

// Whether a round touches the fencing counter: a fence raise, or a fenced acquire.
[[nodiscard]] constexpr bool touches_fence_counter(RoundKind kind, bool fencing) noexcept {
  return kind == RoundKind::fence || (kind == RoundKind::acquire && fencing);
}

[[nodiscard]] constexpr std::uint32_t quorum_of(std::uint32_t masters) noexcept {
  return masters / 2 + 1;
}

struct Tally {
  RoundKind kind;
  std::uint32_t size;
  std::uint32_t quorum = quorum_of(size);
  std::uint32_t granted = 0;  // votes for
  std::uint32_t held = 0;     // another owner's token
  std::uint32_t missing = 0;  // extend: no key
  std::uint32_t failed = 0;   // error, timeout, not connected, not counted

  // Counts one master's final status. `pending` is not a vote and is ignored.
  void add(MasterStatus status) noexcept;
  [[nodiscard]] std::uint32_t against() const noexcept { return held + missing + failed; }
  [[nodiscard]] Verdict verdict() const noexcept;
  // The top-level outcome of a round whose verdict is failure: "taken" / "lost" when other
  // owners (or missing keys) are at least as many as the failures, else "unreachable".
  [[nodiscard]] Outcome failure_outcome() const noexcept;
};

// Drift allowance of the Redlock description: ttl * factor + constant.
[[nodiscard]] std::chrono::microseconds drift_for(std::chrono::milliseconds ttl, double factor,
                                                  std::chrono::milliseconds constant) noexcept;

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// chaos/checker.h — checks a merged chaos history.
//
// Three independent properties, each a kind of violation:
//  - mutual_exclusion: two grants of one resource whose windows [granted, min(release,
//    deadline)] overlap by more than the tolerance (1 ms). A grant is "granted" when the
//    acquire returned it, ends when its holder invoked release or when its validity deadline
//    passed, whichever is first.
//  - oracle: two processes inside the harness-owned resource at once ([enter, leave]
//    intervals overlap by more than the tolerance). This is what the holders actually did,
//    whatever the lock thought: a holder paused past its deadline shows up here.
//  - fencing: the store accepted a fenced write carrying a lower token than a write it had
//    already accepted (the earlier one's reply came before the later one was sent).
// Each violation names the two parties, the overlap, and the faults active in
// [first party's grant, end of overlap].
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "history.h"

namespace redlock::chaos {

enum class ViolationKind : std::uint8_t { mutual_exclusion, oracle, fencing };
[[nodiscard]] std::string_view to_string(ViolationKind kind) noexcept;

inline constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

struct Violation {
  ViolationKind kind = ViolationKind::mutual_exclusion;
  std::string resource;
  int process_a = -1;  // the earlier party
  int process_b = -1;
  std::string token_a;
  std::string token_b;
  std::uint64_t fence_a = 0;
  std::uint64_t fence_b = 0;
  std::int64_t overlap_start_ns = 0;  // fencing: when A's write was acknowledged
  std::int64_t overlap_end_ns = 0;    // fencing: when B's (lower) write was sent
  std::vector<std::string> faults;    // faults active at the time
  std::string description;
  [[nodiscard]] std::int64_t overlap_ns() const { return overlap_end_ns - overlap_start_ns; }
};

struct CheckOptions {
  std::int64_t tolerance_ns = 1'000'000;  // overlaps up to this are not violations
  std::size_t max_listed = 200;           // violations kept in full (all are counted)
};

struct CheckReport {
  // What happened.
  std::size_t acquires = 0;  // acquire_invoke events
  std::size_t grants = 0;
  std::size_t failures = 0;
  std::size_t releases = 0;
  std::size_t writes_accepted = 0;
  std::size_t writes_rejected = 0;
  std::size_t late_writes_accepted = 0;  // sent after the writer's own validity deadline
  std::size_t late_writes_rejected = 0;
  std::size_t live_oracle_conflicts = 0;  // detected by the oracle as they happened
  std::size_t faults = 0;
  std::size_t processes = 0;
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
  // Liveness: the longest time, after the first grant of a resource, during which nobody held
  // it (no valid, unreleased grant) while clients kept trying to acquire it. A lock left
  // behind forever (SETNX, then a crash before EXPIRE) shows up here, not as a violation.
  std::int64_t longest_no_grant_ns = 0;
  // What went wrong.
  std::size_t mutual_exclusion_violations = 0;
  std::size_t oracle_violations = 0;
  std::size_t fencing_violations = 0;
  std::vector<Violation> violations;  // the first max_listed of them, by time

  [[nodiscard]] std::size_t total_violations() const {
    return mutual_exclusion_violations + oracle_violations + fencing_violations;
  }
  [[nodiscard]] std::size_t count(ViolationKind kind) const;
  [[nodiscard]] nlohmann::json to_json() const;
  // A human-readable summary plus one line per listed violation (up to `lines`).
  [[nodiscard]] std::string table(std::size_t lines = 10) const;
};

// `history` need not be sorted.
[[nodiscard]] CheckReport check_history(const std::vector<Event>& history, const CheckOptions& options = {});

}  // namespace redlock::chaos

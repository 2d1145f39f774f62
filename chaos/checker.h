// SPDX-License-Identifier: Apache-2.0
// chaos/checker.h — checks a merged chaos history.
//
// Five independent properties, each a kind of violation:
//  - mutual_exclusion: two grants of one resource whose windows [granted, min(release,
//    deadline)] overlap by more than the tolerance (1 ms). A grant is "granted" when the
//    acquire returned it, ends when its holder invoked release or when its validity deadline
//    passed, whichever is first. A grant held by fewer masters than --min-holders asked
//    (released unused) binds no later grant, but may not overlap an earlier grant held on
//    enough masters at all (no tolerance: its window, the read-back, is shorter than it); it is
//    left out of the liveness gap, not out of the fencing checks.
//  - oracle: two processes inside the harness-owned resource at once ([enter, leave]
//    intervals overlap by more than the tolerance). This is what the holders actually did,
//    whatever the lock thought: a holder paused past its deadline shows up here.
//  - fencing: the store accepted a fenced write carrying a lower token than a write it had
//    already accepted (the earlier one's reply came before the later one was sent); or a
//    fenced grant whose acquire began after another grant of the resource had been handed
//    out carries a token no higher than that one's (the store's check alone cannot show
//    tokens going backwards: it refuses the lower one).
//  - unsignalled_overrun (grants kept as a lease: lease_start): the holder was inside the
//    oracle past the lease's deadline by more than the tolerance while no loss signal had
//    come by that deadline. The deadline moves with the lease_renewed events (each counts
//    from when it was recorded, i.e. when the holder saw it: a renewal seen only after the
//    old deadline leaves a gap the holder worked through) and the deadline a lease_lost
//    reports.
//  - late_loss_signal: a lease_lost that came after the deadline in force at that moment
//    (by more than the tolerance): the lease promised it before.
// With leases a grant's window for mutual_exclusion ends at its latest deadline.
// Each violation names the two parties, the overlap, and the faults active in
// [first party's grant, end of overlap].
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "history.h"

namespace redlock::chaos {

enum class ViolationKind : std::uint8_t { mutual_exclusion, oracle, fencing, unsignalled_overrun, late_loss_signal };
inline constexpr ViolationKind kViolationKinds[] = {ViolationKind::mutual_exclusion, ViolationKind::oracle,
                                                    ViolationKind::fencing, ViolationKind::unsignalled_overrun,
                                                    ViolationKind::late_loss_signal};
[[nodiscard]] std::string_view to_string(ViolationKind kind) noexcept;

inline constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

struct Violation {
  ViolationKind kind = ViolationKind::mutual_exclusion;
  std::string resource;
  int process_a = -1;  // the earlier party (lease kinds: the holder)
  int process_b = -1;  // lease kinds: -1
  std::string token_a;
  std::string token_b;
  std::uint64_t fence_a = 0;
  std::uint64_t fence_b = 0;
  std::int64_t overlap_start_ns = 0;  // fencing: when A's write was acknowledged; lease kinds: the deadline
  std::int64_t overlap_end_ns = 0;    // fencing: when B's (lower) write was sent; unsignalled_overrun: when
                                      // the holder left or the deadline moved on; late_loss_signal: the signal
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
  // Grants held by fewer masters than --min-holders asked, released unused (not in `grants`):
  // judged only as the later party of a mutual-exclusion pair.
  std::size_t grants_below_min_holders = 0;
  // Grants whose validity deadline had passed when the worker recorded the acquire's return
  // (their window is empty, so no overlap check sees them; the live oracle still sees any use of
  // them). Shown, not a failure: a worker thread woken late on a loaded machine records one.
  std::size_t grants_expired_at_return = 0;
  std::size_t failures = 0;
  std::size_t releases = 0;
  std::size_t writes_accepted = 0;
  std::size_t writes_rejected = 0;
  std::size_t late_writes_accepted = 0;  // sent after the writer's own validity deadline
  std::size_t late_writes_rejected = 0;
  std::size_t store_errors = 0;  // writes that failed at the store (not counted as rejected)
  std::size_t live_oracle_conflicts = 0;  // detected by the oracle as they happened
  std::size_t faults = 0;
  std::size_t processes = 0;
  std::int64_t first_ns = 0;
  std::int64_t last_ns = 0;
  // Liveness: the longest time, after the first grant of a resource, during which nobody held
  // it (no valid, unreleased grant) while clients kept trying to acquire it. A lock left
  // behind forever (SETNX, then a crash before EXPIRE) shows up here, not as a violation.
  std::int64_t longest_no_grant_ns = 0;
  // Leases (zero in histories without them).
  std::size_t leases = 0;           // grants kept as a lease (lease_start)
  std::size_t lease_renewals = 0;   // lease_renewed events
  std::size_t losses_signalled = 0; // lease_lost events
  std::map<std::string, std::size_t> losses_by_reason;  // lease_lost detail -> count
  // Overruns past the deadline although the loss was signalled in time: the holder (the
  // harness's worker) did not stop. Not a lease violation; the oracle shows what it costs.
  std::size_t overruns_after_signal = 0;
  // What went wrong.
  std::size_t mutual_exclusion_violations = 0;
  std::size_t oracle_violations = 0;
  std::size_t fencing_violations = 0;
  std::size_t unsignalled_overrun_violations = 0;
  std::size_t late_loss_signal_violations = 0;
  std::vector<Violation> violations;  // the first max_listed of them, by time
  // Of all of them (listed or not), those with a fault active in their window, per kind
  // (index: the ViolationKind's value).
  std::array<std::size_t, std::size(kViolationKinds)> during_faults{};

  [[nodiscard]] std::size_t total_violations() const {
    return mutual_exclusion_violations + oracle_violations + fencing_violations + unsignalled_overrun_violations +
           late_loss_signal_violations;
  }
  [[nodiscard]] std::size_t count(ViolationKind kind) const;
  [[nodiscard]] std::size_t& count(ViolationKind kind);
  [[nodiscard]] nlohmann::json to_json() const;
  // A human-readable summary plus one line per listed violation (up to `lines`).
  [[nodiscard]] std::string table(std::size_t lines = 10) const;
};

// `history` need not be sorted.
[[nodiscard]] CheckReport check_history(const std::vector<Event>& history, const CheckOptions& options = {});

}  // namespace redlock::chaos

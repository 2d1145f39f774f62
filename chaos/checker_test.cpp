// SPDX-License-Identifier: Apache-2.0
// The checker on synthetic histories: it must find what is there and only that.
#include "checker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

namespace redlock::chaos {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// A grant to `process` at `granted` ms (its acquire begun 1 ms before), valid until
// `deadline` ms, released at `release` ms (negative: never), inside the oracle for the whole
// time it holds.
void hold(std::vector<Event>& h, int process, const std::string& token, std::int64_t granted, std::int64_t deadline,
          std::int64_t release, std::uint64_t fence = 0) {
  Event e;
  e.process = process;
  e.resource = "r";
  e.token = token;
  e.fence = fence;
  e.type = EventType::acquire_invoke;
  e.t_ns = (granted - 1) * kMs;
  h.push_back(e);
  e.type = EventType::acquire_ok;
  e.started_ns = (granted - 1) * kMs;
  e.t_ns = granted * kMs;
  e.deadline_ns = deadline * kMs;
  h.push_back(e);
  e.started_ns = 0;
  e.type = EventType::enter;
  e.t_ns = granted * kMs + 1;
  h.push_back(e);
  if (release >= 0) {
    e.type = EventType::leave;
    e.t_ns = release * kMs - 1;
    h.push_back(e);
    e.type = EventType::release;
    e.t_ns = release * kMs;
    h.push_back(e);
  }
}

void write(std::vector<Event>& h, int process, std::uint64_t fence, std::int64_t invoke, std::int64_t done,
           bool accepted, std::int64_t deadline = 0) {
  Event e;
  e.type = accepted ? EventType::write_accepted : EventType::write_rejected;
  e.process = process;
  e.resource = "r";
  e.fence = fence;
  e.invoke_ns = invoke * kMs;
  e.t_ns = done * kMs;
  e.deadline_ns = deadline * kMs;
  h.push_back(e);
}

void fault(std::vector<Event>& h, std::int64_t id, const std::string& what, std::int64_t start, std::int64_t end) {
  Event e;
  e.type = EventType::fault_start;
  e.fault_id = id;
  e.detail = what;
  e.t_ns = start * kMs;
  h.push_back(e);
  e.type = EventType::fault_end;
  e.t_ns = end * kMs;
  h.push_back(e);
}

TEST(Checker, CleanSequentialHistoryHasNoViolations) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 1000, 20, 1);
  hold(h, 1, "b", 21, 1000, 30, 2);
  hold(h, 0, "c", 31, 1000, 40, 3);
  write(h, 0, 1, 12, 13, true);
  write(h, 1, 2, 22, 23, true);
  write(h, 0, 3, 32, 33, true);
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.grants, 3u);
  EXPECT_EQ(r.releases, 3u);
  EXPECT_EQ(r.processes, 2u);
  EXPECT_EQ(r.total_violations(), 0u) << r.table();
}

TEST(Checker, OverlappingGrantsAreAMutualExclusionViolationWithTheActiveFault) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 1000, 100);
  hold(h, 1, "b", 50, 1000, 60);
  fault(h, 7, "SIGKILL master 127.0.0.1:1", 40, 45);
  fault(h, 8, "unrelated later fault", 500, 600);
  const CheckReport r = check_history(h);
  ASSERT_EQ(r.mutual_exclusion_violations, 1u) << r.table();
  EXPECT_EQ(r.oracle_violations, 1u);
  const Violation& v = r.violations.front();
  EXPECT_EQ(v.process_a, 0);
  EXPECT_EQ(v.process_b, 1);
  EXPECT_EQ(v.overlap_start_ns, 50 * kMs);
  EXPECT_NEAR(static_cast<double>(v.overlap_ns()), 10.0 * kMs, 2.0);
  ASSERT_EQ(v.faults.size(), 1u);
  EXPECT_EQ(v.faults[0], "SIGKILL master 127.0.0.1:1");
  EXPECT_NE(r.table().find("SIGKILL master"), std::string::npos);
  EXPECT_EQ(r.to_json()["violations"]["mutual_exclusion"], 1);
}

TEST(Checker, AGrantEndsAtItsDeadlineEvenIfNeverReleased) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 100, -1);  // never released: lease ends at 100 ms
  hold(h, 1, "b", 101, 300, 200);
  CheckReport r = check_history(h);
  EXPECT_EQ(r.mutual_exclusion_violations, 0u) << r.table();
  // ... but it never left the oracle either, so the oracle sees both inside.
  EXPECT_EQ(r.oracle_violations, 1u);
}

TEST(Checker, OverlapWithinTheToleranceIsNotAViolation) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 1000, 20);
  Event e;
  e.type = EventType::acquire_ok;
  e.process = 1;
  e.resource = "r";
  e.token = "b";
  e.t_ns = 20 * kMs - kMs / 2;  // 0.5 ms before a's release
  e.deadline_ns = 1000 * kMs;
  h.push_back(e);
  EXPECT_EQ(check_history(h).mutual_exclusion_violations, 0u);
  CheckOptions strict;
  strict.tolerance_ns = 0;
  EXPECT_EQ(check_history(h, strict).mutual_exclusion_violations, 1u);
}

TEST(Checker, DifferentResourcesNeverConflict) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 1000, 100);
  hold(h, 1, "b", 50, 1000, 60);
  for (auto& e : h) {
    if (e.process == 1) e.resource = "other";
  }
  EXPECT_EQ(check_history(h).total_violations(), 0u);
}

TEST(Checker, PausedHolderIsAnOracleViolationNotAMutualExclusionOne) {
  // A's lease ends at 100 ms, it is paused inside until 400 ms; B is granted at 150 ms.
  std::vector<Event> h;
  hold(h, 0, "a", 10, 100, 400);
  hold(h, 1, "b", 150, 1000, 200);
  fault(h, 3, "SIGSTOP client 0", 20, 390);
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.mutual_exclusion_violations, 0u);
  ASSERT_EQ(r.oracle_violations, 1u);
  EXPECT_EQ(r.violations.front().faults, std::vector<std::string>{"SIGSTOP client 0"});
}

TEST(Checker, StoreAcceptingALowerTokenAfterAHigherOneIsAFencingViolation) {
  std::vector<Event> h;
  write(h, 1, 5, 10, 11, true);
  write(h, 0, 4, 20, 21, true, 15);  // late and stale, yet accepted
  const CheckReport r = check_history(h);
  ASSERT_EQ(r.fencing_violations, 1u);
  EXPECT_EQ(r.violations.front().fence_a, 5u);
  EXPECT_EQ(r.violations.front().fence_b, 4u);
  EXPECT_EQ(r.late_writes_accepted, 1u);
}

TEST(Checker, RejectedStaleWriteAndConcurrentWritesAreFine) {
  std::vector<Event> h;
  write(h, 1, 5, 10, 11, true);
  write(h, 0, 4, 20, 21, false, 15);  // late, stale, rejected: fencing worked
  write(h, 2, 6, 30, 40, true);
  write(h, 3, 3, 35, 36, true);  // sent before 6 was acknowledged... but after 5 was
  CheckReport r = check_history(h);
  EXPECT_EQ(r.late_writes_rejected, 1u);
  EXPECT_EQ(r.fencing_violations, 1u);  // 3 < 5
  h.pop_back();
  write(h, 3, 7, 35, 36, true);  // 7 while 6 was in flight: no order between them
  r = check_history(h);
  EXPECT_EQ(r.fencing_violations, 0u) << r.table();
  EXPECT_EQ(r.writes_accepted, 3u);
  EXPECT_EQ(r.writes_rejected, 1u);
}

// Tokens at the grants: an acquire begun after a grant was handed out must get a higher token,
// even where the store never shows it (it refuses the lower one, or nobody wrote).
TEST(Checker, AGrantBegunAfterAHigherTokenWasHandedOutIsAFencingViolation) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 1000, 20, 7);
  hold(h, 1, "b", 30, 1000, 40, 5);  // begun at 29, after a's grant at 10: backwards
  CheckReport r = check_history(h);
  ASSERT_EQ(r.fencing_violations, 1u) << r.table();
  EXPECT_EQ(r.violations.front().fence_a, 7u);
  EXPECT_EQ(r.violations.front().fence_b, 5u);
  EXPECT_EQ(r.mutual_exclusion_violations, 0u);
  h.clear();
  hold(h, 0, "a", 10, 1000, 20, 7);
  hold(h, 1, "b", 30, 1000, 40, 7);  // the same token again is no better
  EXPECT_EQ(check_history(h).fencing_violations, 1u);
  h.clear();
  hold(h, 0, "a", 10, 1000, 20, 7);
  hold(h, 1, "b", 30, 1000, 40, 8);
  hold(h, 2, "c", 11, 1000, -1, 0);  // unfenced grants are not judged
  EXPECT_EQ(check_history(h).fencing_violations, 0u);
}

// --min-holders: a grant held by too few masters binds no later grant, but may not overlap an
// earlier one.
TEST(Checker, AGrantBelowMinHoldersIsJudgedOnlyAsTheLaterParty) {
  std::vector<Event> h;
  hold(h, 0, "weak", 10, 1000, 30);
  h[1].detail = std::string(kBelowMinHoldersPrefix) + "held by 3 of 5 masters; released unused";
  hold(h, 1, "strong", 20, 1000, 40);  // overlaps the weak one, which promised nothing
  CheckReport r = check_history(h);
  EXPECT_EQ(r.mutual_exclusion_violations, 0u) << r.table();
  EXPECT_EQ(r.grants, 1u);
  EXPECT_EQ(r.grants_below_min_holders, 1u);
  h.clear();
  hold(h, 0, "strong", 10, 1000, 30);
  hold(h, 1, "weak", 20, 1000, 40);  // overlaps a grant held on enough masters
  h[h.size() - 4].detail = std::string(kBelowMinHoldersPrefix) + "held by 3 of 5 masters; released unused";
  r = check_history(h);
  EXPECT_EQ(r.mutual_exclusion_violations, 1u) << r.table();
}

// The same with the window the harness really gives a grant below --min-holders: from the
// acquire's return through the read-back to its release, well under the 1 ms tolerance. Its
// overlap with a grant held on enough masters is never more than its own window, so the
// tolerance must not apply to it (before: 0 violations, whatever the weak grant overlapped).
TEST(Checker, AGrantBelowMinHoldersOverlappingByLessThanTheToleranceIsAViolation) {
  std::vector<Event> h;
  hold(h, 0, "strong", 10, 1000, 30);
  Event e;
  e.process = 1;
  e.resource = "r";
  e.token = "weak";
  e.type = EventType::acquire_invoke;
  e.t_ns = 19 * kMs;
  h.push_back(e);
  e.type = EventType::acquire_ok;
  e.started_ns = 19 * kMs;
  e.t_ns = 20 * kMs;
  e.deadline_ns = 1000 * kMs;
  e.detail = std::string(kBelowMinHoldersPrefix) + "held by 3 of 5 masters; released unused";
  h.push_back(e);
  e.started_ns = 0;
  e.detail.clear();
  e.type = EventType::release;
  e.t_ns = 20 * kMs + kMs / 2;  // the read-back took half a millisecond
  h.push_back(e);
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.mutual_exclusion_violations, 1u) << r.table();
  EXPECT_EQ(r.grants_below_min_holders, 1u);
}

// A grant returned after its own deadline has an empty window: no overlap check can see it,
// so it is counted (a clean run must have none).
TEST(Checker, AGrantReturnedPastItsDeadlineIsCounted) {
  std::vector<Event> h;
  hold(h, 0, "late", 20, 15, 30);
  hold(h, 1, "fine", 40, 1000, 50);
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.grants_expired_at_return, 1u) << r.table();
  EXPECT_EQ(r.grants, 2u);
}

// Two acquires in flight together may be granted in either token order: only one begun after
// the other's grant is bound by it.
TEST(Checker, GrantsWhoseAcquiresOverlapAreNotOrderedByToken) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 1000, 20, 7);
  hold(h, 1, "b", 10, 1000, 40, 5);  // begun at 9, before a's grant was handed out
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.fencing_violations, 0u) << r.table();
}

// A write that failed at the store was not refused: it is neither a rejection nor a late one.
TEST(Checker, AStoreErrorIsNotARejection) {
  std::vector<Event> h;
  write(h, 0, 4, 20, 21, false, 15);
  h.back().detail = std::string(kStoreErrorPrefix) + "connection refused";
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.writes_rejected, 0u);
  EXPECT_EQ(r.late_writes_rejected, 0u);
  EXPECT_EQ(r.store_errors, 1u);
}

// Liveness: the longest stretch after the first grant with nobody holding while clients try.
TEST(Checker, LongestNoGrantGapCountsGapsAndTheTailOfFailedAttempts) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 1000, 30);   // held 10..30
  hold(h, 1, "b", 25, 1000, 40);   // overlapping coverage: held until 40
  hold(h, 0, "c", 140, 1000, 150);  // 100 ms with nobody holding
  Event fail;
  fail.process = 1;
  fail.resource = "r";
  fail.type = EventType::acquire_fail;
  fail.t_ns = 400 * kMs;  // clients keep failing until 400: a 250 ms tail
  h.push_back(fail);
  EXPECT_EQ(check_history(h).longest_no_grant_ns, 250 * kMs);
  h.pop_back();
  EXPECT_EQ(check_history(h).longest_no_grant_ns, 100 * kMs);
  // A grant that is never released and has no deadline covers the rest of the history.
  std::vector<Event> stuck;
  hold(stuck, 0, "a", 10, 0, -1);
  fail.t_ns = 900 * kMs;
  stuck.push_back(fail);
  EXPECT_EQ(check_history(stuck).longest_no_grant_ns, 0);
}

// ---- leases: the deadline moves with renewals; loss must be signalled before it ----

// A lease event of process `process`'s grant `token` at `t` ms, deadline `deadline` ms.
void lease_event(std::vector<Event>& h, EventType type, int process, const std::string& token, std::int64_t t,
                 std::int64_t deadline, const std::string& detail = {}, std::int64_t started = 0) {
  Event e;
  e.type = type;
  e.process = process;
  e.resource = "r";
  e.token = token;
  e.t_ns = t * kMs;
  e.deadline_ns = deadline * kMs;
  e.detail = detail;
  e.started_ns = started * kMs;
  h.push_back(e);
}

// Grant `token` at `granted` ms (ttl 300: deadline granted + 290), kept as a lease at
// granted + 1, renewed (seen) every 100 ms up to and including `last_renewal` ms, each renewal
// moving the deadline to 290 ms after it; inside the oracle until `leave` ms, released at
// `leave` + 1.
void leased_hold(std::vector<Event>& h, int process, const std::string& token, std::int64_t granted,
                 std::int64_t last_renewal, std::int64_t leave) {
  hold(h, process, token, granted, granted + 290, -1);
  lease_event(h, EventType::lease_start, process, token, granted + 1, granted + 290);
  for (std::int64_t t = granted + 100; t <= last_renewal; t += 100) {
    lease_event(h, EventType::lease_renewed, process, token, t, t + 290);
  }
  Event e;
  e.process = process;
  e.resource = "r";
  e.token = token;
  e.type = EventType::leave;
  e.t_ns = leave * kMs;
  h.push_back(e);
  e.type = EventType::release;
  e.t_ns = (leave + 1) * kMs;
  h.push_back(e);
}

TEST(CheckerLease, RenewedLeaseHeldLongPastItsFirstDeadlineIsClean) {
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 1910, 2000);  // ttl 300 ms, held 2 s: deadline 2200 when it leaves
  leased_hold(h, 1, "b", 2010, 2910, 3000);
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.total_violations(), 0u) << r.table();
  EXPECT_EQ(r.leases, 2u);
  EXPECT_EQ(r.lease_renewals, 28u);
  EXPECT_EQ(r.losses_signalled, 0u);
  EXPECT_EQ(r.overruns_after_signal, 0u);
}

TEST(CheckerLease, WorkingPastTheDeadlineWithoutALossSignalIsAnUnsignalledOverrun) {
  // Renewed once (deadline 400), then no renewal and no signal; inside until 600.
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 110, 600);
  fault(h, 4, "SIGSTOP master 127.0.0.1:1", 150, 700);
  const CheckReport r = check_history(h);
  ASSERT_EQ(r.unsignalled_overrun_violations, 1u) << r.table();
  EXPECT_EQ(r.late_loss_signal_violations, 0u);
  EXPECT_EQ(r.total_violations(), 1u);
  const Violation& v = r.violations.front();
  EXPECT_EQ(v.kind, ViolationKind::unsignalled_overrun);
  EXPECT_EQ(v.process_a, 0);
  EXPECT_EQ(v.token_a, "a");
  EXPECT_EQ(v.overlap_start_ns, 400 * kMs);
  EXPECT_EQ(v.overlap_end_ns, 600 * kMs);
  EXPECT_EQ(v.faults, std::vector<std::string>{"SIGSTOP master 127.0.0.1:1"});
  EXPECT_EQ(r.to_json()["violations"]["unsignalled_overrun"], 1);
  EXPECT_NE(r.table().find("[unsignalled_overrun]"), std::string::npos);
}

TEST(CheckerLease, ARenewalSeenOnlyAfterTheDeadlineLeavesAGapTheHolderWorkedThrough) {
  std::vector<Event> h;
  hold(h, 0, "a", 10, 300, -1);
  lease_event(h, EventType::lease_start, 0, "a", 11, 300);
  lease_event(h, EventType::lease_renewed, 0, "a", 320, 600);  // 20 ms with no valid lease (start unknown)
  leased_hold(h, 1, "unrelated", 1000, 1000, 1100);
  Event leave;
  leave.type = EventType::leave;
  leave.process = 0;
  leave.resource = "r";
  leave.token = "a";
  leave.t_ns = 500 * kMs;
  h.push_back(leave);
  const CheckReport r = check_history(h);
  ASSERT_EQ(r.unsignalled_overrun_violations, 1u) << r.table();
  EXPECT_EQ(r.violations.front().overlap_start_ns, 300 * kMs);
  EXPECT_EQ(r.violations.front().overlap_end_ns, 320 * kMs);
}

TEST(CheckerLease, ARenewalSentBeforeTheDeadlineButSeenAfterItLeavesNoGap) {
  // The round went out at 250 (before the deadline 300); the holder's thread looked only at
  // 340. The key never left a quorum, and the new validity counts from 250.
  std::vector<Event> h;
  hold(h, 0, "a", 10, 300, -1);
  lease_event(h, EventType::lease_start, 0, "a", 11, 300);
  lease_event(h, EventType::lease_renewed, 0, "a", 340, 540, {}, 250);
  Event leave;
  leave.type = EventType::leave;
  leave.process = 0;
  leave.resource = "r";
  leave.token = "a";
  leave.t_ns = 500 * kMs;
  h.push_back(leave);
  CheckReport r = check_history(h);
  EXPECT_EQ(r.total_violations(), 0u) << r.table();
  // The same round sent at 305, after the deadline: a gap from 300 until it was seen.
  h[h.size() - 2].started_ns = 305 * kMs;
  r = check_history(h);
  ASSERT_EQ(r.unsignalled_overrun_violations, 1u) << r.table();
  EXPECT_EQ(r.violations.front().overlap_start_ns, 300 * kMs);
  EXPECT_EQ(r.violations.front().overlap_end_ns, 340 * kMs);
}

TEST(CheckerLease, LossSignalledInTimeAndHolderStoppingIsClean) {
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 110, 305);  // deadline 400
  lease_event(h, EventType::lease_lost, 0, "a", 303, 400, "deadline");
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.total_violations(), 0u) << r.table();
  EXPECT_EQ(r.losses_signalled, 1u);
  EXPECT_EQ(r.losses_by_reason.at("deadline"), 1u);
}

TEST(CheckerLease, ALossSignalledAfterTheDeadlineIsLateEvenIfTheHolderHadLeft) {
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 110, 200);  // left at 200, deadline 400
  lease_event(h, EventType::lease_lost, 0, "a", 450, 400, "taken");
  const CheckReport r = check_history(h);
  ASSERT_EQ(r.late_loss_signal_violations, 1u) << r.table();
  EXPECT_EQ(r.unsignalled_overrun_violations, 0u);
  EXPECT_EQ(r.violations.front().overlap_start_ns, 400 * kMs);
  EXPECT_EQ(r.violations.front().overlap_end_ns, 450 * kMs);
}

TEST(CheckerLease, APausedLeasedHolderIsBothAnOverrunAndALateSignal) {
  // The whole process (its lease's loop thread too) stopped from 150 to 650 ms.
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 110, 652);
  lease_event(h, EventType::lease_lost, 0, "a", 651, 400, "deadline");
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.unsignalled_overrun_violations, 1u) << r.table();
  EXPECT_EQ(r.late_loss_signal_violations, 1u);
}

TEST(CheckerLease, OverrunAfterATimelySignalIsCountedButIsNotALeaseViolation) {
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 110, 500);  // deadline 400, kept working until 500
  lease_event(h, EventType::lease_lost, 0, "a", 300, 400, "deadline");
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.total_violations(), 0u) << r.table();
  EXPECT_EQ(r.overruns_after_signal, 1u);
}

TEST(CheckerLease, TheLossSignalsDeadlineCountsWhenTheHolderMissedARenewal) {
  // The holder never saw the renewal to 700 (it stopped polling), but on_lost reports it:
  // a signal at 650 is in time.
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 110, 300);
  lease_event(h, EventType::lease_lost, 0, "a", 650, 700, "taken");
  EXPECT_EQ(check_history(h).total_violations(), 0u) << check_history(h).table();
}

TEST(CheckerLease, MutualExclusionUsesTheRenewedDeadline) {
  // A's first deadline is 300, renewed (seen at 110 and 210) to 500; B is granted at 400
  // while A still holds and has not released.
  std::vector<Event> h;
  leased_hold(h, 0, "a", 10, 210, 600);
  hold(h, 1, "b", 400, 700, 450);
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.mutual_exclusion_violations, 1u) << r.table();
  EXPECT_EQ(r.oracle_violations, 1u);
}

TEST(CheckerLease, GrantsWithoutALeaseAreNeverJudgedAsLeases) {
  // The plain quorum strategy's paused holder (inside long past its deadline, no lease):
  // an oracle matter, not a lease one. Histories written before leases read the same.
  std::vector<Event> h;
  hold(h, 0, "a", 10, 100, 400);
  const CheckReport r = check_history(h);
  EXPECT_EQ(r.total_violations(), 0u) << r.table();
  EXPECT_EQ(r.leases, 0u);
  EXPECT_EQ(r.table().find("lease renewals"), std::string::npos);
}

TEST(History, EventsRoundTripThroughJsonLinesFiles) {
  char path[] = "/tmp/chaos-history-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::vector<Event> h;
  hold(h, 2, "tok", 10, 1000, 20, 42);
  fault(h, 9, "freeze master 1", 1, 2);
  lease_event(h, EventType::lease_start, 2, "tok", 11, 1000);
  lease_event(h, EventType::lease_renewed, 2, "tok", 12, 1100);
  h.back().started_ns = 11 * kMs;
  lease_event(h, EventType::lease_lost, 2, "tok", 13, 1100, "taken");
  {
    HistoryWriter w(path);
    for (const auto& e : h) w.write(e);
  }
  const std::vector<Event> back = read_history(path);
  std::remove(path);
  ASSERT_EQ(back.size(), h.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(format_event(back[i]), format_event(h[i]));
    EXPECT_EQ(back[i].type, h[i].type);
  }
  const auto merged = merge_histories({back, {}});
  for (std::size_t i = 1; i < merged.size(); ++i) EXPECT_LE(merged[i - 1].t_ns, merged[i].t_ns);
  EXPECT_THROW((void)parse_event("{\"type\":\"nope\"}"), std::runtime_error);
  EXPECT_THROW((void)parse_event("not json"), std::runtime_error);
}

}  // namespace
}  // namespace redlock::chaos

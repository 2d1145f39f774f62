// SPDX-License-Identifier: Apache-2.0
// Tests for the I/O-free vote counting of one round (redlock::detail::Tally), quorum_of,
// the drift allowance drift_for and what one reply says (classify_reply), as documented in
// lib/detail/quorum.h.
#include "detail/lock_commands.h"
#include "detail/quorum.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "redlock/result.h"

namespace {

using namespace std::chrono_literals;
using redlock::MasterStatus;
using redlock::Outcome;
using redlock::detail::drift_for;
using redlock::detail::classify_reply;
using redlock::detail::kPttlUnknown;
using redlock::detail::quorum_of;
using redlock::detail::RoundKind;
using redlock::detail::Tally;
using redlock::detail::Verdict;
using std::chrono::microseconds;

constexpr std::array kAllStatuses = {MasterStatus::ok,           MasterStatus::held_by_other, MasterStatus::not_found,
                                     MasterStatus::server_error, MasterStatus::timeout,       MasterStatus::not_connected,
                                     MasterStatus::not_counted,  MasterStatus::pending};
constexpr std::array kFailures = {MasterStatus::server_error, MasterStatus::timeout, MasterStatus::not_connected,
                                  MasterStatus::not_counted};
constexpr std::array kKinds = {RoundKind::acquire, RoundKind::extend, RoundKind::release};

const char* name(RoundKind kind) {
  switch (kind) {
    case RoundKind::acquire: return "acquire";
    case RoundKind::extend: return "extend";
    case RoundKind::release: return "release";
    case RoundKind::fence: return "fence";
  }
  return "?";
}

const char* name(Verdict verdict) {
  switch (verdict) {
    case Verdict::undecided: return "undecided";
    case Verdict::success: return "success";
    case Verdict::failure: return "failure";
  }
  return "?";
}

Tally tally_of(RoundKind kind, std::uint32_t size, std::initializer_list<MasterStatus> statuses) {
  Tally tally{kind, size};
  for (const auto status : statuses) tally.add(status);
  return tally;
}

// ---------------------------------------------------------------------------------------
// quorum_of

TEST(QuorumOf, OneToSeven) {
  const std::array<std::uint32_t, 7> expected = {1, 2, 2, 3, 3, 4, 4};
  for (std::uint32_t n = 1; n <= 7; ++n) {
    EXPECT_EQ(quorum_of(n), expected[n - 1]) << "N=" << n;
  }
  static_assert(quorum_of(5) == 3);  // usable at compile time
}

TEST(QuorumOf, IsAStrictMajority) {
  for (std::uint32_t n = 1; n <= 1000; ++n) {
    const std::uint32_t q = quorum_of(n);
    EXPECT_GT(2 * q, n) << "two disjoint quorums could exist for N=" << n;
    EXPECT_LE(2 * (q - 1), n) << "quorum larger than needed for N=" << n;
  }
}

TEST(Tally, DefaultQuorumFollowsSize) {
  for (std::uint32_t n = 1; n <= 7; ++n) {
    const Tally tally{RoundKind::acquire, n};
    EXPECT_EQ(tally.quorum, n / 2 + 1);
    EXPECT_EQ(tally.granted + tally.held + tally.missing + tally.failed, 0u);
    EXPECT_EQ(tally.verdict(), Verdict::undecided);
  }
}

// ---------------------------------------------------------------------------------------
// Status -> vote mapping per kind

TEST(TallyMapping, AcquireAndExtend) {
  for (const RoundKind kind : {RoundKind::acquire, RoundKind::extend}) {
    SCOPED_TRACE(name(kind));
    Tally ok = tally_of(kind, 7, {MasterStatus::ok});
    EXPECT_EQ(ok.granted, 1u);
    EXPECT_EQ(ok.against(), 0u);

    Tally held = tally_of(kind, 7, {MasterStatus::held_by_other});
    EXPECT_EQ(held.granted, 0u);
    EXPECT_EQ(held.held, 1u);
    EXPECT_EQ(held.against(), 1u);

    Tally missing = tally_of(kind, 7, {MasterStatus::not_found});
    EXPECT_EQ(missing.granted, 0u);
    EXPECT_EQ(missing.missing, 1u);
    EXPECT_EQ(missing.against(), 1u);

    for (const auto status : kFailures) {
      SCOPED_TRACE(std::string(redlock::to_string(status)));
      Tally failed = tally_of(kind, 7, {status});
      EXPECT_EQ(failed.granted, 0u);
      EXPECT_EQ(failed.failed, 1u);
      EXPECT_EQ(failed.against(), 1u);
    }

    Tally pending = tally_of(kind, 7, {MasterStatus::pending});
    EXPECT_EQ(pending.granted + pending.against(), 0u);
  }
}

TEST(TallyMapping, Release) {
  // A release's goal is that our token is gone: ok (deleted), not_found (expired) and
  // held_by_other (someone else's now) all count for.
  for (const auto status : {MasterStatus::ok, MasterStatus::not_found, MasterStatus::held_by_other}) {
    SCOPED_TRACE(std::string(redlock::to_string(status)));
    Tally tally = tally_of(RoundKind::release, 7, {status});
    EXPECT_EQ(tally.granted, 1u);
    EXPECT_EQ(tally.against(), 0u);
  }
  for (const auto status : kFailures) {
    SCOPED_TRACE(std::string(redlock::to_string(status)));
    Tally tally = tally_of(RoundKind::release, 7, {status});
    EXPECT_EQ(tally.granted, 0u);
    EXPECT_EQ(tally.failed, 1u);
  }
  Tally pending = tally_of(RoundKind::release, 7, {MasterStatus::pending});
  EXPECT_EQ(pending.granted + pending.against(), 0u);

  // Three of five masters say "not ours any more": released.
  EXPECT_EQ(tally_of(RoundKind::release, 5,
                     {MasterStatus::not_found, MasterStatus::held_by_other, MasterStatus::not_found})
                .verdict(),
            Verdict::success);
}

// ---------------------------------------------------------------------------------------
// Early decisions

TEST(TallyVerdict, SuccessAtExactlyQuorum) {
  for (const RoundKind kind : kKinds) {
    for (std::uint32_t n = 1; n <= 7; ++n) {
      SCOPED_TRACE(std::string(name(kind)) + " N=" + std::to_string(n));
      Tally tally{kind, n};
      for (std::uint32_t i = 1; i < quorum_of(n); ++i) {
        tally.add(MasterStatus::ok);
        EXPECT_EQ(tally.verdict(), Verdict::undecided) << "after " << i << " grants";
      }
      tally.add(MasterStatus::ok);
      EXPECT_EQ(tally.verdict(), Verdict::success);
    }
  }
}

TEST(TallyVerdict, FailureAtNMinusQuorumPlusOneAgainst) {
  for (const RoundKind kind : {RoundKind::acquire, RoundKind::extend}) {
    for (const auto against : {MasterStatus::held_by_other, MasterStatus::not_found, MasterStatus::timeout}) {
      for (std::uint32_t n = 1; n <= 7; ++n) {
        SCOPED_TRACE(std::string(name(kind)) + " " + std::string(redlock::to_string(against)) +
                     " N=" + std::to_string(n));
        const std::uint32_t needed = n - quorum_of(n) + 1;
        Tally tally{kind, n};
        for (std::uint32_t i = 1; i < needed; ++i) {
          tally.add(against);
          EXPECT_EQ(tally.verdict(), Verdict::undecided) << "after " << i << " against";
        }
        tally.add(against);
        EXPECT_EQ(tally.verdict(), Verdict::failure);
      }
    }
  }
  for (std::uint32_t n = 1; n <= 7; ++n) {
    SCOPED_TRACE("release N=" + std::to_string(n));
    const std::uint32_t needed = n - quorum_of(n) + 1;
    Tally tally{RoundKind::release, n};
    for (std::uint32_t i = 1; i < needed; ++i) {
      tally.add(MasterStatus::not_connected);
      EXPECT_EQ(tally.verdict(), Verdict::undecided);
    }
    tally.add(MasterStatus::not_connected);
    EXPECT_EQ(tally.verdict(), Verdict::failure);
  }
}

TEST(TallyVerdict, UndecidedInBetween) {
  // N=5: 2 for and 2 against cannot decide; the fifth vote does, either way.
  for (const RoundKind kind : {RoundKind::acquire, RoundKind::extend}) {
    SCOPED_TRACE(name(kind));
    Tally tally = tally_of(kind, 5,
                           {MasterStatus::ok, MasterStatus::held_by_other, MasterStatus::ok, MasterStatus::timeout,
                            MasterStatus::pending});
    EXPECT_EQ(tally.verdict(), Verdict::undecided);
    Tally yes = tally;
    yes.add(MasterStatus::ok);
    EXPECT_EQ(yes.verdict(), Verdict::success);
    Tally no = tally;
    no.add(MasterStatus::not_found);
    EXPECT_EQ(no.verdict(), Verdict::failure);
  }
  // N=4 (quorum 3): 2 for, 1 against is undecided; 2 against fails even with 2 for.
  Tally four = tally_of(RoundKind::acquire, 4, {MasterStatus::ok, MasterStatus::ok, MasterStatus::held_by_other});
  EXPECT_EQ(four.verdict(), Verdict::undecided);
  four.add(MasterStatus::server_error);
  EXPECT_EQ(four.verdict(), Verdict::failure);
}

// ---------------------------------------------------------------------------------------
// failure_outcome: "taken" (acquire) / "lost" (extend) when other owners or missing keys
// are at least as many as the failures (and there is at least one), else unreachable.

TEST(TallyFailureOutcome, Acquire) {
  using S = MasterStatus;
  EXPECT_EQ(tally_of(RoundKind::acquire, 5, {S::held_by_other, S::held_by_other, S::held_by_other}).failure_outcome(),
            Outcome::taken);
  EXPECT_EQ(tally_of(RoundKind::acquire, 5, {S::timeout, S::timeout, S::not_connected}).failure_outcome(),
            Outcome::quorum_unreachable);
  EXPECT_EQ(tally_of(RoundKind::acquire, 5, {S::held_by_other, S::held_by_other, S::timeout}).failure_outcome(),
            Outcome::taken);
  EXPECT_EQ(tally_of(RoundKind::acquire, 5, {S::held_by_other, S::server_error, S::timeout}).failure_outcome(),
            Outcome::quorum_unreachable);
  // A tie goes to "taken".
  EXPECT_EQ(tally_of(RoundKind::acquire, 4, {S::held_by_other, S::not_connected}).failure_outcome(), Outcome::taken);
  EXPECT_EQ(tally_of(RoundKind::acquire, 1, {S::held_by_other}).failure_outcome(), Outcome::taken);
  EXPECT_EQ(tally_of(RoundKind::acquire, 1, {S::not_counted}).failure_outcome(), Outcome::quorum_unreachable);
}

TEST(TallyFailureOutcome, Extend) {
  using S = MasterStatus;
  EXPECT_EQ(tally_of(RoundKind::extend, 3, {S::not_found, S::not_found}).failure_outcome(), Outcome::lost);
  EXPECT_EQ(tally_of(RoundKind::extend, 3, {S::held_by_other, S::not_found}).failure_outcome(), Outcome::lost);
  EXPECT_EQ(tally_of(RoundKind::extend, 3, {S::held_by_other, S::timeout}).failure_outcome(), Outcome::lost);
  EXPECT_EQ(tally_of(RoundKind::extend, 3, {S::timeout, S::server_error}).failure_outcome(),
            Outcome::quorum_unreachable);
  EXPECT_EQ(tally_of(RoundKind::extend, 5, {S::not_found, S::timeout, S::timeout}).failure_outcome(),
            Outcome::quorum_unreachable);
}

TEST(TallyFailureOutcome, ReleaseIsOnlyEverUnreachable) {
  using S = MasterStatus;
  EXPECT_EQ(tally_of(RoundKind::release, 3, {S::timeout, S::timeout}).failure_outcome(), Outcome::quorum_unreachable);
  // The fencing round only acknowledges or fails: never "taken" or "lost".
  EXPECT_EQ(tally_of(RoundKind::fence, 3, {S::held_by_other, S::held_by_other}).failure_outcome(),
            Outcome::quorum_unreachable);
  EXPECT_EQ(tally_of(RoundKind::fence, 3, {S::ok, S::ok}).verdict(), Verdict::success);
  EXPECT_EQ(tally_of(RoundKind::release, 3, {S::held_by_other, S::timeout, S::timeout}).failure_outcome(),
            Outcome::quorum_unreachable);
}

// ---------------------------------------------------------------------------------------
// Exhaustive: every sequence of statuses (pending included) for N = 1..7 and every kind.
// Checks the Tally against an independent model, after every vote:
//  - the counters match the documented mapping;
//  - verdict is success iff for >= N/2+1, failure iff against > N - (N/2+1);
//  - a decided verdict never changes afterwards;
//  - once every master has a non-pending status the round is decided;
//  - failure_outcome follows the documented rule.

struct Model {
  std::uint32_t for_votes = 0, held = 0, missing = 0, failed = 0;
  void add(RoundKind kind, MasterStatus status) {
    switch (status) {
      case MasterStatus::ok: ++for_votes; break;
      case MasterStatus::held_by_other: kind == RoundKind::release ? ++for_votes : ++held; break;
      case MasterStatus::not_found: kind == RoundKind::release ? ++for_votes : ++missing; break;
      case MasterStatus::pending: break;
      default: ++failed; break;
    }
  }
};

TEST(TallyExhaustive, VerdictMatchesModelAndNeverFlips) {
  constexpr std::size_t kStatuses = kAllStatuses.size();
  std::uint64_t sequences = 0;
  std::uint64_t decided_early = 0;
  std::uint64_t errors = 0;
  auto report = [&](const std::string& what, RoundKind kind, std::uint32_t n, const std::vector<MasterStatus>& seq,
                    std::size_t upto) {
    if (++errors > 20) return;  // enough to diagnose
    std::string text;
    for (std::size_t i = 0; i <= upto && i < seq.size(); ++i) text += std::string(redlock::to_string(seq[i])) + " ";
    ADD_FAILURE() << what << " kind=" << name(kind) << " N=" << n << " votes: " << text;
  };

  for (const RoundKind kind : kKinds) {
    for (std::uint32_t n = 1; n <= 7; ++n) {
      const std::uint32_t majority = n / 2 + 1;  // independent of quorum_of
      std::uint64_t total = 1;
      for (std::uint32_t i = 0; i < n; ++i) total *= kStatuses;
      std::vector<MasterStatus> seq(n);
      for (std::uint64_t code = 0; code < total; ++code) {
        std::uint64_t rest = code;
        bool all_voted = true;
        for (std::uint32_t i = 0; i < n; ++i) {
          seq[i] = kAllStatuses[rest % kStatuses];
          rest /= kStatuses;
          if (seq[i] == MasterStatus::pending) all_voted = false;
        }
        ++sequences;
        Tally tally{kind, n};
        Model model;
        Verdict first_decided = Verdict::undecided;
        for (std::uint32_t i = 0; i < n; ++i) {
          tally.add(seq[i]);
          model.add(kind, seq[i]);
          if (tally.granted != model.for_votes || tally.held != model.held || tally.missing != model.missing ||
              tally.failed != model.failed) {
            report("counters differ from the documented mapping", kind, n, seq, i);
          }
          const std::uint32_t against = model.held + model.missing + model.failed;
          const Verdict expected = model.for_votes >= majority ? Verdict::success
                                   : against > n - majority   ? Verdict::failure
                                                              : Verdict::undecided;
          const Verdict verdict = tally.verdict();
          if (verdict != expected) {
            report(std::string("verdict ") + name(verdict) + ", expected " + name(expected), kind, n, seq, i);
          }
          if (verdict == Verdict::success && tally.granted < majority) {
            report("success without a majority", kind, n, seq, i);
          }
          if (first_decided != Verdict::undecided && verdict != first_decided) {
            report(std::string("verdict flipped from ") + name(first_decided) + " to " + name(verdict), kind, n, seq, i);
          }
          if (first_decided == Verdict::undecided && verdict != Verdict::undecided) {
            first_decided = verdict;
            if (i + 1 < n) ++decided_early;
          }
          if (verdict == Verdict::failure) {
            const std::uint32_t elsewhere = model.held + model.missing;
            const Outcome expected_outcome = (elsewhere > 0 && elsewhere >= model.failed)
                                                 ? (kind == RoundKind::acquire ? Outcome::taken : Outcome::lost)
                                                 : Outcome::quorum_unreachable;
            if (tally.failure_outcome() != expected_outcome) {
              report("failure_outcome " + std::string(redlock::to_string(tally.failure_outcome())), kind, n, seq, i);
            }
            if (kind == RoundKind::release && tally.failure_outcome() != Outcome::quorum_unreachable) {
              report("release failed other than unreachable", kind, n, seq, i);
            }
          }
        }
        if (all_voted && tally.verdict() == Verdict::undecided) {
          report("undecided although every master voted", kind, n, seq, n - 1);
        }
      }
    }
  }
  EXPECT_EQ(errors, 0u);
  // 3 kinds x sum over N=1..7 of 8^N sequences.
  std::uint64_t expected_sequences = 0;
  for (std::uint64_t n = 1, p = 8; n <= 7; ++n, p *= 8) expected_sequences += p;
  EXPECT_EQ(sequences, 3 * expected_sequences);
  EXPECT_GT(decided_early, 0u);
}

// ---------------------------------------------------------------------------------------
// drift_for: ttl * factor + constant, in microseconds, rounded up.

TEST(DriftFor, RedlockDefaults) {
  EXPECT_EQ(drift_for(10'000ms, 0.01, 2ms), microseconds(102'000));
  EXPECT_EQ(drift_for(1'234ms, 0.01, 2ms), microseconds(12'340 + 2'000));
  EXPECT_EQ(drift_for(1ms, 0.01, 2ms), microseconds(10 + 2'000));
  EXPECT_EQ(drift_for(86'400'000ms, 0.01, 0ms), microseconds(864'000'000));
}

TEST(DriftFor, RoundsFractionalMicrosecondsUp) {
  EXPECT_EQ(drift_for(1ms, 0.0015, 0ms), microseconds(2));       // 1.5 us -> 2
  EXPECT_EQ(drift_for(3ms, 0.0001, 0ms), microseconds(1));       // 0.3 us -> 1
  EXPECT_EQ(drift_for(1ms, 0.0000001, 5ms), microseconds(5'001));  // 0.0001 us -> 1
  EXPECT_EQ(drift_for(7ms, 0.00125, 0ms), microseconds(9));      // 8.75 us -> 9
}

TEST(DriftFor, FactorZero) {
  EXPECT_EQ(drift_for(10'000ms, 0.0, 2ms), microseconds(2'000));
  EXPECT_EQ(drift_for(10'000ms, 0.0, 0ms), microseconds(0));
  EXPECT_EQ(drift_for(0ms, 0.01, 3ms), microseconds(3'000));
}

TEST(DriftFor, NeverBelowTheFormulaAndAtMostOneMicrosecondAbove) {
  // factor = k / 1000, so the exact allowance is ttl_ms * k microseconds plus the constant.
  for (const int k : {1, 3, 7, 10, 25, 70, 99, 100, 250, 333, 500, 999}) {
    const double factor = k / 1000.0;
    for (long long ttl = 1; ttl <= 3000; ++ttl) {
      const long long exact = ttl * k + 2'000;
      const long long got = drift_for(std::chrono::milliseconds(ttl), factor, 2ms).count();
      if (got < exact || got > exact + 1) {
        ADD_FAILURE() << "drift_for(" << ttl << "ms, " << factor << ", 2ms) = " << got << "us, exact " << exact;
        return;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// classify_reply

// One reply, as hiredis parses `bytes`.
std::unique_ptr<redisReply, void (*)(void*)> reply_of(std::string_view bytes) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, bytes.data(), bytes.size());
  void* raw = nullptr;
  const int rc = redisReaderGetReply(reader, &raw);
  redisReaderFree(reader);
  EXPECT_EQ(rc, REDIS_OK);
  EXPECT_NE(raw, nullptr) << bytes;
  return {static_cast<redisReply*>(raw), &freeReplyObject};
}

TEST(ClassifyReply, WhatEachKindCountsAsAnAnswer) {
  EXPECT_EQ(classify_reply(RoundKind::acquire, false, 0, *reply_of("+OK\r\n")).status, MasterStatus::ok);
  EXPECT_EQ(classify_reply(RoundKind::acquire, false, 0, *reply_of("$-1\r\n")).status, MasterStatus::held_by_other);
  const auto fenced = classify_reply(RoundKind::acquire, true, 0, *reply_of(":42\r\n"));
  EXPECT_EQ(fenced.status, MasterStatus::ok);
  EXPECT_EQ(fenced.counter, 42);
  for (const RoundKind kind : {RoundKind::extend, RoundKind::release}) {
    EXPECT_EQ(classify_reply(kind, false, 0, *reply_of(":1\r\n")).status, MasterStatus::ok);
    EXPECT_EQ(classify_reply(kind, false, 0, *reply_of(":0\r\n")).status, MasterStatus::not_found);
    EXPECT_EQ(classify_reply(kind, false, 0, *reply_of(":-1\r\n")).status, MasterStatus::held_by_other);
  }
  EXPECT_EQ(classify_reply(RoundKind::fence, false, 7, *reply_of(":7\r\n")).status, MasterStatus::ok);
  EXPECT_EQ(classify_reply(RoundKind::fence, false, 7, *reply_of(":6\r\n")).status, MasterStatus::server_error);
}

// Waiting (issue 11): the waiting acquire variant answers +OK or the held key's PTTL; a
// release that reached subscribers answers {1, receivers}, which means "deleted" as 1 does.
// A counter is counted up to 2^53 - 1 (kMaxFence: the raise script compares doubles), and a
// row beyond says why (HostileMasterTest has a master whose counter is 2^63 - 1).
TEST(ClassifyReply, AFencingCounterBeyondTwoToTheFiftyThreeIsNotCounted) {
  const auto at_max = classify_reply(RoundKind::acquire, true, 0, *reply_of(":9007199254740991\r\n"));
  EXPECT_EQ(at_max.status, MasterStatus::ok);
  EXPECT_EQ(at_max.counter, 9007199254740991LL);
  const auto beyond = classify_reply(RoundKind::acquire, true, 0, *reply_of(":9007199254740992\r\n"));
  EXPECT_EQ(beyond.status, MasterStatus::server_error);
  EXPECT_NE(beyond.error.find("fencing counter 9007199254740992 is beyond 9007199254740991"), std::string::npos)
      << beyond.error;
  EXPECT_EQ(classify_reply(RoundKind::fence, false, 7, *reply_of(":9007199254740991\r\n")).status, MasterStatus::ok);
  EXPECT_EQ(classify_reply(RoundKind::fence, false, 7, *reply_of(":9223372036854775807\r\n")).status,
            MasterStatus::server_error);
}

TEST(ClassifyReply, WaitingAcquireAndAnnouncedRelease) {
  EXPECT_EQ(classify_reply(RoundKind::acquire, false, 0, *reply_of("+OK\r\n"), true).status, MasterStatus::ok);
  const auto held = classify_reply(RoundKind::acquire, false, 0, *reply_of(":420\r\n"), true);
  EXPECT_EQ(held.status, MasterStatus::held_by_other);
  EXPECT_EQ(held.pttl, 420);
  EXPECT_EQ(classify_reply(RoundKind::acquire, false, 0, *reply_of(":-1\r\n"), true).pttl, -1);
  EXPECT_EQ(classify_reply(RoundKind::acquire, false, 0, *reply_of(":-3\r\n"), true).pttl, kPttlUnknown);
  EXPECT_EQ(classify_reply(RoundKind::acquire, false, 0, *reply_of(":-4\r\n"), true).status, MasterStatus::server_error);
  // A plain SET never answers an integer: still an error there.
  EXPECT_EQ(classify_reply(RoundKind::acquire, false, 0, *reply_of(":420\r\n")).status, MasterStatus::server_error);
  const auto announced = classify_reply(RoundKind::release, false, 0, *reply_of("*2\r\n:1\r\n:3\r\n"));
  EXPECT_EQ(announced.status, MasterStatus::ok);
  EXPECT_EQ(announced.receivers, 3);
  EXPECT_EQ(classify_reply(RoundKind::release, false, 0, *reply_of(":1\r\n")).receivers, 0);
  EXPECT_EQ(classify_reply(RoundKind::release, false, 0, *reply_of("*2\r\n:0\r\n:3\r\n")).status,
            MasterStatus::server_error);
  EXPECT_EQ(classify_reply(RoundKind::extend, false, 0, *reply_of("*2\r\n:1\r\n:3\r\n")).status,
            MasterStatus::server_error);
}

TEST(ClassifyReply, AnythingElseIsAnErrorThatSaysWhat) {
  for (const RoundKind kind : {RoundKind::acquire, RoundKind::extend, RoundKind::release, RoundKind::fence}) {
    SCOPED_TRACE(name(kind));
    const auto error = classify_reply(kind, false, 0, *reply_of("-WRONGTYPE wrong kind of value\r\n"));
    EXPECT_EQ(error.status, MasterStatus::server_error);
    EXPECT_EQ(error.error, "WRONGTYPE wrong kind of value");
    const auto odd = classify_reply(kind, false, 0, *reply_of("*1\r\n:1\r\n"));
    EXPECT_EQ(odd.status, MasterStatus::server_error);
    EXPECT_EQ(odd.error, "unexpected array reply");
  }
}

// Found by fuzz/reply_fuzz.cpp: a master that answers "-\r\n" (an error reply with no text)
// gave a server_error row with an empty error, so the result did not say what went wrong.
TEST(ClassifyReply, EmptyErrorReplyStillNamesAReason) {
  for (const RoundKind kind : {RoundKind::acquire, RoundKind::extend, RoundKind::release, RoundKind::fence}) {
    for (const bool fencing : {false, true}) {
      const auto vote = classify_reply(kind, fencing, 0, *reply_of("-\r\n"));
      EXPECT_EQ(vote.status, MasterStatus::server_error) << name(kind);
      EXPECT_EQ(vote.error, "empty error reply") << name(kind);
    }
  }
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// detail/operation.h — one lock operation as the Client carries it from submit to callback:
// an acquire with its retries (and, when fenced, its second round), one extend, or one
// release. What only one kind needs lives in that kind's part.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "detail/event_loop.h"
#include "detail/lock_state.h"
#include "detail/quorum.h"
#include "detail/release_room.h"
#include "redlock/client.h"

namespace redlock::detail {

class Round;

// A fenced acquire between its two rounds: what the granting round (round 1) decided, kept
// until the fence round (round 2) is acknowledged by a quorum.
struct FencedGrant {
  std::chrono::steady_clock::time_point started{};  // round 1's t0 (validity clock)
  std::vector<MasterResult> masters;                // round 1's rows: the result's rows
  std::shared_ptr<LockState> state;                 // which masters granted
  std::uint64_t fence = 0;                          // the token round 2 raises the counters to
};

struct AcquirePart {
  std::string resource;
  std::string attempt_token;             // fresh per attempt; in its round while in flight
  std::uint64_t attempt_never_sent = 0;  // the attempt's Round::never_sent (taken with its token)
  // The attempt's release's room (Round::take_room): held until its release is queued or it
  // is granted.
  ReleaseRoom::Ticket attempt_room;
  bool fencing = false;
  std::optional<std::string> refused;    // a bad AcquireOptions value: begin() refuses the call
  int retries_left = 0;                  // -1: unlimited
  std::uint64_t wait_deadline_ns = 0;    // loop time; 0: none
  EventLoop::TimerId retry_timer = 0;    // waiting to retry (or, giving_up, for the deadline)
  // Waiting (docs/design.md "Waiting"; loop time, 0: none / unknown).
  bool watching = false;                 // subscribed to the key's release channel (ReleaseWatch)
  std::uint64_t line_place = 0;          // while watching: its place in ClientImpl::waiting_
  bool woken = false;                    // a wake-up arrived while an attempt was in flight
  bool wake_scheduled = false;           // retry_timer is a wake-up's (jittered) retry
  bool giving_up = false;                // retry_timer finishes the acquire at its deadline
  bool polling = false;                  // retry_timer is a counted retry (poll or known expiry: used one of retry_count)
  bool free_retry = false;               // the next/current attempt is a wake-up's or a known expiry's
  std::uint64_t retry_at_ns = 0;         // when retry_timer fires
  std::uint64_t free_backoff_ns = 0;     // grows with consecutive failed free retries (design.md "Waiting")
  std::uint64_t free_not_before_ns = 0;  // last failed free retry + free_backoff_ns
  std::uint64_t budget_deadline_ns = 0;  // retry_count's time budget, from the first failure
  std::uint64_t free_at_ns = 0;          // when a quorum of the holders' keys could have expired
  std::uint64_t free_at_said_ns = 0;     // the same from the replies that said something (quorum_free_at)
  Result last;                           // the last failed attempt's result, reported if we give up
  std::optional<FencedGrant> fenced;     // between the two rounds of a fenced attempt
};

struct ExtendPart {
  Lock lock;  // the lock being extended
  // RoundArgs::resend_before (a lease's loss moment, validity clock)
  std::chrono::steady_clock::time_point resend_before = std::chrono::steady_clock::time_point::max();
};

struct ReleasePart {
  std::string token;
  // The library's own release of a failed or cancelled acquire: no caller reads its rows, so
  // it hears every master out and warns about refusals (with the acquire's ttl: how long the
  // key then stays).
  bool internal = false;
  std::chrono::milliseconds acquired_ttl{0};
  // Masters (bit i: master i) that were never sent the lock's SET: not sent the release
  // (RoundArgs::never_sent).
  std::uint64_t never_sent = 0;
  // The released Lock's state, when this Client granted it: the leases keeping it are told at
  // the release's beginning that it is gone (LockState::on_lost, taken).
  std::shared_ptr<LockState> state;
};

struct Operation {
  OperationId id = 0;
  Callback done;
  std::string key;                   // key_prefix + resource
  std::chrono::milliseconds ttl{0};  // acquire, extend: the PX to set
  int attempts = 0;                  // rounds sent (a fence round belongs to its attempt)
  std::shared_ptr<Round> round;      // the round in flight; cut when the operation ends or retries
  std::variant<AcquirePart, ExtendPart, ReleasePart> part;
  // The operation itself, while the task that begins it is queued for the loop
  // (ClientImpl::submit); null otherwise.
  std::shared_ptr<Operation> in_transit;

  [[nodiscard]] RoundKind kind() const noexcept {
    static constexpr RoundKind kKinds[] = {RoundKind::acquire, RoundKind::extend, RoundKind::release};
    return kKinds[part.index()];
  }
  // An extend's or a release's token, before its round is sent. (An acquire's is made for
  // each attempt, and lives in the attempt's round while it is in flight: Round::take_token.)
  [[nodiscard]] const std::string& token() const {
    if (const auto* extend = std::get_if<ExtendPart>(&part)) return extend->lock.token;
    return std::get<ReleasePart>(part).token;
  }
  [[nodiscard]] bool internal() const noexcept {
    const auto* release = std::get_if<ReleasePart>(&part);
    return release != nullptr && release->internal;
  }
  AcquirePart& acquire() { return std::get<AcquirePart>(part); }
  [[nodiscard]] const AcquirePart& acquire() const { return std::get<AcquirePart>(part); }
  ExtendPart& extend() { return std::get<ExtendPart>(part); }
  ReleasePart& release() { return std::get<ReleasePart>(part); }
};

}  // namespace redlock::detail

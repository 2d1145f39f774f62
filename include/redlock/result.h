// SPDX-License-Identifier: Apache-2.0
// redlock/result.h — what a lock operation reports.
//
// Every acquire, extend and release returns a Result: one top-level Outcome plus one
// MasterResult per master saying what happened there and how long it took. Failing to get a
// lock is a Result, never an exception. "Taken by another" is distinct from "quorum
// unreachable": the first is contention, the second is an outage.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redlock/lock.h"

namespace redlock {

enum class Outcome : std::uint8_t {
  acquired,            // acquire: a quorum granted and validity was positive at the decision
  extended,            // extend: a quorum extended; the Lock carries the new deadline
  released,            // release: a quorum no longer holds our token
  taken,               // acquire: enough masters hold another owner's token
  lost,                // extend: the key is gone or owned by another on enough masters
  quorum_unreachable,  // too many masters failed (timeout, not connected, error)
  validity_expired,    // the quorum answered too late: ttl - elapsed - drift <= minimum,
                       // or (extend) the lock's deadline had already passed
  cancelled,           // cancelled by the caller, or the Client is shutting down
  invalid_argument,    // bad resource name, ttl, ...; `message` names the value
};

// What happened on one master.
enum class MasterStatus : std::uint8_t {
  ok,             // acquire: SET NX succeeded; release: deleted; extend: expiry extended
  held_by_other,  // the key holds another owner's token
  not_found,      // release/extend: the key was not there (expired or never set)
  server_error,   // an error reply (WRONGTYPE, READONLY, OOM, LOADING, NOAUTH, ...): see `error`
  timeout,        // no reply within command_timeout
  not_connected,  // no usable connection: see `error` for why (refused, lost, auth failed)
  not_counted,    // a reply that did not count as a vote
  not_permitted,  // this master's ACL user may not run every command the lock paths run
                  // (checked on every connect, docs/permissions.md): it is sent no SET, no
                  // extend and no fenced acquire, and `error` names what is missing
  pending,        // still in flight when the outcome was decided (the quorum was already
                  // reached, or already impossible). `error` is empty, or, when the command
                  // waited for a reconnect, says so and why the connection had failed
};

[[nodiscard]] std::string_view to_string(Outcome outcome) noexcept;
[[nodiscard]] std::string_view to_string(MasterStatus status) noexcept;

struct MasterResult {
  std::string endpoint;  // Endpoint::display(): "host:port[/db]", never a password
  MasterStatus status = MasterStatus::pending;
  std::string error;                     // server error text or connection problem
  std::chrono::microseconds latency{0};  // send to reply (0 when not answered)
};

struct Result {
  Outcome outcome = Outcome::cancelled;
  // acquire/extend success: the lock (with its new deadline after an extend).
  std::optional<Lock> lock;
  // Remaining validity (deadline - now), on success: for the *_async calls when the outcome was
  // decided (their callback runs right after), for the blocking calls when they return (the
  // time the caller's thread took to wake is taken off; 0 if it woke after the deadline, or if
  // the lock was lost or its release submitted meanwhile: Client::remaining's rules).
  std::chrono::microseconds validity{0};
  // One entry per master, in configuration order, for the last round that was sent.
  std::vector<MasterResult> masters;
  int attempts = 0;     // rounds sent (acquire retries included)
  std::string message;  // human-readable explanation when not successful

  [[nodiscard]] bool ok() const noexcept {
    return outcome == Outcome::acquired || outcome == Outcome::extended ||
           outcome == Outcome::released;
  }
  explicit operator bool() const noexcept { return ok(); }
  [[nodiscard]] std::size_t count(MasterStatus status) const noexcept;
};

// A readable multi-line table: the outcome line, then one row per master.
[[nodiscard]] std::string format_result(const Result& result);

}  // namespace redlock

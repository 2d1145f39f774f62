// SPDX-License-Identifier: Apache-2.0
// redlock/status.h — what a Client can tell an operator about its masters right now
// (Client::status): per master whether it answers, how fast, whether it is a master, whether
// the restart guard counts its votes, how it persists and evicts, how far its clock is from
// this host's; for one resource, who holds it where; and whether the fleet can grant a lock
// now. A status query reads only: it changes no key.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace redlock {

// One master, as one pipelined round of read-only commands (TIME, INFO replication, INFO
// server; GET and PTTL of the resource's key) found it, plus what the Client already knew
// from the connection's handshake (persistence, eviction policy, permissions, restart guard).
struct MasterReport {
  std::string endpoint;  // Endpoint::display(): never a password
  // Every command of the round answered within command_timeout (error replies included).
  bool reachable = false;
  std::string error;  // why not reachable (timeout, connection refused, ...); "" when reachable
  // Send to the first reply (TIME) on the Client's monotonic clock. Includes the handshake
  // when the connection was not up yet (then also `connected_before` is false).
  std::optional<std::chrono::microseconds> round_trip;
  bool connected_before = false;  // the connection was ready when the query was sent

  // INFO replication: "master" or "replica"; nullopt when unknown (see `role_error`).
  std::optional<std::string> role;
  std::string replica_of;  // "host:port" of its master when a replica (as the server says)
  std::string role_error;
  // INFO server's uptime_in_seconds, as read now (the server's wall clock; see DESIGN.md).
  std::optional<std::chrono::seconds> uptime;

  // The restart guard's opinion (Client options: restart_guard, max_lock_ttl).
  bool counted = false;  // a grant from it would be a vote now
  // When not counted only by the age rule: how long until it will be (rounded up).
  std::optional<std::chrono::milliseconds> counted_after;
  std::string not_counted_reason;  // why not counted ("" when counted)
  std::string counted_because;     // a rule that counted it before the age rule would

  // From the handshake's CONFIG GET; "" where the server or an ACL refused it.
  std::string appendonly;
  std::string appendfsync;
  bool durable = false;  // appendonly yes + appendfsync always + no-appendfsync-on-rewrite no
  std::string maxmemory_policy;

  // TIME against this host's wall clock: server time minus the midpoint of the local
  // readings before the send and after the reply. The server read its clock somewhere in
  // between, so the true offset is within +- `clock_uncertainty` (half the round trip).
  std::optional<std::chrono::microseconds> clock_offset;
  std::optional<std::chrono::microseconds> clock_uncertainty;

  // The handshake's permission check (docs/permissions.md); "" when proven.
  std::string not_permitted;
  std::string fence_not_permitted;

  // Reachable, a master (INFO replication says so: unknown is not a vote), permitted and counted, and not a second
  // address of a server already counted: it could give a vote now.
  bool can_vote = false;
  // This Client has caught up its fencing counter for this incarnation (docs/fencing.md): a
  // fenced acquire's grant from it counts. False from this Client's first sight of it, or a
  // restart, until a catch-up succeeds (at once with ClientOptions::fence_catch_up off); a
  // catch-up needs N - quorum + 1 other masters to answer, so it waits while fewer do. Plain
  // locks do not need it.
  bool fence_caught_up = false;

  // Only when a resource was asked about. The value's first 8 characters when it is a
  // token of this library's form (never the whole token); "" when the key does not exist.
  std::optional<std::string> holder;
  bool holder_is_token = true;                   // false: the key holds something else
  std::optional<std::chrono::milliseconds> pttl;  // PTTL: remaining ms (-1: no expiry)
  std::string resource_error;                     // an error reply to GET or PTTL

  // Problems an operator should fix, one sentence each (replica, eviction, clock, ...).
  std::vector<std::string> warnings;
};

// Who holds a resource across the masters.
struct ResourceReport {
  std::string resource;
  std::string key;  // key_prefix + resource
  // The token prefix held by at least quorum masters, if any.
  std::optional<std::string> quorum_holder;
  std::size_t holders = 0;  // masters holding the most common token
  std::string summary;      // one sentence
};

struct FleetStatus {
  std::vector<MasterReport> masters;  // in configuration order
  std::size_t size = 0;
  std::size_t quorum = 0;
  std::size_t voters = 0;  // masters with can_vote
  // At least quorum masters can vote now: an acquire of a free resource can succeed.
  bool can_grant = false;
  std::string reason;  // why not ("" when can_grant)
  std::optional<ResourceReport> resource;
};

}  // namespace redlock

// SPDX-License-Identifier: Apache-2.0
// redlock/options.h — configuration of a redlock::Client and of one acquire call.
//
// A Client talks to N independent Redis masters (no replication between them) and holds a
// lock only when a majority, quorum = N/2 + 1, granted it. Every field below documents its
// default and what zero means. Invalid values are rejected by the Client constructor with a
// redlock::ConfigError naming the field and the value.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redlock/clock.h"
#include "redlock/endpoint.h"
#include "redlock/tls.h"

struct uv_loop_s;  // libuv's uv_loop_t, so this header does not pull in <uv.h>.

namespace redlock {

using Milliseconds = std::chrono::milliseconds;

struct ClientOptions {
  // The masters, as URIs (see Endpoint). Required; no duplicates (same host and port).
  std::vector<std::string> masters;

  // Prepended to every resource name to make the Redis key. May be empty.
  std::string key_prefix = "redlock:";

  // Lease time of a lock: the PX of `SET key token NX PX ttl`. Must exceed the drift
  // allowance below. Default 10 s.
  Milliseconds ttl{10'000};

  // Clock drift allowance: drift = ttl * drift_factor + drift_constant. A grant is valid
  // only for ttl - elapsed - drift. Defaults 0.01 and 2 ms, as in the Redlock description.
  // 0 for both means "no allowance", which is only sound on a single machine.
  double drift_factor = 0.01;
  Milliseconds drift_constant{2};

  // A grant whose remaining validity is not above this is refused (and released).
  // Default 0: any positive validity is granted. Judged at the decision: a blocking call's
  // Result reports the validity left when it returns, which can be below this (Result::validity).
  Milliseconds min_validity{0};

  // How many times a failed acquire is retried (0 = one attempt only), and the pause
  // between attempts: retry_delay plus a uniform random offset in [-retry_jitter,
  // +retry_jitter], so that contending clients spread out. Defaults 3, 200 ms, 100 ms.
  int retry_count = 3;
  Milliseconds retry_delay{200};
  Milliseconds retry_jitter{100};

  // Waiting without polling (docs/design.md "Waiting"). A release announces itself (the
  // release script PUBLISHes on "redlock-released:<key>"); with this on, an acquire that
  // failed subscribes to its key's channel (one subscriber connection per master, shared by
  // every waiter of this Client, opened when the first waiter appears) and retries as soon
  // as a release is announced, and learns from its retries how long the holders' keys live
  // (PTTL), sleeping until a quorum of them could have expired instead of retry_delay.
  // retry_delay stays the fallback while that is not enough: subscription not confirmed yet
  // or lost, PUBLISH/SUBSCRIBE not permitted (docs/permissions.md), PTTL unknown.
  // retry_count counts polls and retries at a known expiry (which replace a poll); a
  // wake-up that replaces either gives it back. Retries that a release or a confirmed
  // subscription triggered do not use it up; they are made until retry_count * (retry_delay
  // + retry_jitter) has passed since the first failed attempt (the time the polling retries
  // would have taken; no limit with retry_count = -1), and all within AcquireOptions::wait.
  // Free retries are rate-limited per acquire: the first goes at once, and each one that
  // fails makes the next wait 4 times longer after the last failed attempt (1, 4, 16, 64 ms
  // ..., up to retry_delay), so a flood of announcements cannot make a waiter retry at
  // round-trip rate. retry_count = 0 is one attempt. Result::attempts counts every round.
  // false: polling only (retry_delay), as before. Default true.
  bool release_notifications = true;

  // Fairness, opt-in. After this Client released a lock whose release was announced to
  // other waiters (the release's PUBLISH reached subscribers other than this Client's own),
  // an acquire of the same resource by this Client waits this long before its first
  // attempt (cancellable; within AcquireOptions::wait), once per such release, so that a
  // release-and-reacquire loop lets a waiter elsewhere in. 0 (default): off.
  Milliseconds yield_to_waiters{0};

  // Deadline of every command on every master, measured from the moment the round is
  // sent. A master that has not answered by then counts as failed for this round; it
  // never delays a decision longer. Should be small compared to ttl. Default 50 ms.
  Milliseconds command_timeout{50};

  // Deadline for TCP connect plus, for rediss://, the TLS handshake, plus the AUTH/SELECT
  // handshake. Default 1 s.
  Milliseconds connect_timeout{1'000};

  // Reconnect backoff after a failed or lost connection: starts at reconnect_min,
  // doubles up to reconnect_max (each with +-25% jitter). Defaults 50 ms and 2 s.
  Milliseconds reconnect_min{50};
  Milliseconds reconnect_max{2'000};

  // A connection whose master has answered nothing for this long while a command waits
  // (counted from the later of that command's send and the last reply read) is considered
  // dead (e.g. the master is frozen) and is dropped and re-established. Replies waiting
  // unread in the socket (the Client's loop was held) are answers. Keep it well above
  // command_timeout. 0 disables the check. Default 3 s.
  Milliseconds stall_timeout{3'000};

  // Restart guard. A master restarted without persistence has forgotten its keys, so for
  // one max_lock_ttl after it (re)starts its grants are not votes: it still receives SET and
  // release, but its OK counts as `not_counted`. The Client reads INFO server (run_id,
  // uptime_in_seconds), CONFIG GET appendonly/appendfsync/no-appendfsync-on-rewrite and INFO
  // persistence (AOF rewrites since the start) on every (re)connect, and the durability again
  // every second while a master counts as durable. INFO replication (its role: a replica does
  // not vote; with the guard on, one seen becoming a replica counts as restarted) is read at
  // every connect and every second on a live connection, with the guard on or off. A master's age is uptime - 1 s (Redis rounds uptime up by up to 1 s); once this Client
  // has seen a master's run_id change, the age counts from that moment on the Client's own
  // clock, so a wall-clock step on the master cannot make it look old (a first contact can
  // only trust uptime). A run_id change also removes that master's vote from every lock this
  // Client holds; a lock left below quorum reports Lock::lost(). A durable master (appendonly
  // yes, appendfsync always, no-appendfsync-on-rewrite no, as CONFIG GET reports it) loses
  // nothing on restart: after a restart this Client saw from a durable incarnation, within
  // seconds of its last reading of it, whose AOF was on from its start (no AOF rewrite yet:
  // Redis 7.0 or later), it is counted at once and keeps its votes (a first
  // contact applies the age rule: the previous incarnation may not have been durable). Two
  // masters that are the same server (same run_id) give one vote, guard on or off; that needs
  // their INFO (with INFO denied, allowed only with the guard off, nothing tells two names of
  // one server apart: list every server once). Default on.
  bool restart_guard = true;
  // The longest ttl any lock on these masters uses, by any Client or process (a restarted
  // master must be quarantined until every lock it forgot has expired, whoever took it): give
  // every Client of the same masters the same value, at least the longest ttl in use. 0
  // (default): this Client's ttl rounded up to whole seconds, plus one second, which is right
  // only if no Client of these masters uses a longer ttl. An acquire, extend or Lease of this
  // Client with a longer ttl is refused (invalid_argument / ConfigError) while the guard is on.
  Milliseconds max_lock_ttl{0};

  // Fencing (AcquireOptions::fencing). One counter key per master, shared by all resources,
  // never expiring. Must not start with key_prefix (it would collide with a resource); at most
  // kMaxKeyPrefixSize bytes.
  std::string fence_key = "redlock-fence-counter";
  // A master seen for the first time or after a restart is "caught up" before its fencing
  // votes count: its counter is raised to the highest read from enough other masters.
  // Turning this off exists only to demonstrate why it is needed. Default on.
  bool fence_catch_up = true;

  // Called (on the loop thread) with warnings: about the masters' configuration (e.g. a
  // maxmemory-policy that could evict lock keys or the fencing counter; once per master and
  // problem), TLS verification switched off, and each cleanup release a master refused.
  // At most 10 in a minute of each kind about each master (eviction policy, permissions, same
  // server, refused cleanup releases; a master that flaps would otherwise warn without end),
  // and 10 about the Client itself: the tenth says more are counted, not shown, the next one
  // shown of that kind about that master says how many were not, and a problem held back is
  // warned about again at a later reconnect.
  // Default: print to stderr. It must not destroy the Client.
  std::function<void(const std::string&)> on_warning;

  // How to speak TLS to the rediss:// masters (redlock/tls.h: CA, client certificate, name,
  // minimum version). Whether a master is TLS is its URI's scheme. Checked at construction
  // (files readable, key matching the certificate) when at least one master is rediss://;
  // setting anything here while every master is redis:// is a ConfigError (a forgotten
  // "s" would otherwise send everything in plaintext). Default: verify against the system
  // CA store, no client certificate, TLS 1.2 or newer.
  TlsOptions tls;
  // A fleet mixing rediss:// (TLS) and redis:// (plain) masters is a ConfigError unless
  // this is true: tokens and passwords would cross some paths in clear. Default false.
  bool allow_mixed_tls = false;

  // Local address to bind outgoing connections to (e.g. "127.0.0.11"), so that fault
  // injection can partition this client alone. Empty: the kernel chooses.
  std::string source_address;

  // Event loop. nullptr (default): the Client runs its own libuv loop on its own thread.
  // Otherwise the Client attaches to this loop, which the caller runs; completion
  // callbacks then run on the caller's loop thread. See client.h for the lifetime rules.
  uv_loop_s* loop = nullptr;

  // Monotonic clock for validity arithmetic. nullptr (default): SteadyClock (steady_clock's
  // time base, counting time the machine spent suspended: clock.h).
  std::shared_ptr<const Clock> clock;
};

// Per-call overrides for one acquire; unset fields take the Client's options.
// The drift allowance of `options` for a lock of `ttl`: ttl * drift_factor + drift_constant,
// rounded up to whole microseconds (never below the formula). Client::drift is this for the
// Client's own options; a tool that locks without a Client (chaos/) asks here too.
[[nodiscard]] std::chrono::microseconds drift_allowance(const ClientOptions& options, Milliseconds ttl) noexcept;

struct AcquireOptions {
  std::optional<Milliseconds> ttl;
  // Retries after the first attempt; -1 = keep retrying until `wait` runs out (or forever
  // when `wait` is unset, as redlock::Mutex::lock() does). Below -1: Outcome::invalid_argument.
  std::optional<int> retry_count;
  // Give up retrying once this much time has passed since the call. Unset: no limit
  // beyond retry_count. Negative: Outcome::invalid_argument.
  std::optional<Milliseconds> wait;
  // Hand out a fencing token (Lock::fence) that strictly increases between grants that do
  // not overlap in time. Costs one more parallel round trip. See docs/fencing.md.
  bool fencing = false;
};

// Most masters one Client accepts. Every call goes to all of them, and each has a connection
// (two while waiters listen for releases) with its own buffers; 3, 5 or 7 is usual.
inline constexpr std::size_t kMaxMasters = 64;
// Largest resource name accepted, in bytes. Names are binary-safe.
inline constexpr std::size_t kMaxResourceSize = 1024;
// Largest key prefix accepted, in bytes; ClientOptions::fence_key too.
inline constexpr std::size_t kMaxKeyPrefixSize = 256;
// Longest ttl, timeout or delay accepted in ClientOptions and AcquireOptions::ttl: 365 days.
// (AcquireOptions::wait and Mutex::try_lock_for may be longer: they saturate to "no limit".)
inline constexpr Milliseconds kMaxDuration{365LL * 24 * 3600 * 1000};

}  // namespace redlock

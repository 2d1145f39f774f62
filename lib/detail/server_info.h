// SPDX-License-Identifier: Apache-2.0
// detail/server_info.h — what a connection's handshake learns about its server, and the
// shape of the extra handshake steps the lock adds (LockCommands::handshake_steps).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

struct redisReply;

namespace redlock::detail {

// What the handshake learned about the server (INFO server and persistence, CONFIG GET, the
// permission check), for the restart guard, the fencing counter and which commands may be sent.
// Replaced on every connect.
struct ServerInfo {
  std::string run_id;  // empty if INFO failed (see error)
  // The latest instant the server can have started, on now_ns(): when INFO was read minus
  // (uptime_in_seconds - 1). Redis derives uptime from whole wall-clock seconds, so it
  // over-reports by up to 1 s; and it trusts the server's wall clock (see restart_guard.cpp).
  std::uint64_t started_ns = 0;
  // CONFIG GET results; empty where the server (or an ACL) refused CONFIG GET.
  std::string maxmemory_policy;
  std::string appendonly;   // "yes" / "no"
  std::string appendfsync;  // "always" / "everysec" / "no"
  // "yes" skips the fsync while a BGSAVE or AOF rewrite runs, even under appendfsync always.
  std::string no_appendfsync_on_rewrite;
  // INFO persistence: AOF rewrites since the server started (-1: not reported: Redis before
  // 7.0, or INFO refused; at least 1 when aof_last_rewrite_time_sec says one ran, which CONFIG
  // RESETSTAT does not clear, unlike aof_rewrites) and whether one is running or scheduled now.
  // AOF switched on at run time starts a rewrite at once, so a server whose AOF was on from its
  // start reports 0 and none running (aof_since_start()).
  long long aof_rewrites = -1;
  bool aof_rewriting = false;
  std::string error;        // why run_id is unknown
  // INFO replication: "master", "replica" (then replica_of is "host:port" as the server says),
  // or empty when unknown (role_error says why: INFO refused, no role field).
  std::string role;
  std::string replica_of;
  std::string role_error;
  // INFO replication's master_replid, its last occurrence (a replica's announced address can
  // add lines ahead of it), 40 hex digits or the role is left unknown. A replica takes its
  // master's ID at a sync and a promotion gives it a new one (the restart guard takes any change
  // for keys replaced: RestartGuard::observe_role).
  std::string replid;
  // The permission check (LockCommands::handshake_steps, docs/permissions.md): why this
  // connection's user may not run the lock paths, or the fencing paths; empty when proven
  // (the fencing part also when the server cannot tell: Redis before 7.0).
  std::string not_permitted;
  std::string fence_not_permitted;
  // Why this user may not PUBLISH / SUBSCRIBE on the release channels (waiters then poll
  // this master); empty when allowed or when the server cannot tell (Redis before 7.0).
  std::string notify_not_permitted;
  // The keyspace mark (restart guard on; LockCommands::mark_create): the handshake's SET NX
  // created it (it was absent: the keyspace may have been wiped at some earlier time), and
  // the id its GET read ("" when unknown: mark_error says why).
  bool mark_created = false;
  std::string mark;
  std::string mark_error;

  // Loses no acknowledged write on restart: every write is in the AOF, fsynced before
  // the reply (also while a rewrite or BGSAVE runs). Only what CONFIG GET said; unknown
  // counts as not durable.
  [[nodiscard]] bool durable() const noexcept {
    return appendonly == "yes" && appendfsync == "always" && no_appendfsync_on_rewrite == "no";
  }
  // durable(), and its AOF was on from the start: it loaded what its predecessor wrote (if
  // that was durable) rather than starting empty and being switched on later (restart guard).
  [[nodiscard]] bool aof_since_start() const noexcept { return durable() && aof_rewrites == 0 && !aof_rewriting; }
};

// What an eviction policy may do to the lock's keys, as one sentence ending in the fix
// ("maxmemory-policy allkeys-lru may evict ...; use noeviction"), or empty when it evicts
// nothing of ours (noeviction) or is unknown. allkeys-* may evict lock keys and the fencing
// counter, volatile-* lock keys (they have a ttl): an evicted lock key lets a second client
// take the lock on that master while the first still holds it.
[[nodiscard]] std::string eviction_risk(std::string_view policy, std::string_view fence_key);

// The handshake's own replies, read into `info` (free functions so they can be fuzzed).
// INFO server: run_id and uptime_in_seconds, read at `read_at_ns` (loop time), set run_id and
// started_ns, or error when the reply has neither.
void read_info_server(const redisReply& reply, std::uint64_t read_at_ns, ServerInfo& info);
// INFO replication: role, and the master's host and port when a replica (role, replica_of,
// role_error above). The handshake and `redlock status` both read it so.
void read_info_replication(const redisReply& reply, ServerInfo& info);
// INFO persistence: aof_rewrites, aof_last_rewrite_time_sec, aof_rewrite_in_progress,
// aof_rewrite_scheduled; anything else (an error, a field missing) leaves `info` alone
// (unknown: not on since the start).
void read_info_persistence(const redisReply& reply, ServerInfo& info);
// An error reply that says what state the server is in (LOADING its dataset, BUSY with a
// script), not what it thinks of the command: a reply that proves nothing either way.
[[nodiscard]] inline bool is_server_state_error(std::string_view text) noexcept {
  return text.starts_with("LOADING ") || text.starts_with("BUSY ");
}
// The same, of a reply: an error reply of that kind (the command did not run).
[[nodiscard]] bool is_server_state_error(const redisReply& reply) noexcept;

// The parameters the handshake reads with CONFIG GET, one command each (Redis before 7.0
// takes one per command); the durability check (MasterSet) reads the last three again.
inline constexpr const char* kConfigRead[] = {"maxmemory-policy", "appendonly", "appendfsync",
                                              "no-appendfsync-on-rewrite"};
// CONFIG GET of one of kConfigRead: sets that field; anything else (an error, a refused
// CONFIG, another shape) leaves `info` alone (unknown = not durable).
void read_config_get(const redisReply& reply, ServerInfo& info);

// One command the connection sends in every handshake after INFO and CONFIG GET, and what
// its reply means: `check` may record in ServerInfo what the reply showed.
struct HandshakeStep {
  std::string encoded;
  std::function<void(const redisReply& reply, ServerInfo& info)> check;
};

}  // namespace redlock::detail

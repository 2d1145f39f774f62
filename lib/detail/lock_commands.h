// SPDX-License-Identifier: Apache-2.0
// detail/lock_commands.h — the lock's contract with Redis, in one place: its Lua scripts and
// what they return, the command each round kind sends (typed encoders), what a reply means
// (classify_reply), and the lock's steps of every connection handshake (loading the scripts,
// the permission probe: docs/permissions.md).
//
// The release and extend scripts are the compare-and-delete / compare-and-PEXPIRE of the
// Redlock description, returning 1 (done), 0 (no key) or -1 (another owner's token), so a
// release can tell "already expired" from "someone else holds it now".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "detail/commands.h"
#include "detail/quorum.h"
#include "detail/server_info.h"

struct redisReply;

namespace redlock::detail {

// The channel a release of `key` is announced on (docs/design.md "Waiting"): the same for
// every key prefix, so one ACL channel pattern (&redlock-released:*) covers every Client.
inline constexpr std::string_view kReleaseChannelPrefix = "redlock-released:";
[[nodiscard]] std::string release_channel(std::string_view key);

// if GET(key) == token then DEL(key) and PUBLISH on ARGV[2] (the key's release channel):
// 1 deleted, 0 no key, -1 another owner. A deletion that reached subscribers answers
// {1, receivers} instead of 1 (the Client's fairness option reads it; it means "deleted" just
// the same). PUBLISH goes through pcall: where the ACL user may not publish, the release
// still deletes and answers 1 (Redis then logs the refusal in its ACL LOG).
inline constexpr std::string_view kReleaseScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == ARGV[1] then "
    "redis.call('DEL', KEYS[1]) "
    "local n = redis.pcall('PUBLISH', ARGV[2], 'released') "
    "if type(n) == 'number' and n > 0 then return {1, n} end "
    "return 1 end "
    "if v == false then return 0 end "
    "return -1";

// The keyspace mark (restart guard on: docs/design.md "Restart guard"): a key of our own
// under the prefix, `<prefix>__redlock_mark`, holding a random id, no expiry. Every handshake
// sets it if absent (SET NX) and reads it; every acquire checks it in the same script as its
// SET. A wipe that keeps the run_id (FLUSHALL, FLUSHDB, SWAPDB with an unmarked db, DEBUG
// RELOAD NOSAVE without a dump, a replica's resync) takes it away or replaces it: the acquire
// then sets nothing and answers this error, and the restart guard takes the master's keys for
// replaced (RestartGuard::keys_replaced). A copy put back keeps the mark (docs/design.md).
inline constexpr std::string_view kMarkKeyName = "__redlock_mark";
inline constexpr std::string_view kMarkChangedError = "REDLOCKMARK keyspace replaced (mark changed)";

// The plain acquire with the restart guard on: SET NX PX (KEYS[1], ARGV[1], ARGV[2]) only if
// the mark (KEYS[2]) holds the id expected (ARGV[3]; '' = any id: not learned yet, the
// handshake just before read it). Answers as SET does (+OK, nil), or kMarkChangedError.
inline constexpr std::string_view kMarkedAcquireScript =
    "local m = redis.call('GET', KEYS[2]) "
    "if m == false or (ARGV[3] ~= '' and m ~= ARGV[3]) then "
    "return redis.error_reply('REDLOCKMARK keyspace replaced (mark changed)') end "
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.status_reply('OK') end "
    "return false";

// Whether `reply` is an acquire's kMarkChangedError: nothing was set, and the master's
// keyspace was replaced since this Client learned its mark.
[[nodiscard]] bool is_mark_changed(const redisReply* reply) noexcept;

// Acquire retries of a waiter (not the first attempt, which stays a plain SET NX PX): SET NX
// PX, and when the key is held, its PTTL, so the waiter can sleep until it could be free.
// +OK granted; an integer when held: the PTTL in ms, -1 no expiry, -3 PTTL refused (pcall:
// +pttl is optional in the ACL).
// With the restart guard on, KEYS[2] is the keyspace mark and ARGV[3] the id this Client
// expects there (kMarkedAcquireScript's check).
inline constexpr std::string_view kWaitingAcquireScript =
    "if KEYS[2] then local m = redis.call('GET', KEYS[2]) "
    "if m == false or (ARGV[3] ~= '' and m ~= ARGV[3]) then "
    "return redis.error_reply('REDLOCKMARK keyspace replaced (mark changed)') end end "
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return redis.status_reply('OK') end "
    "local t = redis.pcall('PTTL', KEYS[1]) "
    "if type(t) ~= 'number' then return -3 end "
    "return t";

// if GET(key) == token then PEXPIRE(key, ttl) unless that would shorten it: 1 extended (or
// kept: a master whose PTTL is already longer keeps it), 0 no key, -1 another owner.
// Never creates the key: a lost lock stays lost. Never shortens: a lease renewing with a
// short ttl, or `redlock extend` after `--ttl 60s acquire`, must not cut what a quorum granted.
// PEXPIRE ... GT (Redis >= 7.0) needs no permission beyond PEXPIRE; an older server refuses
// the GT argument, and there the script compares PTTL itself (that user then needs PTTL).
inline constexpr std::string_view kExtendScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == false then return 0 end "
    "if v ~= ARGV[1] then return -1 end "
    "local r = redis.pcall('PEXPIRE', KEYS[1], ARGV[2], 'GT') "
    "if type(r) == 'table' and r.err then "
    "if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
    "end "
    "return 1";

// Fenced acquire, round 1: SET NX PX, and on success INCR the master's fencing counter
// (KEYS[2]) and return it; nil when the key is held. With the restart guard on, KEYS[3] is the
// keyspace mark and ARGV[3] the id expected there (kMarkedAcquireScript's check).
inline constexpr std::string_view kFencedAcquireScript =
    "if KEYS[3] then local m = redis.call('GET', KEYS[3]) "
    "if m == false or (ARGV[3] ~= '' and m ~= ARGV[3]) then "
    "return redis.error_reply('REDLOCKMARK keyspace replaced (mark changed)') end end "
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('INCR', KEYS[2]) end "
    "return false";

// The largest fencing counter a master may report and be counted: the raise script compares
// Lua numbers (doubles), exact up to 2^53. Beyond it a raise could be acknowledged below its
// token (near 2^62 doubles are 1024 apart), and near 2^63 INCR overflows: a master reporting
// such a counter (hostile, or set by hand) is not counted, and its value is never written into
// the others (HostileMasterTest.AHugeFencingCounterOnOneMasterIsNotWrittenIntoTheOthers).
inline constexpr std::uint64_t kMaxFence = (std::uint64_t{1} << 53) - 1;

// Whether `value`, a counter a master reported, may be counted (1 .. kMaxFence, or 0 where
// the counter does not exist yet).
constexpr bool fence_in_range(long long value) noexcept {
  return value >= 0 && static_cast<std::uint64_t>(value) <= kMaxFence;
}

// Fencing round 2 and catch-up: counter = max(counter, ARGV[1]); returns the new value.
inline constexpr std::string_view kFenceRaiseScript =
    "local c = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local t = tonumber(ARGV[1]) "
    "if c < t then redis.call('SET', KEYS[1], ARGV[1]) return t end "
    "return c";

// The permission check of the connection handshake (docs/permissions.md): which commands of
// the lock paths (KEYS[1], a probe key under the prefix; ARGV[1] its value) and of the
// fencing paths (ARGV[2], the counter: an argument, not a key, because EVAL refuses outright
// a key the user may not touch) this ACL user may not run, as two comma-separated lists.
// redis.acl_check_cmd (Redis >= 7.0) asks the server's own ACL check without running
// anything, so the counter is never changed. Older servers answer two empty lists: there
// only the probe's real commands (SET, the extend and release scripts) are checked.
inline constexpr std::string_view kPermissionCheckScript =
    "if not redis.acl_check_cmd then return {'', '', ''} end "
    "local function missing(checks) "
    "local out = {} "
    "for _, c in ipairs(checks) do "
    "if not redis.acl_check_cmd(unpack(c)) then out[#out + 1] = c[1] end "
    "end "
    "return table.concat(out, ', ') "
    "end "
    "return {"
    "missing({{'SET', KEYS[1], ARGV[1], 'NX', 'PX', '1'}, {'GET', KEYS[1]}, {'PEXPIRE', KEYS[1], '1'}, "
    "{'DEL', KEYS[1]}, {'EVAL', 'return 0', '0'}}), "
    "missing({{'INCR', ARGV[2]}, {'GET', ARGV[2]}, {'SET', ARGV[2], '1'}}), "
    "missing({{'PUBLISH', ARGV[3], 'released'}, {'SUBSCRIBE', ARGV[3]}})}";

// What one round sends: fixed when the round is created. (An acquire's token changes with
// every attempt; a round answered late, e.g. a NOSCRIPT, must encode its own.)
struct RoundArgs {
  RoundKind kind = RoundKind::acquire;
  std::string key;          // acquire, extend, release
  std::string token;        // acquire, extend, release
  std::chrono::milliseconds ttl{0};  // acquire, extend: the PX
  bool fencing = false;     // acquire: the fenced (scripted) variant
  std::uint64_t fence = 0;  // fence: the token to raise the counters to
  bool learn_pttl = false;  // unfenced acquire: the waiting variant (kWaitingAcquireScript)
  // extend: a NOSCRIPT answer is re-sent with EVAL only before this instant of the validity
  // clock (max: while the round is undecided). A lease's renewal sets its loss moment, on the
  // clock its lost() reads: no re-send is queued once the holder may have been told.
  // release: the longest ttl in use after its start (ClientImpl::released_here_).
  std::chrono::steady_clock::time_point resend_before = std::chrono::steady_clock::time_point::max();
  // release: the masters (bit i: master i) that were never sent the lock's SET (Round::never_sent
  // of the acquire that made it): nothing of it is there, and nothing is sent to them.
  std::uint64_t never_sent = 0;
  // fence: the masters (bit i: master i) whose round-1 SET granted the attempt. Only their
  // acknowledgements count (docs/fencing.md, "The scheme"): a later grant's SET, and its INCR,
  // must land on a master already raised to this token.
  std::uint64_t granted = 0;
};

// What one master's reply to a round's command says on its own, before the round asks the
// restart guard and the fencing catch-up whether a grant is a vote (Round::classify). A free
// function so it can be fuzzed alone. Exactly one status per reply: ok, held_by_other,
// not_found or server_error. `fencing`: the acquire is the fenced variant; `fence`: a fence
// round's token.
// `learn_pttl`: the acquire is the waiting variant (kWaitingAcquireScript).
inline constexpr long long kPttlUnknown = -3;
struct ReplyVote {
  MasterStatus status = MasterStatus::server_error;
  std::string error;      // server_error: the server's text or what was unexpected; else empty
  long long counter = 0;  // fenced acquire granted: the master's fencing counter after INCR
  // Waiting acquire held_by_other: the key's PTTL in ms (-1: no expiry); else kPttlUnknown.
  long long pttl = kPttlUnknown;
  // Release ok: how many subscribers the release's PUBLISH reached (0 when not told).
  long long receivers = 0;
};
[[nodiscard]] ReplyVote classify_reply(RoundKind kind, bool fencing, std::uint64_t fence, const redisReply& reply,
                                       bool learn_pttl = false);

// NOSCRIPT: the script cache lost the script (flushed, or the master restarted): nothing ran.
[[nodiscard]] bool is_noscript(const redisReply* reply) noexcept;

// The ACL refused the command (NOPERM; inside a script Redis 7.0's "The user executing the
// script can't ..." or 7.2's "ACL failure in script"): this user's rights, not the server's
// state (READONLY, OOM, LOADING...). In permission_probe.cpp.
[[nodiscard]] bool is_acl_refusal(const redisReply& reply);
// Of those, a command this user may not run (not a key or channel it may not touch: with key
// patterns narrower than the prefix, that refuses one lock, not the master).
[[nodiscard]] bool is_command_refusal(const redisReply& reply);
// An error text saying the ACL refused this user a key of the command (direct or in a script).
[[nodiscard]] bool is_key_refusal_text(std::string_view text);

// The lock's commands for one Client (its key prefix and fencing counter key).
class LockCommands {
 public:
  // `keyspace_mark`: the restart guard is on: handshakes set and read the mark, and every
  // acquire checks it (kMarkedAcquireScript).
  LockCommands(std::string key_prefix, std::string fence_key, bool keyspace_mark = false);

  // Appends the command of a round to `out`: dispatches to the typed encoders below.
  // `use_eval`: the script's source instead of its SHA1 (the NOSCRIPT path); ignored for a
  // plain SET. `mark`: with keyspace_mark, the id an acquire expects in the master's mark
  // ("" = not known: any id); per master, so an acquire is encoded for each.
  void append(std::string& out, const RoundArgs& args, bool use_eval, std::string_view mark = {}) const;
  [[nodiscard]] bool keyspace_mark() const noexcept { return keyspace_mark_; }
  [[nodiscard]] const std::string& mark_key() const noexcept { return mark_key_; }
  // SET mark <fresh id> NX and GET mark (a handshake's, or again after a mark changed).
  [[nodiscard]] std::string mark_create() const;
  [[nodiscard]] std::string mark_read() const;

  static void acquire(std::string& out, std::string_view key, std::string_view token, std::chrono::milliseconds ttl);
  void marked_acquire(std::string& out, std::string_view key, std::string_view token, std::chrono::milliseconds ttl,
                      bool use_eval, std::string_view mark) const;
  // `mark`: nullptr = no mark check (the restart guard off).
  void waiting_acquire(std::string& out, std::string_view key, std::string_view token, std::chrono::milliseconds ttl,
                       bool use_eval, const std::string_view* mark = nullptr) const;
  void fenced_acquire(std::string& out, std::string_view key, std::string_view token, std::chrono::milliseconds ttl,
                      bool use_eval, const std::string_view* mark = nullptr) const;
  void extend(std::string& out, std::string_view key, std::string_view token, std::chrono::milliseconds ttl,
              bool use_eval) const;
  // The announcement goes to release_channel(key).
  void release(std::string& out, std::string_view key, std::string_view token, bool use_eval) const;
  // The fencing counter = max(counter, fence).
  void fence_raise(std::string& out, std::uint64_t fence, bool use_eval) const;
  // GET of the fencing counter (the catch-up reads it on other masters).
  [[nodiscard]] std::string fence_read() const;

  // The lock's handshake steps of one connection: SCRIPT LOAD of every script, then the
  // permission probe (a fresh probe key and token each time). In permission_probe.cpp.
  [[nodiscard]] std::vector<HandshakeStep> handshake_steps() const;

  // SCRIPT LOAD of the release script (encoded): sent ahead of the releases of a shutdown.
  [[nodiscard]] const std::string& release_load_command() const noexcept { return release_.load_command; }

  [[nodiscard]] const std::string& key_prefix() const noexcept { return key_prefix_; }
  [[nodiscard]] const std::string& fence_key() const noexcept { return fence_key_; }

 private:
  const std::string key_prefix_;
  const std::string fence_key_;
  const bool keyspace_mark_;
  const std::string mark_key_;
  const Script release_{kReleaseScript};
  const Script extend_{kExtendScript};
  const Script fenced_acquire_{kFencedAcquireScript};
  const Script waiting_acquire_{kWaitingAcquireScript};
  const Script fence_raise_{kFenceRaiseScript};
  const Script permission_check_{kPermissionCheckScript};
  const Script marked_acquire_{kMarkedAcquireScript};
};

}  // namespace redlock::detail

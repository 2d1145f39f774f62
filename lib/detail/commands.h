// SPDX-License-Identifier: Apache-2.0
// detail/commands.h — the Redis commands and Lua scripts of the lock, RESP-encoded.
//
// Encoding goes through hiredis (redisFormatCommandArgv), so keys and tokens are
// binary-safe. The scripts are the compare-and-delete / compare-and-PEXPIRE of the Redlock
// description, returning 1 (done), 0 (no key) or -1 (another owner's token), so a release
// can tell "already expired" from "someone else holds it now".
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace redlock::detail {

std::string encode_command(std::initializer_list<std::string_view> argv);

// if GET(key) == token then DEL(key): 1 deleted, 0 no key, -1 another owner.
inline constexpr std::string_view kReleaseScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == ARGV[1] then return redis.call('DEL', KEYS[1]) end "
    "if v == false then return 0 end "
    "return -1";

// if GET(key) == token then PEXPIRE(key, ttl): 1 extended, 0 no key, -1 another owner.
// Never creates the key: a lost lock stays lost.
inline constexpr std::string_view kExtendScript =
    "local v = redis.call('GET', KEYS[1]) "
    "if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end "
    "if v == false then return 0 end "
    "return -1";

// Lowercase hex SHA1 of a script, as EVALSHA wants it (OpenSSL).
std::string script_sha1(std::string_view script);

// Fenced acquire, round 1: SET NX PX, and on success INCR the master's fencing counter
// (KEYS[2]) and return it; nil when the key is held.
inline constexpr std::string_view kFencedAcquireScript =
    "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('INCR', KEYS[2]) end "
    "return false";

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
    "if not redis.acl_check_cmd then return {'', ''} end "
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
    "missing({{'INCR', ARGV[2]}, {'GET', ARGV[2]}, {'SET', ARGV[2], '1'}})}";

// A script prepared for one Client: the EVALSHA name and the SCRIPT LOAD command that the
// connection handshake sends, so EVALSHA normally hits and EVAL is only the NOSCRIPT path.
struct Script {
  explicit Script(std::string_view source);
  std::string_view source;
  std::string sha1;
  std::string load_command;  // encoded SCRIPT LOAD <source>
};

std::string encode_set_nx_px(std::string_view key, std::string_view token, long long ttl_ms);
// EVALSHA sha numkeys keys... args... (or EVAL source ... when `use_eval`).
std::string encode_script_call(const Script& script, bool use_eval, std::initializer_list<std::string_view> keys,
                               std::initializer_list<std::string_view> args);

}  // namespace redlock::detail

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

// A script prepared for one Client: the EVALSHA name and the SCRIPT LOAD command that the
// connection handshake sends, so EVALSHA normally hits and EVAL is only the NOSCRIPT path.
struct Script {
  explicit Script(std::string_view source);
  std::string_view source;
  std::string sha1;
  std::string load_command;  // encoded SCRIPT LOAD <source>
};

std::string encode_set_nx_px(std::string_view key, std::string_view token, long long ttl_ms);
// EVALSHA sha 1 key args... (or EVAL source 1 key args... when `use_eval`).
std::string encode_script_call(const Script& script, bool use_eval, std::string_view key,
                               std::initializer_list<std::string_view> args);

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/commands.h — RESP encoding of Redis commands and of Lua script calls (the lock's own
// commands and scripts are in lock_commands.h).
//
// Encoding goes through hiredis (redisFormatCommandArgv), so keys and tokens are
// binary-safe.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace redlock::detail {

std::string encode_command(std::initializer_list<std::string_view> argv);

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
// EVALSHA sha numkeys keys... args... (or EVAL source ... when `use_eval`).
std::string encode_script_call(const Script& script, bool use_eval, std::initializer_list<std::string_view> keys,
                               std::initializer_list<std::string_view> args);

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/commands.h — RESP encoding of Redis commands and of Lua script calls (the lock's own
// commands and scripts are in lock_commands.h).
//
// Every argument goes out as a bulk string with its length, so keys and tokens are
// binary-safe. The append_* functions write into a buffer the caller reuses (a round encodes
// its command there without allocating); the encode_* ones return a new string.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace redlock::detail {

// One argument of a command: a view, or two views sent as one argument (a channel made of
// its prefix and a key, without building the joined string).
struct CommandArg {
  CommandArg() = default;
  CommandArg(std::string_view only) : first(only) {}  // NOLINT(google-explicit-constructor)
  CommandArg(const char* only) : first(only) {}       // NOLINT(google-explicit-constructor)
  CommandArg(const std::string& only) : first(only) {}  // NOLINT(google-explicit-constructor)
  CommandArg(std::string_view head, std::string_view tail) : first(head), second(tail) {}
  std::string_view first;
  std::string_view second;
};

// A number as a command argument, formatted in place (no allocation).
class DecimalText {
 public:
  explicit DecimalText(long long value);
  explicit DecimalText(std::uint64_t value);
  [[nodiscard]] std::string_view view() const noexcept { return {text_, size_}; }

 private:
  char text_[24];
  std::size_t size_;
};

// Appends one command to `out`: the RESP array header, then each argument as a bulk string.
void append_command(std::string& out, std::initializer_list<CommandArg> argv);
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

void append_set_nx_px(std::string& out, std::string_view key, std::string_view token, long long ttl_ms);
std::string encode_set_nx_px(std::string_view key, std::string_view token, long long ttl_ms);
// EVALSHA sha numkeys keys... args... (or EVAL source ... when `use_eval`). At most 8 keys
// and args together (std::invalid_argument beyond).
void append_script_call(std::string& out, const Script& script, bool use_eval,
                        std::initializer_list<std::string_view> keys, std::initializer_list<CommandArg> args);
std::string encode_script_call(const Script& script, bool use_eval, std::initializer_list<std::string_view> keys,
                               std::initializer_list<CommandArg> args);

}  // namespace redlock::detail

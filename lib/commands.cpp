// SPDX-License-Identifier: Apache-2.0
#include "detail/commands.h"

#include <openssl/evp.h>

#include <charconv>
#include <stdexcept>

namespace redlock::detail {
namespace {

void append_number(std::string& out, char type, std::size_t value) {
  char digits[24];
  const auto [end, ec] = std::to_chars(digits, digits + sizeof(digits), value);
  out += type;
  out.append(digits, end);
  out += "\r\n";
}

void append_arg(std::string& out, const CommandArg& arg) {
  append_number(out, '$', arg.first.size() + arg.second.size());
  out += arg.first;
  out += arg.second;
  out += "\r\n";
}

}  // namespace

DecimalText::DecimalText(long long value)
    : size_(static_cast<std::size_t>(std::to_chars(text_, text_ + sizeof(text_), value).ptr - text_)) {}
DecimalText::DecimalText(std::uint64_t value)
    : size_(static_cast<std::size_t>(std::to_chars(text_, text_ + sizeof(text_), value).ptr - text_)) {}

void append_command(std::string& out, std::initializer_list<CommandArg> argv) {
  append_number(out, '*', argv.size());
  for (const auto& arg : argv) append_arg(out, arg);
}

std::string encode_command(std::initializer_list<std::string_view> argv) {
  std::string out;
  append_number(out, '*', argv.size());
  for (const auto arg : argv) append_arg(out, arg);
  return out;
}

void append_set_nx_px(std::string& out, std::string_view key, std::string_view token, long long ttl_ms) {
  const DecimalText ttl(ttl_ms);
  append_command(out, {"SET", key, token, "NX", "PX", ttl.view()});
}

std::string encode_set_nx_px(std::string_view key, std::string_view token, long long ttl_ms) {
  std::string out;
  append_set_nx_px(out, key, token, ttl_ms);
  return out;
}

void append_script_call(std::string& out, const Script& script, bool use_eval,
                        std::initializer_list<std::string_view> keys, std::initializer_list<CommandArg> args) {
  constexpr std::size_t kMaxArgs = 8;
  if (keys.size() + args.size() > kMaxArgs) throw std::invalid_argument("encode_script_call: too many arguments");
  const DecimalText numkeys(static_cast<std::uint64_t>(keys.size()));
  append_number(out, '*', 3 + keys.size() + args.size());
  append_arg(out, use_eval ? std::string_view("EVAL") : std::string_view("EVALSHA"));
  append_arg(out, use_eval ? script.source : std::string_view(script.sha1));
  append_arg(out, numkeys.view());
  for (const auto key : keys) append_arg(out, key);
  for (const auto& arg : args) append_arg(out, arg);
}

std::string encode_script_call(const Script& script, bool use_eval, std::initializer_list<std::string_view> keys,
                               std::initializer_list<CommandArg> args) {
  std::string out;
  append_script_call(out, script, use_eval, keys, args);
  return out;
}

std::string script_sha1(std::string_view script) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(script.data(), script.size(), digest, &size, EVP_sha1(), nullptr) != 1) {
    throw std::runtime_error("SHA1 of a Lua script failed (OpenSSL EVP_Digest)");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(size * 2);
  for (unsigned int i = 0; i < size; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xf]);
  }
  return hex;
}

Script::Script(std::string_view source_text)
    : source(source_text),
      sha1(script_sha1(source_text)),
      load_command(encode_command({"SCRIPT", "LOAD", source_text})) {}

}  // namespace redlock::detail

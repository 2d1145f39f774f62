// SPDX-License-Identifier: Apache-2.0
#include "detail/commands.h"

#include <openssl/evp.h>

#include <charconv>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace redlock::detail {
namespace {

// RESP is written in one pass into space sized in advance: one resize per command, rather
// than a capacity check (and a possible reallocation) per piece.

std::size_t decimal_digits(std::size_t value) noexcept {
  std::size_t digits = 1;
  for (; value >= 10; value /= 10) ++digits;
  return digits;
}

std::size_t arg_size(const CommandArg& arg) noexcept { return arg.first.size() + arg.second.size(); }

// "<type><n>\r\n"
std::size_t header_bytes(std::size_t n) noexcept { return 1 + decimal_digits(n) + 2; }
char* put_header(char* at, char type, std::size_t n) noexcept {
  *at++ = type;
  at = std::to_chars(at, at + decimal_digits(n), n).ptr;
  *at++ = '\r';
  *at++ = '\n';
  return at;
}

char* put_bytes(char* at, std::string_view bytes) noexcept {
  if (!bytes.empty()) std::memcpy(at, bytes.data(), bytes.size());
  return at + bytes.size();
}

// "$<len>\r\n<bytes>\r\n"
std::size_t bulk_bytes(const CommandArg& arg) noexcept { return header_bytes(arg_size(arg)) + arg_size(arg) + 2; }
char* put_bulk(char* at, const CommandArg& arg) noexcept {
  at = put_header(at, '$', arg_size(arg));
  at = put_bytes(at, arg.first);
  at = put_bytes(at, arg.second);
  *at++ = '\r';
  *at++ = '\n';
  return at;
}

// The array of `count` bulk strings.
void append_args(std::string& out, const CommandArg* argv, std::size_t count) {
  std::size_t size = header_bytes(count);
  for (std::size_t i = 0; i < count; ++i) size += bulk_bytes(argv[i]);
  const std::size_t start = out.size();
  out.resize(start + size);
  char* at = put_header(out.data() + start, '*', count);
  for (std::size_t i = 0; i < count; ++i) at = put_bulk(at, argv[i]);
}

}  // namespace

DecimalText::DecimalText(long long value)
    : size_(static_cast<std::size_t>(std::to_chars(text_, text_ + sizeof(text_), value).ptr - text_)) {}
DecimalText::DecimalText(std::uint64_t value)
    : size_(static_cast<std::size_t>(std::to_chars(text_, text_ + sizeof(text_), value).ptr - text_)) {}

void append_command(std::string& out, std::initializer_list<CommandArg> argv) {
  append_args(out, argv.begin(), argv.size());
}

std::string encode_command(std::initializer_list<std::string_view> argv) {
  const std::vector<CommandArg> args(argv.begin(), argv.end());  // (setup only: handshakes, SCRIPT LOAD)
  std::string out;
  append_args(out, args.data(), args.size());
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
  CommandArg argv[3 + kMaxArgs] = {use_eval ? std::string_view("EVAL") : std::string_view("EVALSHA"),
                                   use_eval ? script.source : std::string_view(script.sha1), numkeys.view()};
  std::size_t count = 3;
  for (const auto key : keys) argv[count++] = key;
  for (const auto& arg : args) argv[count++] = arg;
  append_args(out, argv, count);
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

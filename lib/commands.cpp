// SPDX-License-Identifier: Apache-2.0
#include "detail/commands.h"

#include "detail/hiredis_ptr.h"

#include <hiredis/hiredis.h>
#include <openssl/evp.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

namespace redlock::detail {
namespace {

std::string encode(const char** argv, const std::size_t* lengths, int argc) {
  char* raw = nullptr;
  const int size = redisFormatCommandArgv(&raw, argc, argv, lengths);
  if (size < 0 || raw == nullptr) throw std::bad_alloc();
  const FormattedCommandPtr owned(raw);
  return std::string(raw, static_cast<std::size_t>(size));
}

}  // namespace

std::string encode_command(std::initializer_list<std::string_view> argv) {
  std::vector<const char*> pointers;
  std::vector<std::size_t> lengths;
  pointers.reserve(argv.size());
  lengths.reserve(argv.size());
  for (const auto arg : argv) {
    pointers.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  return encode(pointers.data(), lengths.data(), static_cast<int>(argv.size()));
}

std::string encode_set_nx_px(std::string_view key, std::string_view token, long long ttl_ms) {
  const std::string ttl = std::to_string(ttl_ms);
  const char* argv[] = {"SET", key.data(), token.data(), "NX", "PX", ttl.data()};
  const std::size_t lengths[] = {3, key.size(), token.size(), 2, 2, ttl.size()};
  return encode(argv, lengths, 6);
}

std::string encode_script_call(const Script& script, bool use_eval, std::initializer_list<std::string_view> keys,
                               std::initializer_list<std::string_view> args) {
  constexpr std::size_t kMaxArgs = 8;
  if (keys.size() + args.size() > kMaxArgs) throw std::invalid_argument("encode_script_call: too many arguments");
  const char* argv[kMaxArgs + 3];
  std::size_t lengths[kMaxArgs + 3];
  int argc = 0;
  auto push = [&](std::string_view arg) {
    argv[argc] = arg.data();
    lengths[argc] = arg.size();
    ++argc;
  };
  const std::string numkeys = std::to_string(keys.size());
  push(use_eval ? std::string_view("EVAL") : std::string_view("EVALSHA"));
  push(use_eval ? script.source : std::string_view(script.sha1));
  push(numkeys);
  for (const auto key : keys) push(key);
  for (const auto arg : args) push(arg);
  return encode(argv, lengths, argc);
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

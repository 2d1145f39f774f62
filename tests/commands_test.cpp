// SPDX-License-Identifier: Apache-2.0
// Tests for the RESP encoding of the lock's commands (lib/detail/commands.h), the Lua
// scripts (checked against a real redis-server), and owner tokens (lib/detail/token.h).
#include "detail/lock_commands.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "detail/commands.h"
#include "detail/token.h"
#include "support/hiredis_handle.h"
#include "support/redis_server.h"

namespace {

using redlock::detail::append_script_call;
using redlock::detail::encode_command;
using redlock::detail::encode_script_call;
using redlock::detail::encode_set_nx_px;
using redlock::detail::kExtendScript;
using redlock::detail::kFencedAcquireScript;
using redlock::detail::kReleaseScript;
using redlock::detail::make_token;
using redlock::detail::Script;
using redlock::detail::script_sha1;
using redlock::support::RedisServer;
using redlock::support::Reply;
using ::testing::StartsWith;

// "$<len>\r\n<bytes>\r\n"
std::string bulk(std::string_view s) { return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n"; }

using ReplyPtr = redlock::support::RedisReplyPtr;

// Sends already-encoded RESP bytes to `server` on a fresh connection and returns the reply.
ReplyPtr send_raw(const RedisServer& server, const std::string& encoded) {
  timeval tv{};
  tv.tv_sec = 5;
  redlock::support::RedisContextPtr ctx(redisConnectWithTimeout(server.host().c_str(), server.port(), tv));
  if (!ctx || ctx->err != 0) throw std::runtime_error("cannot connect to redis-server");
  if (redisSetTimeout(ctx.get(), tv) != REDIS_OK) throw std::runtime_error("redisSetTimeout failed");
  if (redisAppendFormattedCommand(ctx.get(), encoded.data(), encoded.size()) != REDIS_OK) {
    throw std::runtime_error("redisAppendFormattedCommand failed");
  }
  void* raw = nullptr;
  if (redisGetReply(ctx.get(), &raw) != REDIS_OK || raw == nullptr) {
    throw std::runtime_error(std::string("no reply: ") + ctx->errstr);
  }
  return ReplyPtr(static_cast<redisReply*>(raw));
}

// ---------------------------------------------------------------------------------------
// SET key token NX PX ttl

// What the ACL's refusals say, in Redis 7.0 (run here, AclTest) and in 7.2 and later (their
// texts from Redis's sources: a review found that only the 7.0 wording was recognised, so a
// later server's refusals inside the lock's scripts would neither mark the master nor spare
// the false "key stays" warning).
TEST(CommandsTest, AclRefusalTexts) {
  const auto error = [](const std::string& text) {
    redisReply reply{};
    reply.type = REDIS_REPLY_ERROR;
    reply.str = const_cast<char*>(text.c_str());
    reply.len = text.size();
    return reply;
  };
  struct Case {
    std::string text;
    bool refusal, command, key;
  };
  const std::vector<Case> cases = {
      {"NOPERM this user has no permissions to run the 'evalsha' command", true, true, false},
      {"NOPERM this user has no permissions to access one of the keys used as arguments", true, false, true},
      {"NOPERM this user has no permissions to access one of the channels used as arguments", true, false, false},
      {"ERR The user executing the script can't run this command or subcommand script: d7f9, on @user_script:1.", true,
       true, false},
      {"ERR The user executing the script can't access at least one of the keys mentioned in the command arguments "
       "script: 7ffa, on @user_script:1.",
       true, false, true},
      {"NOPERM User locker has no permissions to run the 'set' command", true, true, false},
      {"NOPERM No permissions to access a key", true, false, true},
      {"ERR ACL failure in script: User locker has no permissions to run the 'del' command script: d7f9, on "
       "@user_script:1.",
       true, true, false},
      {"ERR ACL failure in script: No permissions to access a key script: d7f9, on @user_script:1.", true, false, true},
      {"ERR ACL failure in script: User locker has no permissions to access the 'redlock:x' key", true, false, true},
      {"READONLY You can't write against a read only replica.", false, false, false},
      {"OOM command not allowed when used memory > 'maxmemory'.", false, false, false},
      {"NOAUTH Authentication required.", false, false, false},
      {"ERR Error running script (call to f_x): @user_script:1: the key 'access a key' is odd", false, false, false},
  };
  for (const auto& c : cases) {
    const redisReply reply = error(c.text);
    EXPECT_EQ(redlock::detail::is_acl_refusal(reply), c.refusal) << c.text;
    EXPECT_EQ(redlock::detail::is_command_refusal(reply), c.command) << c.text;
    EXPECT_EQ(redlock::detail::is_key_refusal_text(c.text), c.key) << c.text;
  }
}

TEST(EncodeSetNxPx, ExactRespBytes) {
  EXPECT_EQ(encode_set_nx_px("redlock:orders", "0123abcd", 10000),
            "*6\r\n$3\r\nSET\r\n$14\r\nredlock:orders\r\n$8\r\n0123abcd\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n");
  EXPECT_EQ(encode_set_nx_px("k", "t", 1), "*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nt\r\n$2\r\nNX\r\n$2\r\nPX\r\n$1\r\n1\r\n");
}

TEST(EncodeSetNxPx, BinarySafeKey) {
  const std::string key("a\0b\r\nc$*", 8);
  const std::string token("tok\0en", 6);
  const std::string expected =
      "*6\r\n" + bulk("SET") + bulk(key) + bulk(token) + bulk("NX") + bulk("PX") + bulk("123456789012");
  const std::string encoded = encode_set_nx_px(key, token, 123456789012LL);
  EXPECT_EQ(encoded, expected);
  EXPECT_THAT(encoded, ::testing::HasSubstr(std::string("$8\r\na\0b\r\nc$*\r\n", 14)));
}

TEST(EncodeSetNxPx, SubstringViewsAreNotReadPastTheirEnd) {
  // string_views into a larger buffer: only the viewed bytes may be encoded.
  const std::string buffer = "KEYxxxxTOKENyyyy";
  const std::string_view key(buffer.data(), 3);
  const std::string_view token(buffer.data() + 7, 5);
  EXPECT_EQ(encode_set_nx_px(key, token, 42),
            "*6\r\n" + bulk("SET") + bulk("KEY") + bulk("TOKEN") + bulk("NX") + bulk("PX") + bulk("42"));
}

TEST(EncodeSetNxPx, RealServerAcceptsBinaryKey) {
  RedisServer server;
  const std::string key("lock\0with\r\nbinary", 17);
  const ReplyPtr first = send_raw(server, encode_set_nx_px(key, "owner-1", 60000));
  ASSERT_EQ(first->type, REDIS_REPLY_STATUS);
  EXPECT_EQ(std::string(first->str, first->len), "OK");
  EXPECT_EQ(server.command({"GET", key}).str, "owner-1");
  const long long pttl = server.command({"PTTL", key}).integer;
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 60000);
  // NX: a second SET does not overwrite.
  const ReplyPtr second = send_raw(server, encode_set_nx_px(key, "owner-2", 60000));
  EXPECT_EQ(second->type, REDIS_REPLY_NIL);
  EXPECT_EQ(server.command({"GET", key}).str, "owner-1");
  EXPECT_EQ(server.command({"DBSIZE"}).integer, 1);
}

TEST(EncodeCommand, Generic) {
  EXPECT_EQ(encode_command({"PING"}), "*1\r\n$4\r\nPING\r\n");
  EXPECT_EQ(encode_command({"GET", std::string_view("\0", 1)}), "*2\r\n$3\r\nGET\r\n$1\r\n" + std::string(1, '\0') + "\r\n");
  EXPECT_EQ(encode_command({"SET", "", "v"}), "*3\r\n$3\r\nSET\r\n$0\r\n\r\n$1\r\nv\r\n");
}

// ---------------------------------------------------------------------------------------
// Scripts

// The bytes hiredis's own encoder makes of `args` (what ours must equal).
std::string hiredis_encoded(const std::vector<std::string>& args) {
  std::vector<const char*> pointers;
  std::vector<std::size_t> lengths;
  for (const auto& a : args) {
    pointers.push_back(a.data());
    lengths.push_back(a.size());
  }
  char* formatted = nullptr;
  const long long size = redisFormatCommandArgv(&formatted, static_cast<int>(args.size()), pointers.data(), lengths.data());
  if (size < 0) throw std::runtime_error("redisFormatCommandArgv failed");
  std::string encoded(formatted, static_cast<std::size_t>(size));
  redisFreeCommand(formatted);
  return encoded;
}

// Our RESP writer replaced hiredis's redisFormatCommandArgv: a byte of difference could make a
// master run another command (or another key's). Same bytes for arguments of every kind:
// empty, NUL, CR/LF, RESP markers, long, and 0 to 8 of them; and a two-part argument is the
// joined one.
TEST(EncodeCommand, SameBytesAsHiredisForAnyArguments) {
  const std::vector<std::string> samples = {"", std::string("\0", 1), "\r\n", "$5\r\nhello\r\n", "*3", "-ERR", "+OK",
                                            "key\r\nSET other x", std::string(300, 'k'), "\xff\xfe",
                                            std::string("a\0b\r", 4), "SET",
                                            // lengths on both sides of each power of ten (the
                                            // writer sizes the length's digits in advance)
                                            std::string(9, 'n'), std::string(10, 't'), std::string(99, 'n'),
                                            std::string(100, 'h'), std::string(999, 'n'), std::string(1000, 't'),
                                            std::string(9999, 'n'), std::string(10000, 't'), std::string(100000, 'h')};
  std::uint32_t seed = 12345;
  const auto next = [&seed] { return seed = seed * 1103515245u + 12345u; };
  for (int round = 0; round < 500; ++round) {
    const std::size_t count = next() % 9;
    std::vector<std::string> args;
    for (std::size_t i = 0; i < count; ++i) args.push_back(samples[next() % samples.size()]);
    const std::string expected = hiredis_encoded(args);
    // Appended after what the buffer already holds, every other round.
    const std::string before = round % 2 == 0 ? "" : "*1\r\n$4\r\nPING\r\n";
    std::string ours = before;
    switch (count) {  // append_command takes an initializer list
      case 0: redlock::detail::append_command(ours, {}); break;
      case 1: redlock::detail::append_command(ours, {args[0]}); break;
      case 2: redlock::detail::append_command(ours, {args[0], args[1]}); break;
      case 3: redlock::detail::append_command(ours, {args[0], args[1], args[2]}); break;
      case 4: redlock::detail::append_command(ours, {args[0], args[1], args[2], args[3]}); break;
      case 5: redlock::detail::append_command(ours, {args[0], args[1], args[2], args[3], args[4]}); break;
      case 6: redlock::detail::append_command(ours, {args[0], args[1], args[2], args[3], args[4], args[5]}); break;
      case 7:
        redlock::detail::append_command(ours, {args[0], args[1], args[2], args[3], args[4], args[5], args[6]});
        break;
      default:
        redlock::detail::append_command(ours,
                                        {args[0], args[1], args[2], args[3], args[4], args[5], args[6], args[7]});
    }
    ASSERT_EQ(ours, before + expected) << "round " << round << ", " << count << " arguments";
    if (count >= 2) {
      // The same command with its second argument sent as two parts.
      const std::string& whole = args[1];
      const std::size_t cut = whole.size() / 2;
      std::string split;
      redlock::detail::append_command(split, {redlock::detail::CommandArg(args[0]),
                                              redlock::detail::CommandArg(std::string_view(whole).substr(0, cut),
                                                                          std::string_view(whole).substr(cut))});
      std::string joined;
      redlock::detail::append_command(joined, {args[0], args[1]});
      ASSERT_EQ(split, joined) << "round " << round;
    }
  }
}

TEST(ScriptSha1, KnownVector) {
  // SHA1("abc") from FIPS 180.
  EXPECT_EQ(script_sha1("abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
  EXPECT_EQ(script_sha1(""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
}

TEST(ScriptSha1, MatchesRedisScriptLoad) {
  RedisServer server;
  for (const std::string_view source : {kReleaseScript, kExtendScript}) {
    SCOPED_TRACE(std::string(source));
    const Reply loaded = server.command({"SCRIPT", "LOAD", std::string(source)});
    ASSERT_EQ(loaded.type, Reply::Type::string) << loaded.str;
    const std::string sha = script_sha1(source);
    EXPECT_EQ(sha, loaded.str);
    EXPECT_EQ(sha.size(), 40u);
    EXPECT_TRUE(std::all_of(sha.begin(), sha.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }));
  }
  EXPECT_NE(script_sha1(kReleaseScript), script_sha1(kExtendScript));
}

TEST(Script, PreparedFields) {
  const Script script(kReleaseScript);
  EXPECT_EQ(script.source, kReleaseScript);
  EXPECT_EQ(script.sha1, script_sha1(kReleaseScript));
  EXPECT_EQ(script.load_command, "*3\r\n" + bulk("SCRIPT") + bulk("LOAD") + bulk(kReleaseScript));
}

TEST(EncodeScriptCall, Evalsha) {
  const Script release(kReleaseScript);
  EXPECT_EQ(encode_script_call(release, false, {"redlock:r"}, {"tok"}),
            "*5\r\n" + bulk("EVALSHA") + bulk(release.sha1) + bulk("1") + bulk("redlock:r") + bulk("tok"));
  const Script extend(kExtendScript);
  EXPECT_EQ(encode_script_call(extend, false, {"redlock:r"}, {"tok", "5000"}),
            "*6\r\n" + bulk("EVALSHA") + bulk(extend.sha1) + bulk("1") + bulk("redlock:r") + bulk("tok") +
                bulk("5000"));
}

TEST(EncodeScriptCall, Eval) {
  const Script release(kReleaseScript);
  EXPECT_EQ(encode_script_call(release, true, {"redlock:r"}, {"tok"}),
            "*5\r\n" + bulk("EVAL") + bulk(kReleaseScript) + bulk("1") + bulk("redlock:r") + bulk("tok"));
  const Script extend(kExtendScript);
  const std::string key("k\0\r\n", 4);
  EXPECT_EQ(encode_script_call(extend, true, {key}, {"tok", "5000"}),
            "*6\r\n" + bulk("EVAL") + bulk(kExtendScript) + bulk("1") + bulk(key) + bulk("tok") + bulk("5000"));
}

TEST(EncodeScriptCall, TwoKeys) {
  const Script fenced(kFencedAcquireScript);
  EXPECT_EQ(encode_script_call(fenced, false, {"redlock:r", "fence"}, {"tok", "5000"}),
            "*7\r\n" + bulk("EVALSHA") + bulk(fenced.sha1) + bulk("2") + bulk("redlock:r") + bulk("fence") +
                bulk("tok") + bulk("5000"));
}

// The most a call takes (8 keys and args: 11 elements, a two-digit count), after what the
// buffer already holds, against hiredis's encoder.
TEST(EncodeScriptCall, TheLongestCallIsTheSameBytesAsHiredis) {
  const Script fenced(kFencedAcquireScript);
  std::string ours = "*1\r\n$4\r\nPING\r\n";
  const std::string prefix = ours;
  append_script_call(ours, fenced, false, {"k1", "k2", "k3"}, {"a", std::string(100, 'b'), "", "d", "e"});
  const std::vector<std::string> args = {"EVALSHA", fenced.sha1, "3", "k1", "k2", "k3", "a", std::string(100, 'b'),
                                         "", "d", "e"};
  EXPECT_EQ(ours, prefix + hiredis_encoded(args));
}

TEST(EncodeScriptCall, TooManyArgumentsThrow) {
  const Script release(kReleaseScript);
  EXPECT_NO_THROW((void)encode_script_call(release, false, {"k"}, {"a", "b", "c", "d", "e", "f", "g"}));
  EXPECT_THROW((void)encode_script_call(release, false, {"k"}, {"a", "b", "c", "d", "e", "f", "g", "h"}),
               std::invalid_argument);
}

// The scripts' documented behaviour, run by a real redis-server through the library's own
// encoding: 1 done, 0 no key, -1 another owner; extend never creates a key nor shortens one.
TEST(Scripts, ReleaseOnRealServer) {
  RedisServer server;
  const Script release(kReleaseScript);
  for (const bool use_eval : {true, false}) {
    SCOPED_TRACE(use_eval ? "EVAL" : "EVALSHA");
    if (!use_eval) {
      ASSERT_EQ(server.command({"SCRIPT", "LOAD", std::string(kReleaseScript)}).str, release.sha1);
    }

    ReplyPtr reply = send_raw(server, encode_script_call(release, use_eval, {"k"}, {"mine"}));
    ASSERT_EQ(reply->type, REDIS_REPLY_INTEGER) << (reply->str ? reply->str : "");
    EXPECT_EQ(reply->integer, 0);  // no key

    server.command({"SET", "k", "theirs"});
    reply = send_raw(server, encode_script_call(release, use_eval, {"k"}, {"mine"}));
    EXPECT_EQ(reply->integer, -1);  // another owner: untouched
    EXPECT_EQ(server.command({"GET", "k"}).str, "theirs");

    server.command({"SET", "k", "mine"});
    reply = send_raw(server, encode_script_call(release, use_eval, {"k"}, {"mine"}));
    EXPECT_EQ(reply->integer, 1);  // deleted
    EXPECT_EQ(server.command({"EXISTS", "k"}).integer, 0);
  }
}

TEST(Scripts, ExtendOnRealServer) {
  RedisServer server;
  const Script extend(kExtendScript);
  for (const bool use_eval : {true, false}) {
    SCOPED_TRACE(use_eval ? "EVAL" : "EVALSHA");
    server.command({"DEL", "k"});
    if (!use_eval) {
      ASSERT_EQ(server.command({"SCRIPT", "LOAD", std::string(kExtendScript)}).str, extend.sha1);
    }

    ReplyPtr reply = send_raw(server, encode_script_call(extend, use_eval, {"k"}, {"mine", "60000"}));
    ASSERT_EQ(reply->type, REDIS_REPLY_INTEGER) << (reply->str ? reply->str : "");
    EXPECT_EQ(reply->integer, 0);  // no key, and none created
    EXPECT_EQ(server.command({"EXISTS", "k"}).integer, 0);

    server.command({"SET", "k", "theirs", "PX", "1000000"});
    reply = send_raw(server, encode_script_call(extend, use_eval, {"k"}, {"mine", "60000"}));
    EXPECT_EQ(reply->integer, -1);
    EXPECT_GT(server.command({"PTTL", "k"}).integer, 60000);  // their expiry untouched

    server.command({"SET", "k", "mine", "PX", "1000"});
    reply = send_raw(server, encode_script_call(extend, use_eval, {"k"}, {"mine", "60000"}));
    EXPECT_EQ(reply->integer, 1);
    long long pttl = server.command({"PTTL", "k"}).integer;
    EXPECT_GT(pttl, 1000);
    EXPECT_LE(pttl, 60000);
    EXPECT_EQ(server.command({"GET", "k"}).str, "mine");

    // Never shortens: a longer PTTL is kept, and the answer is still 1.
    server.command({"SET", "k", "mine", "PX", "1000000"});
    reply = send_raw(server, encode_script_call(extend, use_eval, {"k"}, {"mine", "60000"}));
    EXPECT_EQ(reply->integer, 1);
    pttl = server.command({"PTTL", "k"}).integer;
    EXPECT_GT(pttl, 900000);
    EXPECT_EQ(server.command({"GET", "k"}).str, "mine");
  }
}

// ---------------------------------------------------------------------------------------
// Tokens

TEST(MakeToken, ThirtyTwoLowercaseHexChars) {
  for (int i = 0; i < 100; ++i) {
    const std::string token = make_token();
    ASSERT_EQ(token.size(), 32u);
    ASSERT_EQ(token.size(), 2 * redlock::detail::kTokenBytes);
    for (const char c : token) {
      ASSERT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << "token " << token;
    }
  }
}

TEST(MakeToken, TenThousandDistinct) {
  std::unordered_set<std::string> seen;
  for (int i = 0; i < 10'000; ++i) seen.insert(make_token());
  EXPECT_EQ(seen.size(), 10'000u);
}

TEST(MakeToken, UsesEveryHexDigit) {
  // 1,000 x 32 random digits: each of the 16 digits appears (a stuck nibble would not).
  std::array<int, 16> counts{};
  for (int i = 0; i < 1'000; ++i) {
    for (const char c : make_token()) {
      ++counts[static_cast<std::size_t>(c <= '9' ? c - '0' : c - 'a' + 10)];
    }
  }
  for (std::size_t d = 0; d < counts.size(); ++d) EXPECT_GT(counts[d], 0) << "hex digit " << d;
}

}  // namespace

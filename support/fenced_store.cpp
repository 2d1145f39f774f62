// SPDX-License-Identifier: Apache-2.0
#include "support/fenced_store.h"

#include "support/hiredis_handle.h"

#include <hiredis/hiredis.h>

#include <memory>
#include <stdexcept>
#include <vector>

namespace redlock::support {
namespace {

constexpr const char* kWriteScript =
    "local highest = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local token = tonumber(ARGV[1]) "
    "if token < highest then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1]) "
    "redis.call('SET', KEYS[2], ARGV[2]) "
    "return 1";

RedisReplyPtr run(const std::string& host, std::uint16_t port, const std::vector<std::string>& argv) {
  const timeval timeout{1, 0};
  const RedisContextPtr context(redisConnectWithTimeout(host.c_str(), port, timeout));
  if (!context || context->err != 0) {
    throw std::runtime_error("FencedStore: cannot connect to " + host + ":" + std::to_string(port));
  }
  redisSetTimeout(context.get(), timeout);
  RedisReplyPtr reply = command_argv(*context, argv);
  if (!reply) throw std::runtime_error("FencedStore: no reply from " + host + ":" + std::to_string(port));
  return reply;
}

}  // namespace

FencedStore::FencedStore(std::string host, std::uint16_t port, std::string name)
    : host_(std::move(host)), port_(port), token_key_(name + ":highest-token"), value_key_(name + ":value") {}

bool FencedStore::write(std::uint64_t token, const std::string& value) const {
  const RedisReplyPtr reply = run(host_, port_, {"EVAL", kWriteScript, "2", token_key_, value_key_, std::to_string(token), value});
  if (reply->type != REDIS_REPLY_INTEGER) {
    throw std::runtime_error("FencedStore::write: " + std::string(reply->str ? reply->str : "unexpected reply"));
  }
  return reply->integer == 1;
}

std::uint64_t FencedStore::highest_token() const {
  const RedisReplyPtr reply = run(host_, port_, {"GET", token_key_});
  return reply->type == REDIS_REPLY_STRING ? std::stoull(std::string(reply->str, reply->len)) : 0;
}

std::string FencedStore::value() const {
  const RedisReplyPtr reply = run(host_, port_, {"GET", value_key_});
  return reply->type == REDIS_REPLY_STRING ? std::string(reply->str, reply->len) : std::string();
}

}  // namespace redlock::support

#include "support/fenced_store.h"

#include <stdexcept>

namespace redlock::support {
namespace {

constexpr const char* kWriteScript =
    "local highest = tonumber(redis.call('GET', KEYS[1]) or '0') "
    "local token = tonumber(ARGV[1]) "
    "if token < highest then return 0 end "
    "redis.call('SET', KEYS[1], ARGV[1]) "
    "redis.call('SET', KEYS[2], ARGV[2]) "
    "return 1";

}  // namespace

FencedStore::FencedStore(const RedisServer& server, std::string name)
    : server_(server), token_key_(name + ":highest-token"), value_key_(name + ":value") {}

bool FencedStore::write(std::uint64_t token, const std::string& value) const {
  const Reply reply =
      server_.command({"EVAL", kWriteScript, "2", token_key_, value_key_, std::to_string(token), value});
  if (reply.type != Reply::Type::integer) throw std::runtime_error("FencedStore::write: " + reply.str);
  return reply.integer == 1;
}

std::uint64_t FencedStore::highest_token() const {
  const Reply reply = server_.command({"GET", token_key_});
  return reply.type == Reply::Type::string ? std::stoull(reply.str) : 0;
}

std::string FencedStore::value() const { return server_.command({"GET", value_key_}).str; }

}  // namespace redlock::support

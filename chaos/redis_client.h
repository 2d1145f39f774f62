// chaos/redis_client.h — plain hiredis for the strategies the library does not implement
// (failover, the seeds' broken locks). Blocking, one connection, 300 ms timeouts.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <vector>

namespace redlock::chaos {

struct RedisContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisConnection = std::unique_ptr<redisContext, RedisContextDeleter>;
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

// nullptr when the connection failed.
[[nodiscard]] RedisConnection connect_to(int port);
// nullptr on an I/O error (the connection is then unusable).
[[nodiscard]] RedisReplyPtr run_command(redisContext* c, const std::vector<std::string>& argv);
[[nodiscard]] inline std::string reply_text(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : std::string();
}

}  // namespace redlock::chaos

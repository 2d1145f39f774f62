// SPDX-License-Identifier: Apache-2.0
// chaos/redis_client.h — plain hiredis for the strategies the library does not implement
// (failover, the seeds' broken locks). Blocking, one connection, 300 ms timeouts.
#pragma once

#include <string>
#include <vector>

#include "support/hiredis_handle.h"

namespace redlock::chaos {

using RedisConnection = support::RedisContextPtr;
using support::RedisReplyPtr;

// nullptr when the connection failed.
[[nodiscard]] RedisConnection connect_to(int port);
// nullptr on an I/O error (the connection is then unusable).
[[nodiscard]] inline RedisReplyPtr run_command(redisContext* c, const std::vector<std::string>& argv) {
  return support::command_argv(*c, argv);
}
[[nodiscard]] inline std::string reply_text(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : std::string();
}

}  // namespace redlock::chaos

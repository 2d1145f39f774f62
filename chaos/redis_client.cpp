// SPDX-License-Identifier: Apache-2.0
#include "redis_client.h"

namespace redlock::chaos {

RedisConnection connect_to(int port) {
  using namespace std::chrono_literals;
  const timeval timeout = support::to_timeval(300ms);
  RedisConnection c(redisConnectWithTimeout("127.0.0.1", port, timeout));
  if (!c || c->err) return nullptr;
  redisSetTimeout(c.get(), timeout);
  return c;
}

}  // namespace redlock::chaos

#include "redis_client.h"

#include <sys/time.h>

namespace redlock::chaos {

RedisConnection connect_to(int port) {
  const timeval timeout{0, 300'000};
  RedisConnection c(redisConnectWithTimeout("127.0.0.1", port, timeout));
  if (!c || c->err) return nullptr;
  redisSetTimeout(c.get(), timeout);
  return c;
}

RedisReplyPtr run_command(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<std::size_t> lengths;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  return RedisReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lengths.data())));
}

}  // namespace redlock::chaos

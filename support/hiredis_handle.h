// SPDX-License-Identifier: Apache-2.0
// redlock::support — owning handles for blocking hiredis connections and replies, shared by
// the test tooling (support/, tests/, chaos/). Header-only; whoever includes it links hiredis
// itself (redlock_support keeps hiredis private).
#pragma once

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace redlock::support {

struct RedisContextDeleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
struct RedisReplyDeleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

[[nodiscard]] inline timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

// One command, binary-safe arguments. nullptr on an I/O error (the connection is then unusable).
[[nodiscard]] inline RedisReplyPtr command_argv(redisContext& context, const std::vector<std::string>& argv) {
  std::vector<const char*> pointers;
  std::vector<std::size_t> lengths;
  pointers.reserve(argv.size());
  lengths.reserve(argv.size());
  for (const auto& arg : argv) {
    pointers.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  return RedisReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(&context, static_cast<int>(argv.size()), pointers.data(), lengths.data())));
}

}  // namespace redlock::support

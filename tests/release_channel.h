// SPDX-License-Identifier: Apache-2.0
// Test helpers for the release announcements (docs/design.md "Waiting"): how many subscribers a
// key's channel has on a master, and a flood of forged announcements on it (what any client with
// the locker's ACL, or a hostile master, can send).
#pragma once

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "support/hiredis_handle.h"
#include "support/redis_server.h"

namespace redlock::testing {

inline std::string release_channel(const std::string& key) { return "redlock-released:" + key; }

// PUBSUB NUMSUB of the key's release channel on `server`.
inline long long channel_subscribers(support::RedisServer& server, const std::string& key) {
  const support::Reply numsub = server.command({"PUBSUB", "NUMSUB", release_channel(key)});
  return numsub.elements.size() == 2 ? numsub.elements[1].integer : 0;
}

// PUBLISHes on the key's release channel from a thread of its own until destroyed: `batch`
// pipelined commands, their replies read, then `pause`, again.
class PublishFlood {
 public:
  PublishFlood(std::uint16_t port, const std::string& key, int batch, std::chrono::microseconds pause)
      : thread_([this, port, channel = release_channel(key), batch, pause](const std::stop_token& stop) {
          support::RedisContextPtr context(redisConnect("127.0.0.1", port));
          if (!context || context->err) return;
          while (!stop.stop_requested()) {
            for (int i = 0; i < batch; ++i) redisAppendCommand(context.get(), "PUBLISH %s released", channel.c_str());
            for (int i = 0; i < batch; ++i) {
              void* reply = nullptr;
              if (redisGetReply(context.get(), &reply) != REDIS_OK) return;
              freeReplyObject(reply);
            }
            published_ += batch;
            if (pause.count() > 0) std::this_thread::sleep_for(pause);
          }
        }) {}

  // Stops and joins; then published() is final.
  void stop() {
    thread_.request_stop();
    if (thread_.joinable()) thread_.join();
  }
  [[nodiscard]] long long published() const { return published_.load(); }

 private:
  std::atomic<long long> published_{0};
  std::jthread thread_;  // last: started once published_ exists, joined before it goes
};

}  // namespace redlock::testing

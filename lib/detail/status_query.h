// SPDX-License-Identifier: Apache-2.0
// detail/status_query.h — one `Client::status` query (redlock/status.h): a pipelined batch
// of read-only commands to every master, answered within command_timeout, read together
// with what the MasterSet knows about each master (handshake, permissions, restart guard).
//
// Commands go through Connection::send like a round's, so a master still connecting gets
// them after its handshake (never before), and a frozen one costs one deadline. Replies
// after the deadline are dropped. Loop thread only (construction excepted).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "detail/event_loop.h"
#include "redlock/status.h"

struct redisReply;

namespace redlock::detail {

class Diagnostics;
class MasterSet;

class StatusQuery final : public std::enable_shared_from_this<StatusQuery> {
 public:
  using Done = std::function<void(FleetStatus)>;

  // `resource`/`key`: the resource to report holders of (key = prefix + resource), if any.
  StatusQuery(EventLoop& loop, MasterSet& masters, const Diagnostics& diagnostics, std::chrono::milliseconds timeout,
              std::optional<std::string> resource, std::string key, std::string fence_key, Done done);

  // Sends to every master and arms the deadline; may finish before it returns.
  void start();
  // Answers `done` with what has come (a master that has not answered is unreachable), once:
  // at the last reply, at the deadline, or at ~Client (ClientImpl::shutdown: a master's
  // replies past the deadline may have been given up, Connection::release_late_sinks, and
  // the deadline's task is dropped with the loop). Idempotent.
  void finish();

 private:
  class MasterSink;
  // Per master, in send order. Each reply is read as it arrives (hiredis frees it after).
  enum Command : std::uint32_t { kTime, kInfoReplication, kInfoServer, kGet, kPttl };
  struct Pending {
    std::uint32_t sent = 0;      // commands queued
    std::uint32_t answered = 0;  // replies (or failures) received
    std::string failure;         // the connection's reason when no reply will come
    bool connected_before = false;
    std::uint64_t first_reply_ns = 0;
    std::chrono::system_clock::time_point wall_after;
    MasterReport report;
  };

  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure);
  void read(std::uint32_t index, Command command, const redisReply& reply);
  [[nodiscard]] bool everyone_answered() const;
  void assess(std::uint32_t index, const std::vector<MasterReport>& earlier, MasterReport& report) const;
  void summarize_resource(FleetStatus& status) const;

  EventLoop& loop_;
  MasterSet& masters_;
  const Diagnostics& diagnostics_;
  const std::chrono::milliseconds timeout_;
  const std::optional<std::string> resource_;
  const std::string key_;
  const std::string fence_key_;
  Done done_;
  std::vector<Pending> pending_;
  std::vector<std::string> tokens_;  // per master: the whole value of the key (never reported)
  std::uint64_t sent_ns_ = 0;
  std::chrono::system_clock::time_point wall_before_;
  EventLoop::TimerId deadline_timer_ = 0;
  bool finished_ = false;
};

}  // namespace redlock::detail

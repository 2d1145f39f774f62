// SPDX-License-Identifier: Apache-2.0
// detail/owed_releases.h — releases a master's connection refused or lost, sent again once
// it is back.
//
// A release refused by a master's connection (down, between reconnects) or lost with it (the
// connection dropped before the reply) would leave that master the key until its ttl, though
// the lock was given up: the next acquires there read held_by_other, and with a second master
// down the lock was out of reach for a whole ttl. Such a release is kept, EVAL-encoded (a
// restarted master has no script loaded), and sent again each time the connection becomes
// ready (or, for one the master answered BUSY or LOADING on a live connection, when
// MasterSet's retry timer calls on_ready), until it is answered otherwise or its time is up:
// the release round's resend_before, past which it could land after
// ClientImpl::released_here_'s window. At most kMaxPerMaster are kept per
// master; more are dropped (their keys expire by their ttl) and MasterSet warns. A release can
// only remove our own token, so sending it again, or late, takes nothing from anyone else.
// Part of the MasterSet. Loop thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace redlock::detail {

class MasterSet;

class OwedReleases {
 public:
  static constexpr std::size_t kMaxPerMaster = 1024;

  // `command_timeout`: a resent release's deadline is its send plus this, as for every command
  // (the connection waits no longer for it at ~Client).
  OwedReleases(MasterSet& masters, std::uint32_t size, std::chrono::milliseconds command_timeout);

  // Keeps `encoded` (an EVAL release) for master `index` until `until_ns` (now_ns() time);
  // nothing once that has passed. False when dropped: kMaxPerMaster are owed there already.
  bool owe(std::uint32_t index, std::string encoded, std::uint64_t until_ns);
  // Master `index`'s connection is ready: what is owed to it is sent now.
  void on_ready(std::uint32_t index);
  [[nodiscard]] std::size_t owed(std::uint32_t index) const { return owed_[index].size(); }

 private:
  class Resend;
  struct Entry {
    std::string encoded;
    std::uint64_t until_ns = 0;
  };
  MasterSet& masters_;
  const std::chrono::milliseconds command_timeout_;
  std::vector<std::vector<Entry>> owed_;
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/owed_releases.h — releases a master's connection refused or lost, sent again once
// it is back.
//
// A release refused by a master's connection (down, between reconnects) or lost with it (the
// connection dropped before the reply) would leave that master the key until its ttl, though
// the lock was given up: the next acquires there read held_by_other, and with a second master
// down the lock was out of reach for a whole ttl. Such a release is kept, EVAL-encoded (a
// restarted master has no script loaded), and sent again each time the connection becomes
// ready, until it is answered otherwise or its time is up:
// the release round's resend_before, past which it could land after
// ClientImpl::released_here_'s window. At most kMaxPerMaster are kept per
// master; more are dropped (their keys expire by their ttl) and MasterSet warns. Those the
// master answered BUSY or LOADING on a live connection wait for MasterSet's retry timer, which
// sends one of them each period (probe) and all of them once that one is answered otherwise:
// a master BUSY, or LOADING for minutes, is not sent every owed release every period. A release
// can only remove our own token, so sending it again, twice, or late, takes nothing from anyone
// else.
// Part of the MasterSet. Loop thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::detail {

class LockState;
class MasterSet;
class ReplySink;

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
  // Master `index` answered BUSY or LOADING: a copy of the first release owed to it is sent,
  // unless the last one is still unanswered; answered otherwise, everything owed there is sent
  // (on_ready), that one again too. Answered BUSY or LOADING, or lost, nothing more.
  void probe(std::uint32_t index);
  [[nodiscard]] std::size_t owed(std::uint32_t index) const { return owed_[index].size(); }
  // A stand-in for a release round's sink at master `index`, which the connection gives up once
  // the command is past its deadline under a backlog (Connection::release_late_sinks): the key
  // and token, so that the connection's loss, or an answer read late that says the release did
  // not run, still owes it until `until_ns`: NOSCRIPT (sent again with EVAL at once, as the
  // round would), BUSY or LOADING where `state` (the lock's; null: unknown) records a grant there
  // when the answer comes (review 69: read earlier, before the late BUSY of the lock's own SET,
  // stand-ins owed releases of SETs that never ran and crowded a held lock's release out).
  // Without it such a release was lost, and its key stayed for its ttl. At most kMaxPerMaster
  // stand-ins live per master (OwedReleases::Resend's too), as many as can be owed there: past
  // that, null (given up as before; a frozen master's backlog stays as small).
  [[nodiscard]] std::shared_ptr<ReplySink> late_release(std::uint32_t index, std::string_view key,
                                                        std::string_view token, std::uint64_t until_ns,
                                                        std::shared_ptr<const LockState> state);

 private:
  class Resend;
  class Probe;
  class LateRelease;
  // A stand-in's place under the cap (late_release): false when kMaxPerMaster are live there.
  bool take_stand_in(std::uint32_t index);
  void give_back_stand_in(std::uint32_t index) { --stand_ins_[index]; }
  struct Entry {
    std::string encoded;
    std::uint64_t until_ns = 0;
  };
  MasterSet& masters_;
  const std::chrono::milliseconds command_timeout_;
  std::vector<std::vector<Entry>> owed_;
  std::vector<std::weak_ptr<Probe>> probes_;  // per master: the last probe, while unanswered
  std::vector<std::size_t> stand_ins_;        // per master: live stand-ins (take_stand_in)
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/restart_guard.h — the restart guard: which incarnation of each master this Client
// talks to, when a master's grants count as votes, and which held locks lose a master's
// vote when it restarts (README "Restart guard", docs/design.md).
//
// A master that restarted without its keys would grant a lock another client still holds;
// so its grants are not votes until it has been up longer than max_lock_ttl (the age rule),
// unless this Client saw it restart from a durable incarnation (counted at once). A restart
// takes the master's votes away from held locks unless it kept its keys; a lock left below
// quorum is lost. Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "detail/lock_state.h"
#include "detail/server_info.h"

namespace redlock::detail {

// What the Client knows about one master's current incarnation (one run_id).
struct Incarnation {
  std::string run_id;           // of the last connection that completed its handshake
  std::uint32_t epoch = 0;      // bumps whenever run_id changes; 0 = never connected
  std::uint64_t seen_ns = 0;    // loop time when this Client first saw this run_id
  // The latest instant (loop time) this incarnation can have started: from uptime, and once
  // this Client has seen the run_id change, never before it saw the new one. Only moves later.
  std::uint64_t started_ns = 0;
  bool durable = false;         // appendonly yes + appendfsync always, as first seen
  // Loop time of the last read that showed this incarnation durable (a handshake, or the
  // durability read MasterSet sends every second): what this Client knows of its durability
  // ends there (AOF may be switched off after it).
  std::uint64_t durable_seen_ns = 0;
  // A connection to this incarnation completed its handshake and has not been lost since.
  bool connected = false;
  // Loop time when such a connection was last lost: the last moment this Client knew the
  // incarnation alive. A durable successor that started before it is another server that took
  // over the address (a failover), not this one restarted.
  std::uint64_t lost_ns = 0;
  // Counted before the age rule allows: only an incarnation this Client saw come from a
  // durable one by a restart (so it reloaded what was granted). A first contact, or a master
  // that was not durable before its restart, may have come back empty: the age rule applies.
  bool counted_at_once = false;
  // Its role, as last read (a handshake, or the read MasterSet sends every second): a replica
  // takes its keys from its master at every full resync, run_id and connections unchanged.
  bool replica = false;
  // Loop time of the last read that showed it a replica, or that its keys may have been
  // replaced since the read before (0 = never): its grants count once max_lock_ttl has passed
  // since (the age rule, from then on).
  std::uint64_t replica_seen_ns = 0;
  std::string replid;  // master_replid as last read, in this incarnation ("" = unknown)
  // Why replica_seen_ns was last moved by something other than the role ("" = the role): the
  // keyspace mark found absent or changed (keys_replaced).
  std::string replaced_because;
  // The keyspace mark's id as last learned (restart guard on; "" = not known yet, or being
  // learned again after it changed). Kept across run_ids: a restart that kept its keys kept it.
  std::string mark;
  // Moves whenever `mark` does (an acquire answered "mark changed" tells news only if it was
  // sent with the mark still known: MasterSet::mark_changed).
  std::uint32_t mark_generation = 0;
  // The mark was forgotten (keys replaced) or read absent or unreadable (a first contact's
  // read included): whatever mark is learned next, created or found, was made at an unknown
  // time after that.
  bool mark_lost = false;
};

class RestartGuard {
 public:
  // A restart keeps its votes and counts at once only if the new incarnation started within
  // this long after this Client last read the old one durable: one durability read interval,
  // the 2 s uptime can over-report, and 2 s to restart. Or within max_lock_ttl, if that is
  // shorter (RestartGuard::observe: an empty incarnation in between).
  static constexpr std::uint64_t kDurableReadGapNs = 5'000'000'000;

  RestartGuard(std::uint32_t size, std::uint32_t quorum, bool enabled, std::chrono::milliseconds max_lock_ttl);

  // A connection to master `index` completed its handshake and read `info`. Returns true
  // when `info` shows a new incarnation (a first contact, or a restart).
  bool observe(std::uint32_t index, const ServerInfo& info);
  // Master `index`'s role read (after observe() at a handshake, and again every second on a
  // live connection). Returns true when its keys may have been replaced since the last read:
  // it is a replica now and was not, it was one and is a master again, or its replication ID
  // changed (a promotion changes it; so do a first replica attached with no backlog and a
  // freed backlog, which are taken for one: a false loss). Then, as for a restart without its
  // keys, the
  // votes it gave are taken away from held locks and its grants count only once max_lock_ttl
  // has passed since it was last seen a replica.
  bool observe_role(std::uint32_t index, const ServerInfo& info);
  // Master `index`'s keyspace mark as a handshake (or a read after it changed) found it:
  // `created` (it was absent, so the keyspace may have been wiped at some earlier time, even on
  // this Client's first contact) or an id other than the one this Client knew means its keys
  // may have been replaced: keys_replaced(). Returns true then. An unknown mark ("") is
  // remembered as unknown (MasterSet::not_counted does not count the master); after a known
  // one it is keys_replaced() too. The first mark learned after one was lost (mark_lost)
  // calls keys_replaced() again, keeping the reason.
  bool observe_mark(std::uint32_t index, bool created, const std::string& mark);
  // Master `index`'s keys may have been replaced now (`why`): an acquire found its mark changed,
  // or a read did. As for a demotion: the votes it gave are taken from held locks (a lock left
  // below quorum is lost), and its grants count once max_lock_ttl has passed.
  void keys_replaced(std::uint32_t index, std::string why);
  // The mark is being learned again (after keys_replaced): unknown until observe_mark.
  void forget_mark(std::uint32_t index) {
    if (masters_[index].mark.empty()) return;
    masters_[index].mark.clear();
    masters_[index].mark_lost = true;
    ++masters_[index].mark_generation;
  }
  // A connection to master `index` was lost (after its handshake, or while trying).
  void connection_lost(std::uint32_t index);
  // Master `index`'s durability read again on a live connection to incarnation `epoch`
  // (MasterSet's periodic check), sent at `sent_ns`: not durable now means not from now on (it
  // is never turned on again before a restart); durable moves durable_seen_ns.
  void durability_read(std::uint32_t index, std::uint32_t epoch, const ServerInfo& config, std::uint64_t sent_ns);

  // Why master `index`'s grant is not a vote now (`info`: its connection's), if it is not.
  [[nodiscard]] std::optional<std::string> not_counted(std::uint32_t index, const ServerInfo& info) const;
  // When not_counted() says no only because of the age rule: how long until it will say
  // yes (nanoseconds, > 0). nullopt when counted now, or not counted for another reason.
  [[nodiscard]] std::optional<std::uint64_t> counted_in_ns(std::uint32_t index, const ServerInfo& info) const;
  // Which rule counted a grant the age rule alone would not have (a durable master), if any.
  [[nodiscard]] std::optional<std::string> counted_because(std::uint32_t index) const;
  // Two configured masters that reach one server (the same run_id).
  [[nodiscard]] bool same_server(std::uint32_t a, std::uint32_t b) const;
  // Whether any two do (a round's per-grant check is skipped while none do).
  [[nodiscard]] bool any_same_server() const noexcept { return any_same_server_; }

  [[nodiscard]] const Incarnation& incarnation(std::uint32_t index) const { return masters_[index]; }
  [[nodiscard]] bool enabled() const noexcept { return enabled_; }

  // A lock this Client granted: a later restart of its masters may take their votes away. Also
  // one it made its own by extending an adopted copy (no epochs: only released_elsewhere
  // finds it).
  void remember(const std::shared_ptr<LockState>& state);
  // The lock owner_of(key, token) was released through a copy without this Client's state (an
  // adopted one), or its states are several (one made by extending an adopted copy): its
  // remembered states are given up (released, their leases told `taken`).
  void released_elsewhere(std::uint64_t owner);

 private:
  void forget_votes_of(std::uint32_t index);
  void carry_votes_of(std::uint32_t index, std::uint32_t previous_epoch);

  const std::uint32_t quorum_;
  const bool enabled_;
  const std::uint64_t guard_ns_;  // counted once up longer than this (max_lock_ttl)
  std::vector<Incarnation> masters_;
  bool any_same_server_ = false;  // recomputed whenever a run_id changes
  std::vector<std::weak_ptr<LockState>> live_locks_;  // swept when it doubles
  std::size_t live_locks_sweep_at_ = 1024;
  // The live locks by LockState::owner, kept from the first released_elsewhere on (a Client
  // that never releases through adopted copies never builds it): a release then finds its
  // lock's other states at once (a review: a scan of every live lock per release took 16 s
  // to release 20,000 locks). Swept when it doubles.
  void index(const std::shared_ptr<LockState>& state);
  std::unordered_multimap<std::uint64_t, std::weak_ptr<LockState>> by_owner_;
  bool by_owner_kept_ = false;
  std::size_t by_owner_sweep_at_ = 1024;
};

}  // namespace redlock::detail

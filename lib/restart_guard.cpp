// SPDX-License-Identifier: Apache-2.0
// The restart guard (detail/restart_guard.h).
#include "detail/restart_guard.h"

#include <algorithm>
#include <utility>

#include "detail/loop_time.h"
#include "detail/sweep.h"

namespace redlock::detail {

RestartGuard::RestartGuard(std::uint32_t size, std::uint32_t quorum, bool enabled,
                           std::chrono::milliseconds max_lock_ttl)
    : quorum_(quorum), enabled_(enabled), guard_ns_(to_ns(max_lock_ttl)), masters_(size) {}

bool RestartGuard::observe(std::uint32_t index, const ServerInfo& info) {
  Incarnation& master = masters_[index];
  const bool new_incarnation = !info.run_id.empty() && info.run_id != master.run_id;
  if (new_incarnation) {
    const bool restarted = !master.run_id.empty();
    // Keys survive a restart only if the incarnation that granted them was durable, and
    // the new one loaded its AOF (same configuration): both must say so. And only a restart
    // keeps them: a server up since before this Client last knew the old one alive took over
    // the address (RestartGuardTest.ADurableServerTakingOverTheAddressIsNotCountedAtOnce).
    // info.started_ns is the latest the new one can have started (uptime is in whole seconds:
    // a server started up to about 2 s before the loss still passes).
    // And only if this Client knew the old one durable until shortly before the new one started
    // (durability switched off while this Client was cut off from it, or while reads went
    // unanswered, is not seen: RestartGuardTest.ADurableMasterRestartedLongAfterThisClientLostItIsNotCountedAtOnce).
    // The new one must also have had AOF on from its start: one started with appendonly no is
    // empty, whatever CONFIG SET made of it before this first reading
    // (RestartGuardTest.ADurableMasterRestartedEmptyWithAofSwitchedOnLaterIsNotCountedAtOnce).
    // And no sooner than an incarnation this Client never saw could have granted in between: one
    // started empty (appendonly no) and then replaced by a durable one loading the old AOF
    // (review 54: a Client cut off meanwhile counted that restart at once and was granted
    // while another Client held the lock the empty one gave it, 6 of 6). An empty incarnation
    // counts only once it is max_lock_ttl old (the age rule), so a restart later than that
    // after the last durable read is judged by the age rule too. (This Client's max_lock_ttl:
    // one with a shorter one counts an empty incarnation sooner.)
    const bool kept_keys = master.durable && info.aof_since_start() && info.started_ns >= master.lost_ns &&
                           info.started_ns <= master.durable_seen_ns + std::min(kDurableReadGapNs, guard_ns_);
    const std::uint64_t now = now_ns();
    master.run_id = info.run_id;
    any_same_server_ = false;
    for (std::uint32_t a = 0; a < masters_.size(); ++a) {
      for (std::uint32_t b = a + 1; b < masters_.size(); ++b) any_same_server_ = any_same_server_ || same_server(a, b);
    }
    ++master.epoch;
    master.seen_ns = now;
    // A restart this Client saw: its age counts from the moment the Client saw it, on the
    // Client's own monotonic clock (or from uptime, if that is stricter). A wall-clock step
    // on the restarted master would otherwise make it look old at once. A first contact has
    // only uptime to go on.
    master.started_ns = restarted ? std::max(info.started_ns, now) : info.started_ns;
    // Judged once per incarnation, as first seen: AOF switched on at run time holds the old
    // keys only after its first rewrite, so an incarnation seen not durable, or with a rewrite
    // running or scheduled (it may be that first one), is not durable for its next restart.
    master.durable = info.durable() && info.aof_rewrites >= 0 && !info.aof_rewriting;
    // Switching AOF on at a restart does not bring back what the empty server forgot.
    master.counted_at_once = kept_keys;
    // observe_role reads the new incarnation's role afresh.
    master.replica = false;
    master.replid.clear();
    if (restarted && enabled_) {
      if (kept_keys) {
        carry_votes_of(index, master.epoch - 1);
      } else {
        forget_votes_of(index);
      }
    }
  } else if (!info.run_id.empty()) {
    // Same incarnation, read again: its start can only be later than we thought, never
    // earlier (a forward wall-clock step would make uptime say otherwise).
    master.started_ns = std::max(master.started_ns, info.started_ns);
  }
  if (!info.durable()) master.durable = master.counted_at_once = false;  // durability switched off: from now on
  if (master.durable) master.durable_seen_ns = now_ns();
  master.connected = true;
  return new_incarnation;
}

bool RestartGuard::observe_role(std::uint32_t index, const ServerInfo& info) {
  Incarnation& master = masters_[index];
  bool replaced = false;
  if (info.role.empty()) return false;  // INFO replication refused, say: the next read compares
  if (info.role == "replica") {
    replaced = !master.replica;
    master.replica = true;
  } else if (info.role == "master") {
    // Read every second on a live connection, a demotion is mostly seen as the role itself.
    // One between two reads, or while the reads were cut off, refused or held up, is read from
    // the replication ID, which a promotion changes: any change counts. Telling a promotion
    // from a master's own new ID (its first replica attached with no backlog, its backlog
    // freed after repl-backlog-ttl) by master_replid2 failed three ways in reviews, each two
    // holders: a freed backlog zeroes replid2, across a reconnect, a refused read, or a read
    // held up by CLIENT PAUSE. Those benign changes now cost a false loss (availability).
    const bool id_changed = !master.replid.empty() && !info.replid.empty() && info.replid != master.replid;
    replaced = master.replica || id_changed;
    master.replica = false;
  }
  if (!info.replid.empty()) master.replid = info.replid;
  if (master.replica || replaced) {
    master.replica_seen_ns = now_ns();
    master.replaced_because.clear();
  }
  if (!replaced) return false;
  // Like a restart without its keys: a new epoch, the old one's votes taken away, and what
  // was known of its durability gone (its AOF now holds another server's keys).
  ++master.epoch;
  master.durable = master.counted_at_once = false;
  if (enabled_) forget_votes_of(index);
  return true;
}

bool RestartGuard::observe_mark(std::uint32_t index, bool created, const std::string& mark) {
  if (!enabled_) return false;
  Incarnation& master = masters_[index];
  const bool changed = !master.mark.empty() && mark != master.mark;
  if (mark != master.mark) ++master.mark_generation;
  master.mark = mark;
  if (mark.empty()) {  // unknown: not counted (MasterSet::not_counted)
    // Read absent or unreadable: whatever mark is learned next was made after this read, so it
    // starts the guard (mark_lost), a first contact's included. Before, a first contact that read
    // a wiped master unmarked and could not set it (OOM) counted the mark another Client set
    // later at once (review 74: two holders, 9 of 9; KeyspaceMarkRelearnTest).
    master.mark_lost = true;
    if (!changed) return false;
    // A known mark read absent (or unreadable) and not set again (SET NX refused: OOM, ACL):
    // keys replaced now, as for a changed one. Before, it only became unknown: no votes were
    // taken from held locks (AHolderHearsAWipeWhoseMarkCannotBeSetAgain).
    keys_replaced(index, "keyspace mark absent and not set again (a wipe)");
    return true;
  }
  // A mark learned after this Client lost the one it knew (a wipe seen, a known mark read
  // absent) starts the guard again, created here or found: a second wipe while no mark was
  // known, re-marked by another Client, was missed when a late relearn found its mark (review
  // 73: two holders, KeyspaceMarkRelearnTest, 50 of 50 before). It keeps the reason the loss gave.
  const bool was_lost = std::exchange(master.mark_lost, false);
  if (!created && !changed && !was_lost) return false;
  const char* const absent = "keyspace mark absent (a wipe at an unknown time, or never marked)";
  std::string why = created ? absent : "keyspace replaced (mark changed)";
  if (was_lost) why = master.replaced_because.empty() ? absent : master.replaced_because;
  keys_replaced(index, std::move(why));
  return true;
}

void RestartGuard::keys_replaced(std::uint32_t index, std::string why) {
  Incarnation& master = masters_[index];
  master.replica_seen_ns = now_ns();
  master.replaced_because = std::move(why);
  // Like a restart without its keys: a new epoch, the old one's votes taken away. Its
  // durability stands (unlike a demotion's, observe_role): its AOF holds the wipe and what was
  // granted since, so a later restart keeps those. (Clearing it made the Client that created
  // the mark at its first contact take a durable restart for an empty one:
  // DurableMastersAreCountedAtOnceAndKeepTheirVotesAcrossRestarts lost the lock.)
  ++master.epoch;
  if (enabled_) forget_votes_of(index);
}

void RestartGuard::durability_read(std::uint32_t index, std::uint32_t epoch, const ServerInfo& config,
                                   std::uint64_t sent_ns) {
  Incarnation& master = masters_[index];
  if (master.epoch != epoch) return;
  if (!config.durable()) {
    master.durable = master.counted_at_once = false;
  } else if (master.durable) {
    master.durable_seen_ns = std::max(master.durable_seen_ns, sent_ns);
  }
}

void RestartGuard::connection_lost(std::uint32_t index) {
  Incarnation& master = masters_[index];
  // Only a connection that was ready: failed attempts to reach a restarting server (refused,
  // LOADING) say nothing of when the old one was last alive.
  if (!master.connected) return;
  master.connected = false;
  master.lost_ns = now_ns();
}

std::optional<std::string> RestartGuard::not_counted(std::uint32_t index, const ServerInfo& info) const {
  if (!enabled_) return std::nullopt;
  if (info.run_id.empty()) {
    return "restart guard cannot tell when it started: " +
           (info.error.empty() ? std::string("no INFO server yet") : info.error);
  }
  const Incarnation& master = masters_[index];
  const std::uint64_t now = now_ns();
  const std::uint64_t up_ns = now > master.started_ns ? now - master.started_ns : 0;
  if (!master.counted_at_once && up_ns <= guard_ns_) {
    return "restarted " + std::to_string(up_ns / 1'000'000'000u) + " s ago; counted after " +
           std::to_string(guard_ns_ / 1'000'000'000u) + " s (restart guard)";
  }
  const std::uint64_t since_replica_ns = now > master.replica_seen_ns ? now - master.replica_seen_ns : 0;
  if (master.replica_seen_ns != 0 && since_replica_ns <= guard_ns_ && !master.replaced_because.empty()) {
    return master.replaced_because + " " + std::to_string(since_replica_ns / 1'000'000'000u) +
           " s ago; counted after " + std::to_string(guard_ns_ / 1'000'000'000u) + " s (restart guard)";
  }
  if (master.replica_seen_ns != 0 && since_replica_ns <= guard_ns_) {
    return "a replica " + std::to_string(since_replica_ns / 1'000'000'000u) +
           " s ago (a resync replaces its keys); counted after " + std::to_string(guard_ns_ / 1'000'000'000u) +
           " s (restart guard)";
  }
  return std::nullopt;
}

std::optional<std::uint64_t> RestartGuard::counted_in_ns(std::uint32_t index, const ServerInfo& info) const {
  if (!enabled_ || info.run_id.empty()) return std::nullopt;
  const Incarnation& master = masters_[index];
  const std::uint64_t now = now_ns();
  // not_counted() counts once both ages are strictly longer than guard_ns_.
  const std::uint64_t up_ns = now > master.started_ns ? now - master.started_ns : 0;
  const std::uint64_t since_replica_ns = now > master.replica_seen_ns ? now - master.replica_seen_ns : 0;
  std::uint64_t wait_ns = 0;
  if (!master.counted_at_once && up_ns <= guard_ns_) wait_ns = guard_ns_ - up_ns + 1;
  if (master.replica_seen_ns != 0 && since_replica_ns <= guard_ns_) {
    wait_ns = std::max(wait_ns, guard_ns_ - since_replica_ns + 1);
  }
  if (wait_ns == 0) return std::nullopt;
  return wait_ns;
}

std::optional<std::string> RestartGuard::counted_because(std::uint32_t index) const {
  const Incarnation& master = masters_[index];
  if (!enabled_ || !master.counted_at_once) return std::nullopt;
  const std::uint64_t now = now_ns();
  if (now > master.started_ns && now - master.started_ns > guard_ns_) return std::nullopt;  // the age rule
  return std::string(
      "counted at once: restarted from a durable incarnation (appendonly yes, appendfsync always, "
      "no-appendfsync-on-rewrite no, AOF on since its start; restart guard)");
}

bool RestartGuard::same_server(std::uint32_t a, std::uint32_t b) const {
  return a != b && !masters_[a].run_id.empty() && masters_[a].run_id == masters_[b].run_id;
}

// The master restarted and was not durable: whatever it granted before is gone. Locks left
// below quorum are lost.
void RestartGuard::forget_votes_of(std::uint32_t index) {
  const std::uint32_t epoch = masters_[index].epoch;
  for (const auto& weak : live_locks_) {
    const auto state = weak.lock();
    if (!state || state->epochs[index] == 0 || state->epochs[index] == epoch) continue;
    state->epochs[index] = 0;
    --state->votes;
    // A lease learns at once (it posts; nothing runs inside this loop).
    if (state->votes < quorum_) state->mark_lost(LossReason::restarted);
  }
}

// The master restarted but kept every key (durable): its votes stand, in the new epoch.
void RestartGuard::carry_votes_of(std::uint32_t index, std::uint32_t previous_epoch) {
  for (const auto& weak : live_locks_) {
    const auto state = weak.lock();
    if (state && state->epochs[index] == previous_epoch) state->epochs[index] = masters_[index].epoch;
  }
}

void RestartGuard::released_elsewhere(std::uint64_t owner) {
  if (!by_owner_kept_) {
    by_owner_kept_ = true;
    for (const auto& weak : live_locks_) {
      if (const auto state = weak.lock()) index(state);
    }
  }
  const auto [first, last] = by_owner_.equal_range(owner);
  for (auto it = first; it != last; ++it) {
    const auto state = it->second.lock();
    if (!state || state->released.exchange(true, std::memory_order_acq_rel)) continue;
    if (state->on_lost) state->on_lost(LossReason::taken);  // posts: the index is not touched
  }
}

void RestartGuard::index(const std::shared_ptr<LockState>& state) {
  sweep_when_doubled(by_owner_, by_owner_sweep_at_, 1024, [](const auto& entry) { return entry.second.expired(); });
  by_owner_.emplace(state->owner, state);
}

void RestartGuard::remember(const std::shared_ptr<LockState>& state) {
  sweep_when_doubled(live_locks_, live_locks_sweep_at_, 1024,
                     [](const std::weak_ptr<LockState>& weak) { return weak.expired(); });
  live_locks_.push_back(state);
  if (by_owner_kept_) index(state);
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// What the Client knows about each master across reconnects: the restart guard (a restarted
// master's grants are not votes for one max_lock_ttl; a run_id change takes its votes away
// from held locks) and the eviction warning for the fencing counter.
#include "detail/client_impl.h"

namespace redlock::detail {

std::optional<std::string> ClientImpl::not_counted(std::uint32_t index, bool fenced) const {
  const Connection& connection = *connections_[index];
  const MasterView& view = views_[index];
  if (options_.restart_guard) {
    const auto& info = connection.server_info();
    if (info.run_id.empty()) {
      return "restart guard cannot tell when it started: " +
             (info.error.empty() ? std::string("no INFO server yet") : info.error);
    }
    const std::uint64_t now = now_ns();
    const std::uint64_t up_ns = now > view.started_ns ? now - view.started_ns : 0;
    if (!view.counted_at_once && up_ns <= guard_ns_) {
      return "restarted " + std::to_string(up_ns / 1'000'000'000u) + " s ago; counted after " +
             std::to_string(guard_ns_ / 1'000'000'000u) + " s (restart guard)";
    }
  }
  if (fenced && !view.fence_ready) {
    return "fencing counter not caught up since this master (re)started";
  }
  return std::nullopt;
}

std::optional<std::string> ClientImpl::counted_because(std::uint32_t index) const {
  const MasterView& view = views_[index];
  if (!options_.restart_guard || !view.counted_at_once) return std::nullopt;
  const std::uint64_t now = now_ns();
  if (now > view.started_ns && now - view.started_ns > guard_ns_) return std::nullopt;  // the age rule
  return std::string(
      "counted at once: restarted from a durable incarnation (appendonly yes, appendfsync always; restart guard)");
}

bool ClientImpl::same_server(std::uint32_t a, std::uint32_t b) const {
  return a != b && !views_[a].run_id.empty() && views_[a].run_id == views_[b].run_id;
}

void ClientImpl::on_master_ready(std::uint32_t index) {
  const auto& info = connections_[index]->server_info();
  MasterView& view = views_[index];
  const bool new_incarnation = !info.run_id.empty() && info.run_id != view.run_id;
  if (new_incarnation) {
    const bool restarted = !view.run_id.empty();
    // Keys survive a restart only if the incarnation that granted them was durable, and
    // the new one loaded its AOF (same configuration): both must say so.
    const bool kept_keys = view.durable && info.durable();
    const std::uint64_t now = now_ns();
    view.run_id = info.run_id;
    ++view.epoch;
    view.epoch_seen_ns = now;
    // A restart this Client saw: its age counts from the moment the Client saw it, on the
    // Client's own monotonic clock (or from uptime, if that is stricter). A wall-clock step
    // on the restarted master would otherwise make it look old at once. A first contact has
    // only uptime to go on.
    view.started_ns = restarted ? std::max(info.started_ns, now) : info.started_ns;
    // Judged once per incarnation, as first seen: AOF switched on at run time holds the old
    // keys only after its first rewrite, so it counts as durable from the next restart on.
    view.durable = info.durable();
    // Switching AOF on at a restart does not bring back what the empty server forgot.
    view.counted_at_once = kept_keys;
    view.fence_ready = false;
    view.twin_warned = false;
    if (restarted && options_.restart_guard) {
      if (kept_keys) {
        carry_votes_of(index, view.epoch - 1);
      } else {
        forget_votes_of(index);
      }
    }
    if (options_.fence_catch_up) {
      // Waits one command deadline first (docs/fencing.md, assumption A3).
      catch_up(index);
    } else {
      view.fence_ready = true;
    }
  } else if (!info.run_id.empty()) {
    // Same incarnation, read again: its start can only be later than we thought, never
    // earlier (a forward wall-clock step would make uptime say otherwise).
    view.started_ns = std::max(view.started_ns, info.started_ns);
  }
  if (!info.durable()) view.durable = view.counted_at_once = false;  // durability switched off: from now on
  warn_permissions(index);
  // A catch-up refused for want of permission waits for a reconnect that proves it.
  if (!new_incarnation && options_.fence_catch_up && !view.fence_ready) catch_up(index);
  for (std::uint32_t other = 0; other < size_; ++other) {
    if (!same_server(index, other) || view.twin_warned) continue;
    view.twin_warned = true;
    warn("masters " + names_[other] + " and " + names_[index] + " are the same server (run_id " + view.run_id +
         "): they give one vote between them; list every server once");
  }
  const auto& policy = info.maxmemory_policy;
  if (policy.rfind("allkeys-", 0) == 0) {
    warn("master " + names_[index] + " has maxmemory-policy " + policy + ": it may evict the fencing counter '" +
         options_.fence_key + "' (which never expires); use noeviction or a volatile-* policy");
  }
}

// The master restarted and was not durable: whatever it granted before is gone. Locks left
// below quorum are lost.
void ClientImpl::forget_votes_of(std::uint32_t index) {
  const std::uint32_t epoch = views_[index].epoch;
  for (const auto& weak : live_locks_) {
    const auto state = weak.lock();
    if (!state || state->epochs[index] == 0 || state->epochs[index] == epoch) continue;
    state->epochs[index] = 0;
    --state->votes;
    if (state->votes < quorum_) state->lost.store(true, std::memory_order_release);
  }
}

// The master restarted but kept every key (durable): its votes stand, in the new epoch.
void ClientImpl::carry_votes_of(std::uint32_t index, std::uint32_t previous_epoch) {
  for (const auto& weak : live_locks_) {
    const auto state = weak.lock();
    if (state && state->epochs[index] == previous_epoch) state->epochs[index] = views_[index].epoch;
  }
}

void ClientImpl::remember(const std::shared_ptr<LockState>& state) {
  if (live_locks_.size() >= live_locks_sweep_at_) {
    std::erase_if(live_locks_, [](const std::weak_ptr<LockState>& weak) { return weak.expired(); });
    live_locks_sweep_at_ = std::max<std::size_t>(1024, live_locks_.size() * 2);
  }
  live_locks_.push_back(state);
}

}  // namespace redlock::detail

bool redlock::Lock::lost() const noexcept { return state && state->lost.load(std::memory_order_acquire); }

// What the Client knows about each master across reconnects: the restart guard (a restarted
// master's grants are not votes for one max_lock_ttl; a run_id change takes its votes away
// from held locks) and the eviction warning for the fencing counter.
#include "detail/client_impl.h"

namespace redlock::detail {

std::optional<std::string> ClientImpl::not_counted(std::uint32_t index, bool fenced) const {
  const Connection& connection = *connections_[index];
  if (options_.restart_guard) {
    const auto& info = connection.server_info();
    if (info.run_id.empty()) {
      return "restart guard cannot tell when it started: " +
             (info.error.empty() ? std::string("no INFO server yet") : info.error);
    }
    const std::uint64_t up_ns = now_ns() - info.started_ns;
    if (up_ns <= guard_ns_) {
      return "restarted " + std::to_string(up_ns / 1'000'000'000u) + " s ago; counted after " +
             std::to_string(guard_ns_ / 1'000'000'000u) + " s (restart guard)";
    }
  }
  if (fenced && !views_[index].fence_ready) {
    return "fencing counter not caught up since this master (re)started";
  }
  return std::nullopt;
}

void ClientImpl::on_master_ready(std::uint32_t index) {
  const auto& info = connections_[index]->server_info();
  MasterView& view = views_[index];
  if (!info.run_id.empty() && info.run_id != view.run_id) {
    const bool restarted = !view.run_id.empty();
    view.run_id = info.run_id;
    ++view.epoch;
    view.fence_ready = false;
    if (restarted && options_.restart_guard) forget_votes_of(index);
    if (options_.fence_catch_up) {
      // Wait one command deadline first: a fencing round-2 raise that another client got
      // acknowledged before this restart has then executed on the masters we will read
      // (docs/fencing.md, assumption A3).
      const std::uint32_t epoch = view.epoch;
      loop_->schedule_after(options_.command_timeout, [this, index, epoch] {
        if (views_[index].epoch == epoch && !views_[index].fence_ready) catch_up(index);
      });
    } else {
      view.fence_ready = true;
    }
  }
  const auto& policy = info.maxmemory_policy;
  if (policy.rfind("allkeys-", 0) == 0) {
    warn("master " + names_[index] + " has maxmemory-policy " + policy + ": it may evict the fencing counter '" +
         options_.fence_key + "' (which never expires); use noeviction or a volatile-* policy");
  }
}

// The master restarted: whatever it granted before is gone (it had no persistence, or the
// guard would be off). Locks left below quorum are lost.
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

void ClientImpl::remember(const std::shared_ptr<LockState>& state) {
  if (live_locks_.size() >= live_locks_sweep_at_) {
    std::erase_if(live_locks_, [](const std::weak_ptr<LockState>& weak) { return weak.expired(); });
    live_locks_sweep_at_ = std::max<std::size_t>(1024, live_locks_.size() * 2);
  }
  live_locks_.push_back(state);
}

}  // namespace redlock::detail

bool redlock::Lock::lost() const noexcept { return state && state->lost.load(std::memory_order_acquire); }

// SPDX-License-Identifier: Apache-2.0
// One round of a lock operation (detail/round.h): send, classify each reply as a vote,
// decide early, close.
#include "detail/round.h"

#include <algorithm>

#include "detail/diagnostics.h"
#include "detail/master_set.h"

namespace redlock::detail {

Round::Round(const RoundContext& context, RoundArgs args, std::shared_ptr<LockState> extended, bool hear_everyone,
             OnDecided on_decided)
    : context_(context),
      args_(std::move(args)),
      extended_(std::move(extended)),
      hear_everyone_(hear_everyone),
      on_decided_(std::move(on_decided)),
      sent_at_(context.clock.now()),
      sent_ns_(now_ns()),
      tally_{args_.kind, context.masters.size()} {
  const std::uint32_t size = context.masters.size();
  masters_.resize(size);
  eval_sent_.resize(size);
  if (args_.kind == RoundKind::acquire && args_.fencing) counters_.resize(size);
  for (std::uint32_t i = 0; i < size; ++i) masters_[i].endpoint = context.masters.names()[i];
}

std::uint64_t Round::late_after_ns() const noexcept { return deadline_after(sent_ns_, context_.command_timeout); }

void Round::start() {
  MasterSet& masters = context_.masters;
  const std::string command = context_.commands.encode(args_, false);
  const std::uint64_t late_after = late_after_ns();
  const bool release = args_.kind == RoundKind::release;
  // A master whose user may not run the lock paths is never sent a SET, an extend or a
  // fenced acquire (a grant there could not be released). A release still goes: it can only
  // remove our own token, and the ACL may allow it.
  const bool fenced = touches_fence_counter(args_.kind, args_.fencing);
  for (std::uint32_t i = 0; i < masters.size(); ++i) {
    if (!release) {
      if (auto why = masters.not_permitted(i, fenced)) {
        record(i, MasterStatus::not_permitted, std::move(*why));
        continue;
      }
    }
    if (!masters.send(i, command, shared_from_this(), late_after, release)) {
      record(i, MasterStatus::not_connected, masters.last_error(i));
    }
  }
  evaluate();
  if (decided_) return;
  auto self = shared_from_this();
  deadline_timer_ = context_.loop.schedule_at(late_after, [self] {
    self->deadline_timer_ = 0;
    // Replies already waiting in the sockets count: read them before timing anyone out.
    self->context_.loop.after_io([self] { self->on_deadline(); });
  });
}

void Round::close() {
  decided_ = true;
  on_decided_ = nullptr;
  if (deadline_timer_ != 0) context_.loop.cancel(std::exchange(deadline_timer_, 0));
}

void Round::on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) {
  if (is_noscript(reply) && !eval_sent_[index] && (!decided_ || args_.kind == RoundKind::release)) {
    // The script cache was flushed (or the master restarted) since the handshake loaded
    // it: nothing ran. A release is answered even after the decision: it must still land.
    // A decided acquire, extend or fence round is not: its command would now run after
    // the release of a failed attempt, and plant a key nobody releases.
    resend_with_eval(index);
    return;
  }
  if (args_.kind == RoundKind::fence && reply != nullptr && !decided_ &&
      masters_[index].status == MasterStatus::pending && now_ns() > late_after_ns()) {
    // docs/fencing.md, A3: an acknowledged raise executed within one command deadline of
    // being sent. A reply read later (the loop was busy, the master slow) may have executed
    // later too, so it is not an acknowledgement, even if the deadline timer has not run yet.
    record(index, MasterStatus::timeout,
           "acknowledged after the " + std::to_string(context_.command_timeout.count()) +
               " ms deadline: a fencing round counts only replies read in time");
    evaluate();
    return;
  }
  if (decided_ || masters_[index].status != MasterStatus::pending) {
    // Late: the round was decided (or this master timed out) first. For a failed acquire
    // the release was sent to this master after the SET, on the same connection, so it
    // runs after it: a late grant is already being undone. A late grant of a successful
    // acquire still strengthens the lock: remember it for the restart guard.
    if (granted_ && reply != nullptr && !is_noscript(reply)) {
      std::string error;
      if (classify(index, reply, error) == MasterStatus::ok && granted_->epochs[index] == 0) {
        granted_->epochs[index] = context_.masters.incarnation(index).epoch;
        ++granted_->votes;
      }
    }
    return;
  }
  if (reply == nullptr) {
    // Queued before the handshake, then refused by the permission check: never sent.
    if (auto why = context_.masters.not_permitted(index, touches_fence_counter(args_.kind, args_.fencing))) {
      record(index, MasterStatus::not_permitted, std::move(*why));
    } else {
      record(index, MasterStatus::not_connected, std::string(failure));
    }
  } else {
    std::string error;
    const MasterStatus status = classify(index, reply, error);
    record(index, status, std::move(error));
  }
  evaluate();
}

// What one reply means for this round's kind. A grant from a master the restart guard (or
// the fencing catch-up) does not count yet is `not_counted`.
MasterStatus Round::classify(std::uint32_t index, const redisReply* reply, std::string& error) {
  ReplyVote vote = classify_reply(args_.kind, args_.fencing, args_.fence, *reply);
  if (vote.status == MasterStatus::ok && args_.kind == RoundKind::acquire && args_.fencing) {
    counters_[index] = vote.counter;
  }
  if (vote.status != MasterStatus::ok || args_.kind == RoundKind::release) {
    error = std::move(vote.error);
    return vote.status;
  }

  // A grant (acquire, extend, fence): is it a vote?
  const MasterSet& masters = context_.masters;
  if (auto why = masters.not_counted(index, touches_fence_counter(args_.kind, args_.fencing))) {
    error = std::move(*why);
    return MasterStatus::not_counted;
  }
  if (twin_voted(index)) {
    error = "same server (run_id " + masters.incarnation(index).run_id + ") as another master that already voted";
    return MasterStatus::not_counted;
  }
  if (args_.kind == RoundKind::extend && masters.restart_guard_enabled() && extended_ &&
      extended_->epochs[index] != masters.incarnation(index).epoch) {
    error = extended_->epochs[index] == 0 ? "did not grant this lock"
                                          : "restarted since it granted this lock (restart guard)";
    return MasterStatus::not_counted;
  }
  if (auto rule = masters.counted_because(index)) error = std::move(*rule);
  return MasterStatus::ok;
}

bool Round::twin_voted(std::uint32_t index) const {
  for (std::uint32_t other = 0; other < context_.masters.size(); ++other) {
    if (!context_.masters.same_server(index, other)) continue;
    // Before the decision the round's own rows say who voted; after it (a late reply) the
    // lock's bookkeeping does.
    if (!decided_ && masters_[other].status == MasterStatus::ok) return true;
    if (granted_ && granted_->epochs[other] != 0) return true;
  }
  return false;
}

void Round::record(std::uint32_t index, MasterStatus status, std::string error) {
  auto& master = masters_[index];
  master.status = status;
  master.error = context_.diagnostics.shown(error);
  master.latency = std::chrono::microseconds((now_ns() - sent_ns_) / 1000u);
  tally_.add(status);
}

void Round::evaluate() {
  if (decided_ || tally_.verdict() == Verdict::undecided) return;
  if (hear_everyone_ && std::any_of(masters_.begin(), masters_.end(),
                                    [](const MasterResult& m) { return m.status == MasterStatus::pending; })) {
    return;
  }
  OnDecided on_decided = std::move(on_decided_);
  close();
  if (on_decided) on_decided(*this);
}

void Round::on_deadline() {
  if (decided_) return;
  const std::string why = "no reply within " + std::to_string(context_.command_timeout.count()) + " ms";
  for (std::uint32_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].status == MasterStatus::pending) record(i, MasterStatus::timeout, why);
  }
  evaluate();
}

void Round::resend_with_eval(std::uint32_t index) {
  eval_sent_[index] = true;
  const std::string command = context_.commands.encode(args_, true);
  // A resend after the decision (a release's NOSCRIPT) is late from the start: under a
  // backlog it may be dropped like any late command.
  const bool release = args_.kind == RoundKind::release;
  if (!context_.masters.send(index, command, shared_from_this(), late_after_ns(), release) && !decided_ &&
      masters_[index].status == MasterStatus::pending) {
    record(index, MasterStatus::not_connected, context_.masters.last_error(index));
    evaluate();
  }
}

}  // namespace redlock::detail

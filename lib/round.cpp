// SPDX-License-Identifier: Apache-2.0
// One round of a lock operation: classify each master's reply as a vote, decide early.
#include <algorithm>

#include "detail/client_impl.h"

namespace redlock::detail {
namespace {


bool starts_with(const redisReply* reply, std::string_view prefix) {
  return reply->len >= prefix.size() && std::string_view(reply->str, prefix.size()) == prefix;
}

bool is_noscript(const redisReply* reply) {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR && starts_with(reply, "NOSCRIPT");
}

std::string describe_unexpected(const redisReply* reply) {
  switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return "unexpected reply '" + std::string(reply->str, std::min<std::size_t>(reply->len, 64)) + "'";
    case REDIS_REPLY_INTEGER:
      return "unexpected integer reply " + std::to_string(reply->integer);
    case REDIS_REPLY_NIL:
      return "unexpected nil reply";
    case REDIS_REPLY_ARRAY:
      return "unexpected array reply";
    default:
      return "unexpected reply type " + std::to_string(reply->type);
  }
}

}  // namespace

ReplyVote classify_reply(RoundKind kind, bool fencing, std::uint64_t fence, const redisReply& reply) {
  ReplyVote vote;
  if (reply.type == REDIS_REPLY_ERROR) {
    // A row with server_error must say what went wrong, even when the master said nothing.
    vote.error = reply.len > 0 ? std::string(reply.str, reply.len) : std::string("empty error reply");
    return vote;
  }
  const bool fenced_acquire = kind == RoundKind::acquire && fencing;
  if (kind == RoundKind::acquire && !fenced_acquire) {
    if (reply.type == REDIS_REPLY_STATUS && reply.len == 2 && starts_with(&reply, "OK")) {
      vote.status = MasterStatus::ok;
    } else if (reply.type == REDIS_REPLY_NIL) {
      vote.status = MasterStatus::held_by_other;
    }
  } else if (fenced_acquire) {
    if (reply.type == REDIS_REPLY_INTEGER && reply.integer > 0) {
      vote.status = MasterStatus::ok;
      vote.counter = reply.integer;
    } else if (reply.type == REDIS_REPLY_NIL) {
      vote.status = MasterStatus::held_by_other;
    }
  } else if (kind == RoundKind::fence) {
    if (reply.type == REDIS_REPLY_INTEGER && reply.integer >= 0 && static_cast<std::uint64_t>(reply.integer) >= fence) {
      vote.status = MasterStatus::ok;
    }
  } else if (reply.type == REDIS_REPLY_INTEGER && reply.integer >= -1 && reply.integer <= 1) {
    static constexpr MasterStatus kByValue[] = {MasterStatus::held_by_other, MasterStatus::not_found,
                                                MasterStatus::ok};
    vote.status = kByValue[reply.integer + 1];
  }
  if (vote.status == MasterStatus::server_error) vote.error = describe_unexpected(&reply);
  return vote;
}

Round::Round(ClientImpl& impl, std::shared_ptr<Operation> op, RoundKind kind, RoundArgs args)
    : impl_(impl), op_(std::move(op)), kind_(kind), args_(std::move(args)), tally_{kind, impl.size_} {
  masters_.resize(impl.size_);
  eval_sent_.resize(impl.size_);
  if (kind == RoundKind::acquire && args_.fencing) values_.resize(impl.size_);
  for (std::uint32_t i = 0; i < impl.size_; ++i) masters_[i].endpoint = impl.names_[i];
}

void Round::on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) {
  if (is_noscript(reply) && !eval_sent_[index] && (!decided_ || kind_ == RoundKind::release)) {
    // The script cache was flushed (or the master restarted) since the handshake loaded
    // it: nothing ran. A release is answered even after the decision: it must still land.
    // A decided acquire, extend or fence round is not: its command would now run after
    // the release of a failed attempt, and plant a key nobody releases.
    resend_with_eval(index);
    return;
  }
  if (kind_ == RoundKind::fence && reply != nullptr && !decided_ && masters_[index].status == MasterStatus::pending &&
      now_ns() > deadline_after(start_ns_, impl_.options_.command_timeout)) {
    // docs/fencing.md, A3: an acknowledged raise executed within one command deadline of
    // being sent. A reply read later (the loop was busy, the master slow) may have executed
    // later too, so it is not an acknowledgement, even if the deadline timer has not run yet.
    record(index, MasterStatus::timeout,
           "acknowledged after the " + std::to_string(impl_.options_.command_timeout.count()) +
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
        granted_->epochs[index] = impl_.views_[index].epoch;
        ++granted_->votes;
      }
    }
    return;
  }
  if (reply == nullptr) {
    // Queued before the handshake, then refused by the permission check: never sent.
    const bool fenced = touches_fence_counter(kind_, args_.fencing);
    if (auto why = impl_.not_permitted(index, fenced)) {
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
  ReplyVote vote = classify_reply(kind_, args_.fencing, args_.fence, *reply);
  if (vote.status == MasterStatus::ok && kind_ == RoundKind::acquire && args_.fencing) {
    values_[index] = vote.counter;
  }
  if (vote.status != MasterStatus::ok || kind_ == RoundKind::release) {
    error = std::move(vote.error);
    return vote.status;
  }

  // A grant (acquire, extend, fence): is it a vote?
  if (auto why = impl_.not_counted(index, op_->fencing)) {
    error = std::move(*why);
    return MasterStatus::not_counted;
  }
  if (twin_voted(index)) {
    error = "same server (run_id " + impl_.views_[index].run_id + ") as another master that already voted";
    return MasterStatus::not_counted;
  }
  if (kind_ == RoundKind::extend && impl_.options_.restart_guard && op_->lock.state &&
      op_->lock.state->epochs[index] != impl_.views_[index].epoch) {
    error = op_->lock.state->epochs[index] == 0 ? "did not grant this lock"
                                                : "restarted since it granted this lock (restart guard)";
    return MasterStatus::not_counted;
  }
  if (auto rule = impl_.counted_because(index)) error = std::move(*rule);
  return MasterStatus::ok;
}

bool Round::twin_voted(std::uint32_t index) const {
  for (std::uint32_t other = 0; other < impl_.size_; ++other) {
    if (!impl_.same_server(index, other)) continue;
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
  master.error = impl_.shown(error);
  master.latency = std::chrono::microseconds((now_ns() - start_ns_) / 1000u);
  tally_.add(status);
}

void Round::evaluate() {
  if (decided_ || tally_.verdict() == Verdict::undecided) return;
  // The library's own release after a failed acquire has no caller waiting: it hears every
  // master out (or its deadline), so that a refusal is warned about (warn_failed_release).
  if (op_->internal && std::any_of(masters_.begin(), masters_.end(),
                                   [](const MasterResult& m) { return m.status == MasterStatus::pending; })) {
    return;
  }
  impl_.decide(*this);
}

void Round::on_deadline() {
  if (decided_) return;
  const std::string why = "no reply within " + std::to_string(impl_.options_.command_timeout.count()) + " ms";
  for (std::uint32_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].status == MasterStatus::pending) record(i, MasterStatus::timeout, why);
  }
  evaluate();
}

void Round::resend_with_eval(std::uint32_t index) {
  eval_sent_[index] = true;
  const std::string command = impl_.encode(kind_, args_, true);
  // A resend after the decision (a release's NOSCRIPT) is late from the start: under a
  // backlog it may be dropped like any late command.
  const std::uint64_t late_after = deadline_after(start_ns_, impl_.options_.command_timeout);
  if (!impl_.connections_[index]->send(command, shared_from_this(), index, late_after, kind_ == RoundKind::release) &&
      !decided_ &&
      masters_[index].status == MasterStatus::pending) {
    record(index, MasterStatus::not_connected, impl_.connections_[index]->last_error());
    evaluate();
  }
}

}  // namespace redlock::detail

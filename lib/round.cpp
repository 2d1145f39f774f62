// SPDX-License-Identifier: Apache-2.0
// One round of a lock operation (detail/round.h): send, classify each reply as a vote,
// decide early, close.
#include "detail/round.h"

#include <hiredis/hiredis.h>

#include <algorithm>

#include "detail/diagnostics.h"
#include "detail/master_set.h"
#include "detail/server_info.h"

namespace redlock::detail {

Round::Round(const RoundContext& context, RoundArgs args, std::shared_ptr<LockState> state, bool hear_everyone,
             OnDecided on_decided)
    : context_(context),
      deadlines_(context.deadlines),
      args_(std::move(args)),
      state_(std::move(state)),
      hear_everyone_(hear_everyone),
      on_decided_(std::move(on_decided)),
      sent_at_(context.clock.now()),
      sent_ns_(now_ns()),
      tally_{args_.kind, context.masters.size()} {
  const std::uint32_t size = context.masters.size();
  masters_.resize(size);
  // A plain SET NX PX (an acquire's first attempt) runs no script and learns nothing beyond
  // its row.
  const bool plain_set =
      args_.kind == RoundKind::acquire && !args_.fencing && !args_.learn_pttl && !context.commands.keyspace_mark();
  if (!plain_set) learned_.assign(size, Learned{});
  if (args_.kind != RoundKind::release) voted_in_.assign(size, 0);
  for (std::uint32_t i = 0; i < size; ++i) masters_[i].endpoint = context.masters.names()[i];
}

Round::~Round() { deadlines_.remove(*this); }

std::uint64_t Round::late_after_ns() const noexcept { return deadline_after(sent_ns_, context_.command_timeout); }

// The Client's one encoding buffer is empty while no round is sending from it. Should a send
// ever call back into another round's start (nothing does today), that round must not
// overwrite the command still being sent to the remaining masters (they would get another
// key's SET and its OK would count as a vote here): it encodes into a buffer of its own.
std::string& Round::claim_command_buffer(std::string& own) const noexcept {
  return context_.command_buffer.empty() ? context_.command_buffer : own;
}

bool Round::marked() const noexcept { return args_.kind == RoundKind::acquire && context_.commands.keyspace_mark(); }

void Round::encode_for(std::uint32_t index, std::string& out, bool use_eval) {
  if (!marked()) {
    context_.commands.append(out, args_, use_eval);
    return;
  }
  out.clear();
  learned_[index].mark_sent = context_.masters.mark_sent(index);
  context_.commands.append(out, args_, use_eval, context_.masters.mark(index));
}

void Round::start() {
  MasterSet& masters = context_.masters;
  std::string own;
  std::string& command = claim_command_buffer(own);
  if (args_.kind == RoundKind::acquire) {
    // The room its release will take (ReleaseRoom), encoded as it would be sent.
    context_.commands.release(command, args_.key, args_.token, false);
    const std::size_t bytes = command.size();
    command.clear();
    room_ = context_.release_room.take(bytes);
    if (!room_) {
      refuse_for_room(bytes);
      return;
    }
  }
  // An acquire checking the keyspace mark is encoded for each master (each has its own id).
  const bool per_master = marked();
  if (!per_master) context_.commands.append(command, args_, false);
  const std::uint64_t late_after = late_after_ns();
  const bool release = args_.kind == RoundKind::release;
  // A failed attempt's release (hear_everyone_): its attempt's room covers it (ReleaseRoom).
  const bool covered = release && hear_everyone_;
  // A master whose user may not run the lock paths is never sent a SET, an extend or a
  // fenced acquire (a grant there could not be released). A release still goes: it can only
  // remove our own token, and the ACL may allow it.
  const bool fenced = touches_fence_counter(args_.kind, args_.fencing);
  const std::shared_ptr<ReplySink> self = shared_from_this();  // (once: each call locks a weak_ptr)
  for (std::uint32_t i = 0; i < masters.size(); ++i) {
    const std::uint64_t bit = std::uint64_t{1} << i;
    if (!release) {
      if (auto why = masters.not_permitted(i, fenced)) {
        record(i, MasterStatus::not_permitted, std::move(*why));
        never_sent_ |= bit;
        continue;
      }
    } else if ((args_.never_sent & bit) != 0) {
      record(i, MasterStatus::not_found,
             "not sent: the lock's SET never went to this master, so no key of it is there");
      continue;
    }
    if (per_master) encode_for(i, command, false);
    if (!masters.send(i, command, self, late_after, release, sent_ns_, covered)) {
      record(i, MasterStatus::not_connected, masters.last_error(i));
      never_sent_ |= bit;
      if (release) owe_release(i, masters.ready(i));  // ready: refused by its backlog, and no on_ready will come
      continue;
    }
    handed_over_ |= bit;
    if (!masters.ready(i)) note_reconnecting(i);
  }
  command.clear();  // free again (the capacity stays)
  evaluate();
  if (!decided_) deadlines_.add(*this);
}

// No room for this attempt's release (ReleaseRoom): its SET goes nowhere, and the round fails
// at once.
void Round::refuse_for_room(std::size_t bytes) {
  const std::string why = "not sent: the releases of this Client's acquires in flight take " +
                          std::to_string(context_.release_room.reserved()) + " bytes, and this one's " +
                          std::to_string(bytes) + " more would pass the bound of " +
                          std::to_string(ReleaseRoom::kMaxBytes) + " (too many acquires at once)";
  for (std::uint32_t i = 0; i < masters_.size(); ++i) {
    record(i, MasterStatus::not_connected, why);
    never_sent_ |= std::uint64_t{1} << i;
  }
  evaluate();
}

void Round::close() {
  decided_ = true;
  on_decided_ = nullptr;
  deadlines_.remove(*this);
}

void Round::on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) {
  // Lost with its connection (before the decision or after it): sent again once it is back.
  if (reply == nullptr && args_.kind == RoundKind::release) owe_release(index);
  // Not run there now (the master BUSY with a script, or LOADING): sent again shortly, before
  // the decision or after it, or that master kept the key for its ttl. The row says what it said.
  // Not the library's own release of a failed attempt (hear_everyone_): its SET most likely met
  // the same BUSY and left nothing there, and a loop of try-locks during one spell filled the
  // master's bound with them, so that a held lock's release was dropped (review 50). Such a
  // release warns instead (ClientImpl::warn_failed_release), as before.
  // Nor where the lock's own SET met BUSY or LOADING (nothing of it is there; a review saw a
  // loop of acquires and releases during one spell fill the bound with such releases).
  const std::uint64_t bit = std::uint64_t{1} << index;
  if (index < learned_.size() && marked() && is_mark_changed(reply)) {
    // The keyspace was wiped since this Client read the mark (restart guard): nothing was set
    // here; the master's votes are taken from held locks and its grants wait max_lock_ttl.
    context_.masters.mark_changed(index, learned_[index].mark_sent);
  }
  if (reply != nullptr && is_server_state_error(*reply)) {
    if (args_.kind == RoundKind::acquire) {
      not_run_ |= bit;
      if (granted_) granted_->not_run |= bit;  // late: the lock was granted without it
    } else if (args_.kind == RoundKind::release && !hear_everyone_ && !(state_ && (state_->not_run & bit) != 0)) {
      owe_release(index, true);
    }
  } else if (reply != nullptr && args_.kind == RoundKind::release) {
    context_.masters.owed_spell_over(index);  // it runs releases again: the next drop warns
  }
  if (reply != nullptr && is_command_refusal(*reply)) {
    // The ACL changed under the live connection (docs/permissions.md): no lock goes there
    // until the check proves the permission again. The row itself stays a server_error: a
    // script refused part way may have run the commands before the refused one. (A key the
    // user may not touch fails this round alone: AclTest.AKeyOutsideTheUsersPatternsFailsThatLockAlone.)
    context_.masters.permission_refused(index, touches_fence_counter(args_.kind, args_.fencing),
                                        std::string_view(reply->str, reply->len));
  }
  // (A NOSCRIPT answer to a plain SET, which runs no script, is a server error like any other.)
  if (is_noscript(reply) && index < learned_.size() && !learned_[index].eval_sent &&
      (!decided_ || args_.kind == RoundKind::release) &&
      (args_.resend_before == std::chrono::steady_clock::time_point::max() ||
       context_.clock.now() < args_.resend_before)) {
    // The script cache was flushed (or the master restarted) since the handshake loaded
    // it: nothing ran. A release is answered even after the decision: it must still land.
    // A decided acquire, extend or fence round is not: its command would now run after
    // the release of a failed attempt, and plant a key nobody releases. Nor is a lease's
    // renewal read after its loss moment (RoundArgs::resend_before): the holder was told
    // to stop, and the keys must not outlive their ttl for it.
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
      if (classify(index, reply, error) == MasterStatus::ok) {
        granted_->granted_on |= bit;
        if (granted_->epochs[index] == 0) {
          granted_->epochs[index] = context_.masters.incarnation(index).epoch;
          ++granted_->votes;
        }
      }
    }
    return;
  }
  if (reply == nullptr) {
    // Queued before the handshake, then refused by the permission check: never sent.
    if (auto why = context_.masters.not_permitted(index, touches_fence_counter(args_.kind, args_.fencing))) {
      record(index, MasterStatus::not_permitted, std::move(*why));
      never_sent_ |= std::uint64_t{1} << index;
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
  ReplyVote vote = classify_reply(args_.kind, args_.fencing, args_.fence, *reply, args_.learn_pttl);
  if (marked() && is_mark_changed(reply)) {
    error = std::move(vote.error);
    return MasterStatus::not_counted;
  }
  if (vote.status == MasterStatus::ok && args_.kind == RoundKind::acquire && args_.fencing) {
    learned_[index].counter = vote.counter;
  }
  if (vote.status == MasterStatus::held_by_other && args_.kind == RoundKind::acquire && args_.learn_pttl) {
    learned_[index].pttl = vote.pttl;
  }
  if (vote.status == MasterStatus::ok && args_.kind == RoundKind::release) learned_[index].receivers = vote.receivers;
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
  if (args_.kind == RoundKind::fence && (args_.granted & (std::uint64_t{1} << index)) == 0 &&
      !(state_ && state_->epochs[index] != 0)) {
    // Raised, but the attempt's SET was not granted here (in time, or late: the lock's state
    // records late grants): a later attempt may take its key here without crossing ours, so
    // its INCR would not be ordered after this raise (review 53: a later grant got a lower
    // token).
    error = "raised, but this master did not grant the attempt's SET: only a granting master's raise counts";
    return MasterStatus::not_counted;
  }
  if (twin_voted(index)) {
    error = "same server (run_id " + masters.incarnation(index).run_id + ") as another master that already voted";
    return MasterStatus::not_counted;
  }
  if (args_.kind == RoundKind::extend && masters.restart_guard_enabled() && state_ &&
      state_->epochs[index] != masters.incarnation(index).epoch) {
    error =
        state_->epochs[index] == 0 ? "did not grant this lock" : "restarted since it granted this lock (restart guard)";
    return MasterStatus::not_counted;
  }
  if (auto rule = masters.counted_because(index)) error = std::move(*rule);
  return MasterStatus::ok;
}

bool Round::twin_voted(std::uint32_t index) const {
  if (!context_.masters.any_same_server()) return false;
  for (std::uint32_t other = 0; other < context_.masters.size(); ++other) {
    if (!context_.masters.same_server(index, other)) continue;
    // Before the decision the round's own rows say who voted; after it (a late reply) the
    // lock's bookkeeping does.
    if (!decided_ && masters_[other].status == MasterStatus::ok) return true;
    if (granted_ && granted_->epochs[other] != 0) return true;
  }
  return false;
}

// The command waits for a reconnect (its connect or handshake in progress). If the row is
// still pending when the round decides, its error says so, and why the connection failed (a
// refused password, say): a pending row is otherwise read as "no news". A first connect
// leaves the row as it is: nothing has failed.
void Round::note_reconnecting(std::uint32_t index) {
  const std::string& failure = context_.masters.failed_because(index);
  if (failure.empty()) return;
  masters_[index].error = context_.diagnostics.shown("sent while reconnecting; the connection failed: " + failure);
}

void Round::record(std::uint32_t index, MasterStatus status, std::string error) {
  auto& master = masters_[index];
  master.status = status;
  master.error = context_.diagnostics.shown(error);
  master.latency = std::chrono::microseconds((now_ns() - sent_ns_) / 1000u);
  if (status == MasterStatus::ok && index < voted_in_.size()) voted_in_[index] = context_.masters.incarnations_seen(index);
  tally_.add(status);
}

void Round::evaluate() {
  if (decided_) return;
  if (tally_.verdict() == Verdict::success) take_back_stale_votes();
  if (tally_.verdict() == Verdict::undecided) return;
  if (hear_everyone_ && std::any_of(masters_.begin(), masters_.end(),
                                    [](const MasterResult& m) { return m.status == MasterStatus::pending; })) {
    return;
  }
  OnDecided on_decided = std::move(on_decided_);
  close();
  if (on_decided) on_decided(*this);
}

// A master that granted, then restarted (or reconnected while its run_id is unknown) before
// the decision, may have come back without what it granted: its vote is taken back, as the
// restart guard takes a held lock's away (RestartGuardTest.AVoteFromAMasterThatRestarted-
// BeforeTheDecisionIsTakenBack). Even a durable restart's: a rare, safe failure. Unless
// nothing would take it away from a held lock either: no restart guard, and no fencing
// counter touched (fencing catches up after every restart).
void Round::take_back_stale_votes() {
  const MasterSet& masters = context_.masters;
  if (voted_in_.size() == 0) return;  // a release: no votes to keep
  if (!masters.restart_guard_enabled() && !touches_fence_counter(args_.kind, args_.fencing)) return;
  for (std::uint32_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].status != MasterStatus::ok || voted_in_[i] == masters.incarnations_seen(i)) continue;
    --tally_.granted;
    record(i, MasterStatus::not_counted,
           "restarted after its vote, before the round's decision: what it granted may be gone");
  }
}

void Round::on_deadline() {
  if (decided_) return;
  const std::string why = "no reply within " + std::to_string(context_.command_timeout.count()) + " ms";
  for (std::uint32_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].status != MasterStatus::pending) continue;
    record(i, MasterStatus::timeout, masters_[i].error.empty() ? why : why + "; " + masters_[i].error);
  }
  evaluate();
}

void Round::resend_with_eval(std::uint32_t index) {
  learned_[index].eval_sent = true;
  // The master answered: a reconnect's note no longer applies. (After the decision the rows
  // have been taken: take_masters.)
  if (!decided_) masters_[index].error.clear();
  std::string own;
  std::string& command = claim_command_buffer(own);
  encode_for(index, command, true);
  // A resend after the decision (a release's NOSCRIPT) is late from the start: under a
  // backlog it may be dropped like any late command.
  const bool release = args_.kind == RoundKind::release;
  // Never `covered`: its attempt's room was reserved for the EVALSHA, and given back when that
  // was queued (review 62: a burst's NOSCRIPT resends, EVAL about 3.4 times the bytes, took
  // 5.7 to 7.8 MB unsent on one connection, bounded by the count alone).
  const bool sent = context_.masters.send(index, command, shared_from_this(), late_after_ns(), release);
  command.clear();
  if (!sent && release) owe_release(index, context_.masters.ready(index));  // as in start()
  if (!sent && !decided_ && masters_[index].status == MasterStatus::pending) {
    record(index, MasterStatus::not_connected, context_.masters.last_error(index));
    evaluate();
  }
}

// ~Client: this round's EVALSHA, written to master `index`, is not answered yet, and the
// lingering socket drops a NOSCRIPT answer (the masters flushed their scripts) that would have
// sent it again with EVAL: a release is sent again behind the close's SCRIPT LOAD (a review:
// written before ~Client to two masters slow to answer, its lock was left held on a quorum for
// its whole ttl). Run twice, a release deletes nothing the second time: a token is never reused.
// Any other kind that did not run leaves no key behind.
void Round::on_close_unanswered(std::uint32_t index) {
  if (args_.kind != RoundKind::release || index >= learned_.size() || learned_[index].eval_sent) return;
  if (!resend_until_ns()) return;
  std::string own;
  std::string& command = claim_command_buffer(own);
  encode_for(index, command, false);
  (void)context_.masters.send(index, command, shared_from_this(), late_after_ns(), true);
  command.clear();
}

// Past its deadline under a backlog, this release's command at master `index` gives up the
// round for a stand-in that owes it again as on_reply would: lost with the connection; answered
// NOSCRIPT (sent again with EVAL); answered BUSY or LOADING only where the lock's SET is known
// to have run (its state; none for a failed attempt's release). Until resend_before.
std::shared_ptr<ReplySink> Round::late_stand_in(std::uint32_t index) {
  if (args_.kind != RoundKind::release) return nullptr;
  const std::optional<std::uint64_t> until_ns = resend_until_ns();
  if (!until_ns) return nullptr;
  return context_.masters.late_release(index, args_.key, args_.token, *until_ns, hear_everyone_ ? nullptr : state_);
}

std::optional<std::uint64_t> Round::resend_until_ns() const {
  const auto left = args_.resend_before - context_.clock.now();
  if (left <= std::chrono::steady_clock::duration::zero()) return std::nullopt;
  return deadline_after(now_ns(),
                        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(left).count()));
}

// A release that master `index`'s connection refused or lost: sent again (EVAL: a restarted
// master has no script loaded) once the connection is back, until resend_before, the same
// limit as a NOSCRIPT answer's resend (OwedReleases). `soon`: the master answered BUSY or
// LOADING on a live connection; MasterSet's timer sends it again.
void Round::owe_release(std::uint32_t index, bool soon) {
  // Closing (~Client fails every pending command): nothing would be kept, so nothing is encoded.
  if (context_.masters.closed()) return;
  const std::optional<std::uint64_t> until_ns = resend_until_ns();
  if (!until_ns) return;
  std::string encoded;
  context_.commands.append(encoded, args_, true);
  context_.masters.owe_release(index, std::move(encoded), *until_ns, soon);
}

}  // namespace redlock::detail

namespace redlock::detail {

RoundDeadlines::~RoundDeadlines() {
  if (timer_ != 0) loop_.cancel(timer_);
  while (head_ != nullptr) remove(*head_);
}

void RoundDeadlines::add(Round& round) {
  if (round.queued_) return;
  const std::uint64_t deadline = round.late_after_ns();
  Round* before = tail_;  // the last round due no later than this one
  while (before != nullptr && before->late_after_ns() > deadline) before = before->earlier_;
  round.earlier_ = before;
  round.later_ = before != nullptr ? before->later_ : head_;
  (round.later_ != nullptr ? round.later_->earlier_ : tail_) = &round;
  (before != nullptr ? before->later_ : head_) = &round;
  round.queued_ = true;
  arm();
}

void RoundDeadlines::remove(Round& round) noexcept {
  if (!round.queued_) return;
  (round.earlier_ != nullptr ? round.earlier_->later_ : head_) = round.later_;
  (round.later_ != nullptr ? round.later_->earlier_ : tail_) = round.earlier_;
  round.earlier_ = round.later_ = nullptr;
  round.queued_ = false;
}

void RoundDeadlines::expire_all() {
  if (timer_ != 0) loop_.cancel(std::exchange(timer_, 0));
  while (head_ != nullptr) {
    // Held: timing out can finish the operation, which drops its round.
    const std::shared_ptr<Round> round = head_->shared_from_this();
    remove(*round);
    round->on_deadline();
  }
}

void RoundDeadlines::arm() {
  if (head_ == nullptr || expiring_) return;  // expire() arms once it is done
  const std::uint64_t deadline = head_->late_after_ns();
  if (timer_ != 0) {
    if (armed_for_ <= deadline) return;  // fires first; then waits for whatever is at the head
    loop_.cancel(std::exchange(timer_, 0));
  }
  armed_for_ = deadline;
  timer_ = loop_.schedule_at(deadline, [this] { on_timer(); });
}

void RoundDeadlines::on_timer() {
  timer_ = 0;
  // The rounds due by now (or by the deadline the timer was armed for: the loop fires timers
  // up to a millisecond early). The sockets are read after this moment (after_io), so these
  // rounds' replies that arrived in time count. A round whose deadline passes while the read
  // and its callbacks run is left for the next firing, which reads the sockets again first.
  due_ = std::max(armed_for_, now_ns());
  expiring_ = true;
  // Replies already waiting in the sockets count: read them before timing anyone out.
  loop_.after_io([this] { expire(); });
}

void RoundDeadlines::expire() {
  expiring_ = false;
  while (head_ != nullptr && head_->late_after_ns() <= due_) {
    // Held: timing out can finish the operation, which drops its round.
    const std::shared_ptr<Round> round = head_->shared_from_this();
    remove(*round);
    round->on_deadline();
  }
  arm();
}

}  // namespace redlock::detail

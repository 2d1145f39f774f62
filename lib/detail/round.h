// SPDX-License-Identifier: Apache-2.0
// detail/round.h — one round of a lock operation: one command to each master, the votes,
// and the deadline.
//
// A round is created with what it sends (RoundArgs) and a callback for its decision. start()
// sends to every master at once, and the round decides as soon as the votes allow either
// way (Tally), or at its deadline: one command_timeout after it was sent (RoundDeadlines).
// It then closes itself (close(): decided, out of the deadline list) and calls the callback
// once. Replies
// after the decision still reach it: a late grant of a successful acquire strengthens the
// lock (keep_late_grants), a late NOSCRIPT of a release is answered with EVAL.
// Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detail/connection.h"
#include "detail/event_loop.h"
#include "detail/lock_commands.h"
#include "detail/lock_state.h"
#include "detail/quorum.h"
#include "detail/release_room.h"
#include "detail/small_array.h"
#include "redlock/clock.h"
#include "redlock/result.h"

namespace redlock::detail {

class Diagnostics;
class MasterSet;
class Round;

// The deadlines of a Client's rounds in flight, on one loop timer. (A timer per round costs
// three allocations per round: the task holding the round, and the loop's two timer maps.)
// Every round's deadline is its send time plus the Client's one command_timeout, so rounds
// reach their deadlines in the order they were sent: they are kept in a list in deadline
// order, added at the tail (searched from there, should one ever come out of order), and
// one timer waits for the head. A round that closes early leaves the list; the timer is then
// left as it is and, when it fires, waits for the new head. When it fires, the loop first
// reads the replies already in the sockets (EventLoop::after_io), then every round whose
// deadline the timer was armed for times out (Round::on_deadline).
// Loop thread only. Must outlive every Round that uses it.
class RoundDeadlines {
 public:
  explicit RoundDeadlines(EventLoop& loop) : loop_(loop) {}
  ~RoundDeadlines();
  RoundDeadlines(const RoundDeadlines&) = delete;
  RoundDeadlines& operator=(const RoundDeadlines&) = delete;

  void add(Round& round);
  void remove(Round& round) noexcept;  // nothing if it is not in the list
  // ~Client, once every connection is closed (which failed each command whose sink it still
  // had): a round still in the list waits for replies that no connection will deliver, those
  // of commands past their deadline whose sinks a long backlog released
  // (Connection::release_late_sinks). The timer that would time it out is among the tasks
  // EventLoop::close drops, so it times out now (Round::on_deadline), once: it leaves the list
  // first, as a decided round has.
  void expire_all();

 private:
  void arm();
  void on_timer();
  void expire();

  EventLoop& loop_;
  Round* head_ = nullptr;  // earliest deadline
  Round* tail_ = nullptr;
  EventLoop::TimerId timer_ = 0;
  std::uint64_t armed_for_ = 0;  // the deadline timer_ waits for
  std::uint64_t due_ = 0;        // max(deadline the timer was armed for, when it fired); expire() times out up to it
  bool expiring_ = false;        // expire() is waiting in after_io
};

// The parts of its Client a round talks to, and nothing else.
struct RoundContext {
  EventLoop& loop;
  MasterSet& masters;
  const LockCommands& commands;
  const Diagnostics& diagnostics;
  const Clock& clock;  // the validity clock (detail/loop_time.h)
  std::chrono::milliseconds command_timeout;
  RoundDeadlines& deadlines;  // the Client's (RoundDeadlines)
  ReleaseRoom& release_room;  // the Client's: an acquire reserves its release's bytes
  // Where a round encodes its command before handing the bytes to each connection: one
  // buffer for every round of the Client, so encoding allocates nothing once it has grown.
  std::string& command_buffer;
};

class Round final : public ReplySink, public std::enable_shared_from_this<Round> {
 public:
  using OnDecided = std::function<void(Round&)>;

  // `state`: an extend's lock state (which incarnations granted it), a fencing round's (which
  // masters granted round 1, late ones included), or a release's (where its SET did not run:
  // LockState::not_run); null otherwise or for an adopted lock. `hear_everyone`: decide only once
  // every master answered or timed out (the library's own release of a failed acquire, whose refusals must be warned
  // about). Takes t0 on both time bases now: elapsed time is never under-counted.
  Round(const RoundContext& context, RoundArgs args, std::shared_ptr<LockState> state, bool hear_everyone,
        OnDecided on_decided);
  ~Round() override;
  Round(const Round&) = delete;
  Round& operator=(const Round&) = delete;

  // Sends to every master (a master whose user may not run this round's commands is not
  // sent a grant-making command) and arms the deadline. May decide before it returns.
  void start();
  // Decided, out of the deadline list, and the callback dropped: the one way a round ends
  // (its decision, or an acquire cancelled by its caller). Idempotent.
  void close();

  // The rows of the round (moved out: call once, after the decision).
  [[nodiscard]] std::vector<MasterResult> take_masters() { return std::move(masters_); }
  // Acquire that succeeded: late grants are added to `state` (for the restart guard).
  void keep_late_grants(std::shared_ptr<LockState> state) { granted_ = std::move(state); }

  [[nodiscard]] bool decided() const noexcept { return decided_; }
  [[nodiscard]] const Tally& tally() const noexcept { return tally_; }
  [[nodiscard]] const RoundArgs& args() const noexcept { return args_; }
  // An acquire or fence round, once decided: its token, moved out (never read again: only a
  // release round re-sends after its decision). The attempt's token lives in its round while
  // the round is in flight, so an acquire costs one token string, not a copy per round.
  [[nodiscard]] std::string take_token() noexcept { return std::move(args_.token); }
  [[nodiscard]] RoundKind kind() const noexcept { return args_.kind; }
  // t0 on the validity clock: a grant's validity is counted from here.
  [[nodiscard]] Clock::time_point sent_at() const noexcept { return sent_at_; }
  // Fenced acquire: master `index`'s counter after its INCR (granted masters only).
  [[nodiscard]] long long counter(std::uint32_t index) const { return learned_[index].counter; }
  // Waiting acquire (RoundArgs::learn_pttl): master `index`'s PTTL of the held key in ms, -1
  // without expiry, kPttlUnknown when it was not held by another or did not say.
  [[nodiscard]] long long pttl(std::uint32_t index) const {
    return index < learned_.size() ? learned_[index].pttl : kPttlUnknown;
  }
  // Release: how many subscribers master `index`'s announcement reached (0: none or unknown).
  [[nodiscard]] long long receivers(std::uint32_t index) const {
    return index < learned_.size() ? learned_[index].receivers : 0;
  }
  // Acquire: the masters (bit i: master i; kMaxMasters is 64) never sent the SET: start() did
  // not (not permitted, or refused by the connection: down, or its backlog over the bound), or
  // the connection dropped it unsent (queued while connecting, then not permitted).
  // Their keys cannot hold this attempt's token, so its release is not sent there
  // (RoundArgs::never_sent): a release per refused SET would use up the release reserve that
  // the releases of the SETs that went in need.
  [[nodiscard]] std::uint64_t never_sent() const noexcept { return never_sent_; }
  // Acquire: the masters (bit i: master i) that answered the SET with BUSY or LOADING before the
  // decision (LockState::not_run; later answers go to the state kept by keep_late_grants).
  [[nodiscard]] std::uint64_t not_run() const noexcept { return not_run_; }
  // The masters (bit i: master i) whose connection took the command in start(): written, or
  // held for a handshake (MasterSet::ready_set tells which were written at ~Client).
  [[nodiscard]] std::uint64_t handed_over() const noexcept { return handed_over_; }
  // Acquire: the room its release's bytes took in start() (ReleaseRoom), for its operation to
  // hold until the release is queued or the attempt granted; empty once taken, or when there
  // was no room (then the SET was sent nowhere).
  [[nodiscard]] ReleaseRoom::Ticket take_room() noexcept { return std::move(room_); }

  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) override;
  void on_close_unanswered(std::uint32_t index) override;
  std::shared_ptr<ReplySink> late_stand_in(std::uint32_t index) override;

 private:
  friend class RoundDeadlines;
  void record(std::uint32_t index, MasterStatus status, std::string error);
  void note_reconnecting(std::uint32_t index);
  void evaluate();
  void take_back_stale_votes();
  void on_deadline();
  [[nodiscard]] std::uint64_t late_after_ns() const noexcept;
  MasterStatus classify(std::uint32_t index, const redisReply* reply, std::string& error);
  // Whether another configured master that is the same server already voted in this round.
  bool twin_voted(std::uint32_t index) const;
  [[nodiscard]] std::string& claim_command_buffer(std::string& own) const noexcept;
  void resend_with_eval(std::uint32_t index);
  void owe_release(std::uint32_t index, bool soon = false);
  // now_ns() until which this release may still be sent again (resend_before); none once passed.
  [[nodiscard]] std::optional<std::uint64_t> resend_until_ns() const;
  void refuse_for_room(std::size_t bytes);

  const RoundContext& context_;
  RoundDeadlines& deadlines_;  // context_.deadlines, kept for the destructor
  RoundArgs args_;             // changed only by take_token
  const std::shared_ptr<LockState> state_;  // see the constructor
  const bool hear_everyone_;
  OnDecided on_decided_;
  const Clock::time_point sent_at_;  // validity clock
  const std::uint64_t sent_ns_;      // loop time: the deadline and each row's latency
  Tally tally_;
  std::vector<MasterResult> masters_;
  // What each master's reply said beyond its row. Empty for a plain SET NX PX.
  struct Learned {
    long long counter = 0;            // fenced acquire
    long long pttl = kPttlUnknown;    // waiting acquire
    long long receivers = 0;          // release
    bool eval_sent = false;           // NOSCRIPT already answered with EVAL
    std::uint32_t mark_sent = 0;      // acquire, keyspace mark: MasterSet::mark_sent when encoded
  };
  // An acquire with the restart guard's keyspace mark: encoded per master (its mark's id).
  [[nodiscard]] bool marked() const noexcept;
  // Encodes this round's command for master `index` into `out` (marked: with its mark).
  void encode_for(std::uint32_t index, std::string& out, bool use_eval);
  SmallArray<Learned> learned_;
  // Per master that granted: MasterSet::incarnations_seen when its grant was read.
  SmallArray<std::uint32_t> voted_in_;
  std::shared_ptr<LockState> granted_;  // see keep_late_grants
  std::uint64_t never_sent_ = 0;        // see never_sent()
  std::uint64_t not_run_ = 0;           // see not_run()
  std::uint64_t handed_over_ = 0;       // see handed_over()
  ReleaseRoom::Ticket room_;            // see take_room()
  bool decided_ = false;
  // RoundDeadlines' list (in it from start() until close()).
  bool queued_ = false;
  Round* earlier_ = nullptr;
  Round* later_ = nullptr;
};

}  // namespace redlock::detail

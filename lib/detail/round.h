// SPDX-License-Identifier: Apache-2.0
// detail/round.h — one round of a lock operation: one command to each master, the votes,
// and the deadline.
//
// A round is created with what it sends (RoundArgs) and a callback for its decision. start()
// sends to every master at once, and the round decides as soon as the votes allow either
// way (Tally), or at its deadline: one command_timeout after it was sent. It then closes
// itself (close(): decided, deadline timer cancelled) and calls the callback once. Replies
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
#include "redlock/clock.h"
#include "redlock/result.h"

namespace redlock::detail {

class Diagnostics;
class MasterSet;

// The parts of its Client a round talks to, and nothing else.
struct RoundContext {
  EventLoop& loop;
  MasterSet& masters;
  const LockCommands& commands;
  const Diagnostics& diagnostics;
  const Clock& clock;  // the validity clock (detail/loop_time.h)
  std::chrono::milliseconds command_timeout;
};

class Round final : public ReplySink, public std::enable_shared_from_this<Round> {
 public:
  using OnDecided = std::function<void(Round&)>;

  // `extended`: an extend's lock state (which incarnations granted it), null otherwise or for
  // an adopted lock. `hear_everyone`: decide only once every master answered or timed out
  // (the library's own release of a failed acquire, whose refusals must be warned about).
  // Takes t0 on both time bases now: elapsed time is never under-counted.
  Round(const RoundContext& context, RoundArgs args, std::shared_ptr<LockState> extended, bool hear_everyone,
        OnDecided on_decided);

  // Sends to every master (a master whose user may not run this round's commands is not
  // sent a grant-making command) and arms the deadline. May decide before it returns.
  void start();
  // Decided, deadline timer cancelled, and the callback dropped: the one way a round ends
  // (its decision, or an acquire cancelled by its caller). Idempotent.
  void close();

  // The rows of the round (moved out: call once, after the decision).
  [[nodiscard]] std::vector<MasterResult> take_masters() { return std::move(masters_); }
  // Acquire that succeeded: late grants are added to `state` (for the restart guard).
  void keep_late_grants(std::shared_ptr<LockState> state) { granted_ = std::move(state); }

  [[nodiscard]] bool decided() const noexcept { return decided_; }
  [[nodiscard]] const Tally& tally() const noexcept { return tally_; }
  [[nodiscard]] const RoundArgs& args() const noexcept { return args_; }
  [[nodiscard]] RoundKind kind() const noexcept { return args_.kind; }
  // t0 on the validity clock: a grant's validity is counted from here.
  [[nodiscard]] Clock::time_point sent_at() const noexcept { return sent_at_; }
  // Fenced acquire: master `index`'s counter after its INCR (granted masters only).
  [[nodiscard]] long long counter(std::uint32_t index) const { return counters_[index]; }

  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) override;

 private:
  void record(std::uint32_t index, MasterStatus status, std::string error);
  void evaluate();
  void on_deadline();
  [[nodiscard]] std::uint64_t late_after_ns() const noexcept;
  MasterStatus classify(std::uint32_t index, const redisReply* reply, std::string& error);
  // Whether another configured master that is the same server already voted in this round.
  bool twin_voted(std::uint32_t index) const;
  void resend_with_eval(std::uint32_t index);

  const RoundContext& context_;
  const RoundArgs args_;
  const std::shared_ptr<LockState> extended_;
  const bool hear_everyone_;
  OnDecided on_decided_;
  const Clock::time_point sent_at_;  // validity clock
  const std::uint64_t sent_ns_;      // loop time: the deadline and each row's latency
  Tally tally_;
  std::vector<MasterResult> masters_;
  std::vector<long long> counters_;     // fenced acquire
  std::shared_ptr<LockState> granted_;  // see keep_late_grants
  std::vector<bool> eval_sent_;         // per master: NOSCRIPT already answered with EVAL
  bool decided_ = false;
  EventLoop::TimerId deadline_timer_ = 0;
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// The fencing counter catch-up (detail/fence_catch_up.h).
#include "detail/fence_catch_up.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "detail/backoff.h"
#include "detail/event_loop.h"
#include "detail/lock_commands.h"
#include "detail/loop_time.h"
#include "detail/master_set.h"

namespace redlock::detail {

// One catch-up of one master's incarnation: read the counter on the others, raise it on the
// target, report to FenceCatchUp::finished.
class FenceCatchUp::Attempt final : public ReplySink, public std::enable_shared_from_this<Attempt> {
 public:
  Attempt(FenceCatchUp& owner, std::uint32_t target)
      : owner_(owner),
        target_(target),
        generation_(owner.masters_state_[target].generation),
        needed_(owner.reads_needed()) {}

  void start() {
    MasterSet& masters = owner_.masters_;
    const std::string get = owner_.commands_.fence_read();
    // A master known to be behind (a later incarnation, not caught up yet: it may have lost
    // its counter) is not read while enough others are connected: its empty counter, read
    // instead of one still holding the latest token, is how two restarts send tokens
    // backwards (A2; ACatchUpDoesNotReadAMasterKnownToBeBehind). With too few others
    // connected it is read as before: waiting for them could stop fencing for as long as they
    // are down (AMasterDownDoesNotStopTheCatchUpOfTwoReconnectedMasters). A master still
    // connecting counts as connected: its read is queued and answered once it is ready (counting
    // only ready ones fell back, and read the master behind, while the others reconnected).
    std::uint32_t readable = 0;
    for (std::uint32_t i = 0; i < masters.size(); ++i) {
      if (i != target_ && !owner_.known_behind(i) && masters.up_or_connecting(i)) ++readable;
    }
    skip_behind_ = readable >= needed_;
    sent_generation_.assign(masters.size(), 0);
    reads_.assign(masters.size(), Read::none);
    for (std::uint32_t i = 0; i < masters.size(); ++i) ask(i, get);
    if (asked_ < needed_) {
      finish(false);
      return;
    }
    auto self = shared_from_this();
    timer_ = owner_.loop_.schedule_after(owner_.options_.connect_timeout, [self] {
      self->timer_ = 0;
      if (!self->done_) self->finish(false);
    });
  }

  // Master `index` became ready while this try runs: its counter is read too, unless it was
  // read already or its read is on its way (a master down when the try began, or whose read
  // was lost with its connection, would otherwise be waited for by the next try: review 66,
  // 1.6 to 1.9 s after it was back with a try waiting on a frozen master).
  // Not in a try that reads masters known to be behind (too few others at its start): a
  // master coming back would make up its count with their empty or stale counters, where a new
  // try, judging again, would leave them out (review 67: tokens went backwards, 3 of 3;
  // FencingRestarts.AMasterBackMidTryDoesNotLetThatTryCountAMasterKnownToBeBehind).
  void also_read(std::uint32_t index) {
    if (done_ || raising_ || !skip_behind_ || index >= reads_.size()) return;
    if (reads_[index] == Read::none || reads_[index] == Read::failed) ask(index, owner_.commands_.fence_read());
  }

  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    if (done_) return;
    if (index == target_) {  // the raise
      finish(reply != nullptr && reply->type == REDIS_REPLY_INTEGER && fence_in_range(reply->integer) &&
             static_cast<std::uint64_t>(reply->integer) >= highest_);
      return;
    }
    ++answered_;
    if (index < reads_.size()) reads_[index] = Read::failed;  // counted below if it is a count
    // A counter that is not a plain number up to kMaxFence is not read: a hostile master's
    // value must not be written into this one. Nor one from an incarnation that began after
    // the read was sent (queued while that master reconnected: it may be empty).
    const bool current = reply != nullptr && owner_.generation(index) == sent_generation_[index];
    if (current && reply->type == REDIS_REPLY_NIL) {
      ++read_;
      reads_[index] = Read::counted;
    } else if (current && reply->type == REDIS_REPLY_STRING) {
      std::uint64_t value = 0;
      const char* end = reply->str + reply->len;
      const auto [at, error] = std::from_chars(reply->str, end, value);
      if (error == std::errc{} && at == end && reply->len > 0 && value <= kMaxFence) {
        ++read_;
        reads_[index] = Read::counted;
        highest_ = std::max(highest_, value);
      }
    }
    if (read_ == needed_ && !raising_) {
      raising_ = true;
      std::string raise;
      owner_.commands_.fence_raise(raise, highest_, true);
      if (!owner_.masters_.send(target_, raise, shared_from_this())) {
        finish(false);
      }
    } else if (answered_ == asked_ && read_ < needed_) {
      finish(false);
    }
  }

 private:
  enum class Read : std::uint8_t { none, pending, counted, failed };

  // Sends the read of master `index`'s counter, if it may be read (not the target; one known
  // to be behind only when too few others were connected at the start).
  void ask(std::uint32_t index, const std::string& get) {
    if (index == target_ || (skip_behind_ && owner_.known_behind(index))) return;
    sent_generation_[index] = owner_.generation(index);
    if (owner_.masters_.send(index, get, shared_from_this())) {
      reads_[index] = Read::pending;
      ++asked_;
    }
  }

  void finish(bool raised) {
    done_ = true;
    if (timer_ != 0) owner_.loop_.cancel(std::exchange(timer_, 0));
    owner_.finished(target_, generation_, raised);
  }

  FenceCatchUp& owner_;
  const std::uint32_t target_;
  const std::uint32_t generation_;
  const std::uint32_t needed_;
  std::vector<std::uint32_t> sent_generation_;  // each master's incarnation when its read was sent
  std::vector<Read> reads_;                     // each master's read in this try
  bool skip_behind_ = false;                    // masters known to be behind are not read
  std::uint32_t asked_ = 0;
  std::uint32_t answered_ = 0;
  std::uint32_t read_ = 0;
  std::uint64_t highest_ = 0;
  bool raising_ = false;
  bool done_ = false;
  EventLoop::TimerId timer_ = 0;
};

FenceCatchUp::FenceCatchUp(MasterSet& masters, EventLoop& loop, const LockCommands& commands,
                           const ClientOptions& options)
    : masters_(masters), loop_(loop), commands_(commands), options_(options), masters_state_(masters.size()) {}

void FenceCatchUp::on_new_incarnation(std::uint32_t index) {
  State& state = masters_state_[index];
  ++state.generation;
  state.seen_ns = now_ns();
  state.ready = false;
  state.backoff = Milliseconds{0};
  state.hurried_ns = 0;
  cancel_retry(state);  // the last incarnation's
  if (options_.fence_catch_up) {
    // Waits one command deadline first (docs/fencing.md, assumption A3).
    start(index);
  } else {
    state.ready = true;
  }
}

void FenceCatchUp::on_reconnect(std::uint32_t index, bool run_id_known) {
  if (!run_id_known) {
    on_new_incarnation(index);  // FencingRestarts.CatchUpKeepsTokensIncreasingAcrossRestartsWhenInfoIsDenied
  } else if (options_.fence_catch_up && !masters_state_[index].ready) {
    start(index);
  }
}

std::uint32_t FenceCatchUp::reads_needed() const { return masters_.size() - masters_.quorum() + 1; }

void FenceCatchUp::on_master_ready(std::uint32_t index) {
  if (!options_.fence_catch_up) return;
  const std::uint64_t now = now_ns();
  const std::uint32_t needed = reads_needed();
  for (std::uint32_t other = 0; other < masters_state_.size(); ++other) {
    State& state = masters_state_[other];
    if (other == index || state.ready) continue;
    if (state.running) {  // a try under way reads this master too
      if (const auto attempt = state.attempt.lock()) attempt->also_read(index);
      continue;
    }
    // Only a catch-up waiting out a backoff (not its first A3 wait, which start() keeps in any
    // case), and only once enough other masters are ready for a try to read: a try failing for
    // want of them spent the early try before the one it lacked came back (review 66: one of
    // two needed masters back, or another master flapping).
    if (state.retry_timer == 0 || state.backoff.count() == 0) continue;
    const std::size_t ready_others = masters_.ready_count() - (masters_.ready(other) ? 1 : 0);
    if (ready_others < needed) continue;
    const auto backoff_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(state.backoff).count());
    if (state.hurried_ns != 0 && now - state.hurried_ns < backoff_ns) continue;
    state.hurried_ns = now;
    start(other);
  }
}

void FenceCatchUp::start(std::uint32_t index) {
  State& state = masters_state_[index];
  if (masters_.size() == 1) {
    // Nothing to read from: a single master's counter is only as durable as the master.
    state.ready = true;
    return;
  }
  if (state.running || state.ready || masters_.closed()) return;
  // This user may not raise the counter here: retrying cannot help before a reconnect
  // proves otherwise (on_reconnect starts it again then).
  if (masters_.not_permitted(index, true)) return;
  // A3: the reads go out at least one command deadline after this incarnation was seen, so
  // a round-2 raise another client counted before the restart has executed where we read.
  // Every path into a catch-up (first sight, a restart during a catch-up, a retry) waits here.
  const std::uint64_t not_before = deadline_after(state.seen_ns, options_.command_timeout);
  if (now_ns() < not_before) {
    retry_at(index, not_before);
    return;
  }
  cancel_retry(state);  // this try replaces it
  state.running = true;
  const auto attempt = std::make_shared<Attempt>(*this, index);
  state.attempt = attempt;
  attempt->start();
}

void FenceCatchUp::retry_at(std::uint32_t index, std::uint64_t at) {
  State& state = masters_state_[index];
  cancel_retry(state);
  state.retry_timer = loop_.schedule_at(at, [this, index, generation = state.generation] {
    State& due = masters_state_[index];
    due.retry_timer = 0;
    if (due.generation == generation && !due.ready) start(index);
  });
}

void FenceCatchUp::cancel_retry(State& state) {
  if (state.retry_timer != 0) loop_.cancel(std::exchange(state.retry_timer, 0));
}

void FenceCatchUp::finished(std::uint32_t index, std::uint32_t generation, bool raised) {
  State& state = masters_state_[index];
  state.running = false;
  if (state.generation != generation) {  // restarted again meanwhile: catch up the new incarnation
    start(index);
    return;
  }
  if (raised) {
    state.ready = true;
    state.backoff = Milliseconds{0};
    return;
  }
  if (masters_.closed()) return;
  // Tried again with the reconnect backoff: a master answering BUSY or LOADING (for minutes,
  // loading a large dataset) was tried every reconnect_min, each try reading the counter on
  // every other master, by every Client of the fleet
  // (FaultTest.AFencingCatchUpMeetingBusyIsTriedAgainWithTheReconnectBackoff).
  state.backoff = next_backoff(state.backoff, options_.reconnect_min, options_.reconnect_max);
  retry_at(index, deadline_after(now_ns(), jittered(state.backoff)));
}

}  // namespace redlock::detail

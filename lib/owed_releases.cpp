// SPDX-License-Identifier: Apache-2.0
#include "detail/owed_releases.h"

#include <memory>
#include <optional>
#include <utility>

#include "detail/connection.h"
#include "detail/lock_commands.h"
#include "detail/lock_state.h"
#include "detail/loop_time.h"
#include "detail/master_set.h"
#include "detail/server_info.h"

namespace redlock::detail {

// One release sent again. Answered (whatever the answer), it is done; lost with the
// connection again, it is owed again (not once the set is closing: the Client is going away).
// Past its deadline under a backlog it keeps its place as its own stand-in, under the cap
// (review 69: given up, then lost with the connection a second time, nothing owed it, and 50 of
// 50 released locks' keys stayed on a quorum).
class OwedReleases::Resend final : public ReplySink, public std::enable_shared_from_this<Resend> {
 public:
  Resend(OwedReleases& owner, Entry entry) : owner_(owner), entry_(std::move(entry)) {}
  ~Resend() override {
    if (stand_in_at_) owner_.give_back_stand_in(*stand_in_at_);
  }
  Resend(const Resend&) = delete;
  Resend& operator=(const Resend&) = delete;
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    if (reply == nullptr && !owner_.masters_.closed()) (void)owner_.owe(index, std::move(entry_.encoded), entry_.until_ns);
    if (reply != nullptr && is_server_state_error(*reply)) {
      owner_.masters_.owe_release(index, std::move(entry_.encoded), entry_.until_ns, true);
    } else if (reply != nullptr) {
      owner_.masters_.owed_spell_over(index);
    }
  }
  std::shared_ptr<ReplySink> late_stand_in(std::uint32_t index) override {
    if (stand_in_at_ || !owner_.take_stand_in(index)) return nullptr;
    stand_in_at_ = index;
    return shared_from_this();
  }
  [[nodiscard]] std::string_view encoded() const noexcept { return entry_.encoded; }
  // The send was refused (the sink was not kept) by a ready connection's backlog: owed again,
  // and tried again by the retry timer (no on_ready will come for a connection that stays up).
  void owe_again(std::uint32_t index) {
    owner_.masters_.owe_release(index, std::move(entry_.encoded), entry_.until_ns, true);
  }

 private:
  OwedReleases& owner_;
  Entry entry_;
  std::optional<std::uint32_t> stand_in_at_;  // the master whose stand-in it is (take_stand_in)
};

// Asks a master that answered BUSY or LOADING whether it runs releases again, with a copy of
// one owed to it. Lost with the connection, its on_ready sends everything; answered BUSY or
// LOADING again, the retry timer asks again (one probe at a time: while this one is
// unanswered, none).
class OwedReleases::Probe final : public ReplySink {
 public:
  Probe(OwedReleases& owner, std::string encoded) : owner_(owner), encoded_(std::move(encoded)) {}
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    if (reply == nullptr || is_server_state_error(*reply) || owner_.masters_.closed()) return;
    owner_.masters_.owed_spell_over(index);
    owner_.on_ready(index);
  }
  [[nodiscard]] std::string_view encoded() const noexcept { return encoded_; }

 private:
  OwedReleases& owner_;
  std::string encoded_;
};

// Holds what the release's round held for its encoding: key and token, in one string; and the
// lock's state, read when an answer comes (late_release).
class OwedReleases::LateRelease final : public ReplySink, public std::enable_shared_from_this<LateRelease> {
 public:
  LateRelease(OwedReleases& owner, std::uint32_t index, std::string_view key, std::string_view token,
              std::uint64_t until_ns, std::shared_ptr<const LockState> state)
      : owner_(owner),
        key_and_token_(std::string(key).append(token)),
        state_(std::move(state)),
        until_ns_(until_ns),
        index_(index),
        key_size_(static_cast<std::uint32_t>(key.size())) {}
  ~LateRelease() override { owner_.give_back_stand_in(index_); }
  LateRelease(const LateRelease&) = delete;
  LateRelease& operator=(const LateRelease&) = delete;
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    MasterSet& masters = owner_.masters_;
    if (reply == nullptr) {
      if (!masters.closed()) masters.owe_release(index, encode(true), until_ns_);
    } else if (is_noscript(reply) && !eval_sent_ && until_ns_ > now_ns()) {
      // As Round::resend_with_eval: at once (owed, it waited for the retry timer, and a ~Client
      // meanwhile dropped it: review 69, 2 of 3 masters kept the key).
      eval_sent_ = true;
      if (!masters.send(index, encode(true), shared_from_this(), deadline_after(now_ns(), owner_.command_timeout_),
                        true)) {
        masters.owe_release(index, encode(true), until_ns_, masters.ready(index));
      }
    } else if (is_server_state_error(*reply)) {
      if (granted_here(index)) masters.owe_release(index, encode(true), until_ns_, true);
    } else {
      masters.owed_spell_over(index);
    }
  }
  // As Round::on_close_unanswered: EVALSHA behind the close's SCRIPT LOAD.
  void on_close_unanswered(std::uint32_t index) override {
    if (eval_sent_ || until_ns_ <= now_ns()) return;
    (void)owner_.masters_.send(index, encode(false), shared_from_this(), 0, true);
  }
  // Its EVAL resend, late in turn: it stays (counted already).
  std::shared_ptr<ReplySink> late_stand_in(std::uint32_t) override { return shared_from_this(); }

 private:
  // The lock's SET ran on master `index`: a grant is recorded there, in time or late
  // (LockState::granted_on; a BUSY or LOADING answer to the SET records none).
  [[nodiscard]] bool granted_here(std::uint32_t index) const {
    return state_ && index < 64 && (state_->granted_on & (std::uint64_t{1} << index)) != 0;
  }
  [[nodiscard]] std::string encode(bool use_eval) const {
    std::string out;
    const std::string_view both(key_and_token_);
    owner_.masters_.commands().release(out, both.substr(0, key_size_), both.substr(key_size_), use_eval);
    return out;
  }
  OwedReleases& owner_;
  std::string key_and_token_;
  std::shared_ptr<const LockState> state_;
  std::uint64_t until_ns_;
  std::uint32_t index_;
  std::uint32_t key_size_;
  bool eval_sent_ = false;
};

std::shared_ptr<ReplySink> OwedReleases::late_release(std::uint32_t index, std::string_view key, std::string_view token,
                                                      std::uint64_t until_ns, std::shared_ptr<const LockState> state) {
  if (!take_stand_in(index)) return nullptr;
  return std::make_shared<LateRelease>(*this, index, key, token, until_ns, std::move(state));
}

bool OwedReleases::take_stand_in(std::uint32_t index) {
  if (index >= stand_ins_.size() || stand_ins_[index] >= kMaxPerMaster) return false;
  ++stand_ins_[index];
  return true;
}

OwedReleases::OwedReleases(MasterSet& masters, std::uint32_t size, std::chrono::milliseconds command_timeout)
    : masters_(masters), command_timeout_(command_timeout), owed_(size), probes_(size), stand_ins_(size, 0) {}

bool OwedReleases::owe(std::uint32_t index, std::string encoded, std::uint64_t until_ns) {
  if (index >= owed_.size() || until_ns <= now_ns()) return true;
  auto& owed = owed_[index];
  if (owed.size() >= kMaxPerMaster) {
    // Expired entries make room first. Kept in about the order they expire (each until the
    // longest ttl in use from its release), so when the oldest has not expired none has: a
    // flood of releases lost with one connection costs one comparison each past the bound.
    const std::uint64_t now = now_ns();
    if (owed.front().until_ns > now) return false;
    std::erase_if(owed, [now](const Entry& entry) { return entry.until_ns <= now; });
    if (owed.size() >= kMaxPerMaster) return false;
  }
  owed.push_back({std::move(encoded), until_ns});
  return true;
}

void OwedReleases::on_ready(std::uint32_t index) {
  if (index >= owed_.size() || owed_[index].empty()) return;
  std::vector<Entry> owed = std::exchange(owed_[index], {});
  const std::uint64_t now = now_ns();
  // Late like any command one command_timeout after its send (not at the end of its window:
  // review 39, ~Client waited for it up to the longest ttl in use), which also keeps the
  // connection's deadlines in the order Connection::release_late_sinks expects.
  const std::uint64_t late_after = deadline_after(now, command_timeout_);
  for (auto& entry : owed) {
    if (entry.until_ns <= now) continue;
    auto sink = std::make_shared<Resend>(*this, std::move(entry));
    if (!masters_.send(index, sink->encoded(), sink, late_after, true)) sink->owe_again(index);
  }
}

void OwedReleases::probe(std::uint32_t index) {
  if (index >= owed_.size() || !probes_[index].expired()) return;
  auto& owed = owed_[index];
  const std::uint64_t now = now_ns();
  std::erase_if(owed, [now](const Entry& entry) { return entry.until_ns <= now; });
  if (owed.empty()) return;
  auto sink = std::make_shared<Probe>(*this, owed.front().encoded);
  // No deadline: its answer is waited for however late it comes (one probe at a time, and a
  // master that stops answering is dropped by the stall check). With one, a master answering
  // later than command_timeout under a backlog of more than Connection::kKeepLateSinksUpTo
  // had the sink dropped unanswered, and only the probed release ever landed (review 65).
  if (masters_.send(index, sink->encoded(), sink, 0, true)) probes_[index] = sink;
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// Fencing counter catch-up: a master seen for the first time, or after a restart, may have
// lost its counter. Before its fencing votes count, raise its counter to the highest value
// read from enough OTHER masters that any quorum which acknowledged a token shares one with
// them (N - quorum + 1 of the others; docs/fencing.md has the argument).
#include <cstdlib>
#include <utility>

#include "detail/client_impl.h"

namespace redlock::detail {
namespace {

class CatchUp final : public ReplySink, public std::enable_shared_from_this<CatchUp> {
 public:
  CatchUp(ClientImpl& impl, std::uint32_t target)
      : impl_(impl), target_(target), epoch_(impl.views_[target].epoch), needed_(impl.size_ - impl.quorum_ + 1) {}

  void start() {
    const std::string get = encode_command({"GET", impl_.options_.fence_key});
    for (std::uint32_t i = 0; i < impl_.size_; ++i) {
      if (i == target_) continue;
      if (impl_.connections_[i]->send(get, shared_from_this(), i)) ++asked_;
    }
    if (asked_ < needed_) {
      give_up();
      return;
    }
    auto self = shared_from_this();
    timer_ = impl_.loop_->schedule_at(deadline_after(now_ns(), deadline_ns()), [self] {
      self->timer_ = 0;
      if (!self->done_) self->give_up();
    });
  }

  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    if (done_) return;
    if (index == target_) {  // the raise
      finish(reply != nullptr && reply->type == REDIS_REPLY_INTEGER &&
             static_cast<std::uint64_t>(reply->integer) >= highest_);
      return;
    }
    ++answered_;
    if (reply != nullptr && (reply->type == REDIS_REPLY_NIL || reply->type == REDIS_REPLY_STRING)) {
      ++read_;
      if (reply->type == REDIS_REPLY_STRING) {
        highest_ = std::max<std::uint64_t>(highest_, std::strtoull(reply->str, nullptr, 10));
      }
    }
    if (read_ == needed_ && !raising_) {
      raising_ = true;
      RoundArgs args;
      args.fence = highest_;
      const std::string raise = impl_.encode(RoundKind::fence, args, true);
      if (!impl_.connections_[target_]->send(raise, shared_from_this(), target_)) give_up();
    } else if (answered_ == asked_ && read_ < needed_) {
      give_up();
    }
  }

 private:
  std::uint64_t deadline_ns() const { return to_ns(impl_.options_.connect_timeout); }

  void finish(bool raised) {
    done_ = true;
    if (timer_ != 0) impl_.loop_->cancel(std::exchange(timer_, 0));
    MasterView& view = impl_.views_[target_];
    view.catch_up_running = false;
    if (view.epoch != epoch_) {  // restarted again meanwhile: catch up the new incarnation
      impl_.catch_up(target_);
      return;
    }
    if (raised) {
      view.fence_ready = true;
      return;
    }
    retry();
  }

  void give_up() { finish(false); }

  void retry() {
    if (impl_.shutting_down_) return;
    ClientImpl* impl = &impl_;
    const std::uint32_t target = target_;
    const std::uint32_t epoch = epoch_;
    impl_.loop_->schedule_after(impl_.options_.reconnect_min, [impl, target, epoch] {
      if (impl->views_[target].epoch == epoch && !impl->views_[target].fence_ready) {
        impl->catch_up(target);
      }
    });
  }

  ClientImpl& impl_;
  const std::uint32_t target_;
  const std::uint32_t epoch_;
  const std::uint32_t needed_;
  std::uint32_t asked_ = 0;
  std::uint32_t answered_ = 0;
  std::uint32_t read_ = 0;
  std::uint64_t highest_ = 0;
  bool raising_ = false;
  bool done_ = false;
  EventLoop::TimerId timer_ = 0;
};

}  // namespace

void ClientImpl::catch_up(std::uint32_t index) {
  MasterView& view = views_[index];
  if (size_ == 1) {
    // Nothing to read from: a single master's counter is only as durable as the master.
    view.fence_ready = true;
    return;
  }
  if (view.catch_up_running || view.fence_ready || shutting_down_) return;
  // This user may not raise the counter here: retrying cannot help before a reconnect
  // proves otherwise (on_master_ready starts it again then).
  if (not_permitted(index, true)) return;
  // A3: the reads go out at least one command deadline after this incarnation was seen, so
  // a round-2 raise another client counted before the restart has executed where we read.
  // Every path into a catch-up (first sight, a restart during a catch-up, a retry) waits here.
  const std::uint64_t not_before = deadline_after(view.epoch_seen_ns, options_.command_timeout);
  if (now_ns() < not_before) {
    const std::uint32_t epoch = view.epoch;
    loop_->schedule_at(not_before, [this, index, epoch] {
      if (views_[index].epoch == epoch) catch_up(index);
    });
    return;
  }
  view.catch_up_running = true;
  std::make_shared<CatchUp>(*this, index)->start();
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
#include "detail/owed_releases.h"

#include <memory>
#include <utility>

#include "detail/connection.h"
#include "detail/loop_time.h"
#include "detail/master_set.h"
#include "detail/server_info.h"

namespace redlock::detail {

// One release sent again. Answered (whatever the answer), it is done; lost with the
// connection again, it is owed again (not once the set is closing: the Client is going away).
class OwedReleases::Resend final : public ReplySink {
 public:
  Resend(OwedReleases& owner, Entry entry) : owner_(owner), entry_(std::move(entry)) {}
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    if (reply == nullptr && !owner_.masters_.closed()) (void)owner_.owe(index, std::move(entry_.encoded), entry_.until_ns);
    if (reply != nullptr && is_server_state_error(*reply)) {
      owner_.masters_.owe_release(index, std::move(entry_.encoded), entry_.until_ns, true);
    } else if (reply != nullptr) {
      owner_.masters_.owed_spell_over(index);
    }
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
};

OwedReleases::OwedReleases(MasterSet& masters, std::uint32_t size, std::chrono::milliseconds command_timeout)
    : masters_(masters), command_timeout_(command_timeout), owed_(size) {}

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

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/release_room.h — room for the releases of the acquire attempts in flight.
//
// A failed attempt is released on every master its SET went to. The rounds of a burst may
// reach their deadline in one pass of the loop, long after their SETs were written (no longer
// counted against a connection's bytes bound), and queue all their releases at once: held to
// the release reserve, thousands were refused, and past the releases owed to a master the
// rest were dropped, their keys left until their ttl (review 58: 2,337 to 56,994 keys left by
// bursts of 30,000 to 100,000 acquires).
//
// So each attempt reserves its release's bytes when its SET is sent (Round::start), and an
// attempt for which there is no room is not sent at all (the Client has too many acquires in
// flight; it fails at once, every row saying so). The bytes are given back once its release
// is queued, or it is granted; a release so covered is held to the commands bound alone
// (Connection::send's `covered`), its bytes being bounded by this room. Loop thread only.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>

namespace redlock::detail {

class ReleaseRoom {
 public:
  // Bytes of encoded releases (one per attempt; each goes to every master its SET went to).
  // About 60,000 attempts of 20-byte names, 3,000 of the longest (1,024-byte) names.
  static constexpr std::size_t kMaxBytes = std::size_t{8} << 20;

  // An attempt's reservation: given back when reset or destroyed (an attempt ended in any way).
  class Ticket {
   public:
    Ticket() = default;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    Ticket(Ticket&& other) noexcept : reserved_(std::move(other.reserved_)), bytes_(std::exchange(other.bytes_, 0)) {}
    Ticket& operator=(Ticket&& other) noexcept {
      if (this != &other) {
        reset();
        reserved_ = std::move(other.reserved_);
        bytes_ = std::exchange(other.bytes_, 0);
      }
      return *this;
    }
    ~Ticket() { reset(); }
    void reset() noexcept {
      if (reserved_) *reserved_ -= bytes_;
      reserved_.reset();
      bytes_ = 0;
    }
    [[nodiscard]] explicit operator bool() const noexcept { return reserved_ != nullptr; }

   private:
    friend class ReleaseRoom;
    Ticket(std::shared_ptr<std::size_t> reserved, std::size_t bytes) : reserved_(std::move(reserved)), bytes_(bytes) {
      *reserved_ += bytes_;
    }
    // Shared: an operation (and its ticket) may outlive the Client's members by a little.
    std::shared_ptr<std::size_t> reserved_;
    std::size_t bytes_ = 0;
  };

  // `bytes` reserved, or an empty ticket when they would take the reserved bytes past kMaxBytes.
  [[nodiscard]] Ticket take(std::size_t bytes) {
    if (bytes > kMaxBytes - *reserved_) return {};
    return Ticket(reserved_, bytes);
  }
  [[nodiscard]] std::size_t reserved() const noexcept { return *reserved_; }

 private:
  std::shared_ptr<std::size_t> reserved_ = std::make_shared<std::size_t>(0);
};

}  // namespace redlock::detail

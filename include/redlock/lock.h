// SPDX-License-Identifier: Apache-2.0
// redlock/lock.h — a held lock: what release and extend need.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace redlock {

namespace detail {
class LockState;
struct LockAccess;
}  // namespace detail

// A held lock, as an acquire or extend returned it (or Client::adopt rebuilt it). A plain
// value: copying it does not copy ownership in Redis, it only names it. The public fields
// describe the lock; what the Client keeps about it (which masters granted it, whether it
// is known lost) is private and shared by the copies.
class Lock {
 public:
  std::string resource;  // as given by the caller
  std::string key;       // key_prefix + resource
  std::string token;     // random owner token (>= 128 bits from getrandom, hex)
  std::chrono::milliseconds ttl{0};
  // Instants on the Client's validity clock (Client::now()): when the granting round was
  // sent, and when the lease stops being safe to rely on: started + ttl - drift.
  std::chrono::steady_clock::time_point started{};
  std::chrono::steady_clock::time_point deadline{};
  // Fencing token when the acquire asked for one (AcquireOptions::fencing), else 0.
  std::uint64_t fence = 0;

  // True once the Client learned that fewer than a quorum still vouch for this lock: masters
  // which granted it restarted (restart guard; never for an adopted lock, the Client does not
  // know which masters granted it), or an extend of it found its key gone or another owner's
  // on more than N - quorum masters. A lost lock is never extended.
  [[nodiscard]] bool lost() const noexcept;

  // True for a Lock rebuilt by Client::adopt whose validity this process does not know
  // (no extend of it has succeeded here yet).
  [[nodiscard]] bool adopted() const noexcept { return adopted_; }

 private:
  friend struct detail::LockAccess;
  std::shared_ptr<detail::LockState> state_;
  bool adopted_ = false;
};

}  // namespace redlock

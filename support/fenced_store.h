// SPDX-License-Identifier: Apache-2.0
// redlock::support::FencedStore — the storage side of fencing, for tests and chaos runs.
//
// A resource that remembers the highest fencing token it has accepted and refuses a write
// carrying a lower one: one Lua script on a redis-server of its own (not one of the lock's
// masters), so the check and the write are atomic. This is what lets a fenced lock survive a
// holder that was paused past its validity: its late write carries a stale token.
//
// Talks to the server by address (its own short-lived connection per call), so any process
// can use it, including a forked or separately started client process.
#pragma once

#include <cstdint>
#include <string>

namespace redlock::support {

class FencedStore {
 public:
  // `name` distinguishes several stores on one server.
  FencedStore(std::string host, std::uint16_t port, std::string name = "store");

  // Accepts `value` if `token` >= the highest token accepted so far (equal: the same holder
  // writing again). Returns whether it was accepted. Throws std::runtime_error on I/O errors.
  bool write(std::uint64_t token, const std::string& value) const;

  [[nodiscard]] std::uint64_t highest_token() const;
  [[nodiscard]] std::string value() const;

 private:
  const std::string host_;
  const std::uint16_t port_;
  const std::string token_key_;
  const std::string value_key_;
};

}  // namespace redlock::support

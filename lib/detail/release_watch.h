// SPDX-License-Identifier: Apache-2.0
// detail/release_watch.h — release notifications for the waiters of one Client
// (docs/design.md "Waiting"): one subscriber connection per master, shared by every waiter,
// subscribed to the release channel (release_channel(key)) of each key somebody waits for.
//
// The connections open when the first waiter appears and stay (reconnecting) for the life of
// the Client. A key is SUBSCRIBEd on every master when its first waiter comes and
// UNSUBSCRIBEd when its last goes (reference counts). The Client is told (`wake`) when a
// release of a watched key is announced on any master, when a subscription is confirmed (a
// release between a waiter's failed attempt and the confirmation was not heard: the waiter
// retries once), and when a subscriber connection is lost (what it would have heard is
// unknown). Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "detail/connection.h"
#include "redlock/options.h"

struct redisReply;

namespace redlock::detail {

class EventLoop;
class MasterSet;
class TlsContext;

class ReleaseWatch {
 public:
  // The Client's next waiter of the key in line tries again (ClientImpl::wake_waiters).
  // `lost`: a subscriber connection was lost, and what it would have heard is unknown; those
  // that only listened must also look again at whether they can rely on announcements.
  using Wake = std::function<void(const std::string& key, bool lost)>;

  // `options`, `masters` and `tls` must outlive the watch.
  ReleaseWatch(EventLoop& loop, const ClientOptions& options, const std::vector<Endpoint>& endpoints,
               TlsContext* tls, const MasterSet& masters, Wake wake);
  ReleaseWatch(const ReleaseWatch&) = delete;
  ReleaseWatch& operator=(const ReleaseWatch&) = delete;

  // One more (one fewer) waiter for `key`.
  void watch(const std::string& key);
  void unwatch(const std::string& key);

  // Whether a release of `key` would be heard: its subscription is confirmed, on masters
  // where the user may PUBLISH and SUBSCRIBE, on enough masters that every quorum includes
  // one of them (N - quorum + 1), so a release that deletes the key on a quorum reaches
  // one. (A release that misses them is still bounded by the key's expiry: waiters sleep
  // until it.)
  [[nodiscard]] bool reliable(const std::string& key) const;
  // Whether this Client's own subscriber is subscribed to `key`'s channel on master `index`
  // (it is then one of that master's PUBLISH receivers).
  [[nodiscard]] bool subscribed(const std::string& key, std::uint32_t index) const;

  // Closes the subscriber connections; no reconnect, no wake-ups afterwards.
  void close();

 private:
  enum class Sub : std::uint8_t { none, sent, confirmed };
  struct Watched {
    int refs = 0;
    std::vector<Sub> masters;
  };
  void start();
  void subscribe(std::uint32_t index, const std::string& key, Watched& watched);
  void on_ready(std::uint32_t index);
  void on_down(std::uint32_t index);
  void on_push(std::uint32_t index, const redisReply& reply);

  EventLoop& loop_;
  const ClientOptions& options_;
  const std::vector<Endpoint> endpoints_;
  TlsContext* const tls_;
  const MasterSet& masters_;
  Wake wake_;
  const std::uint32_t size_;
  const std::uint32_t needed_;  // N - quorum + 1
  std::vector<std::unique_ptr<Connection>> connections_;  // empty until the first waiter
  std::vector<bool> refused_;  // per master: a SUBSCRIBE was refused on this connection
  std::unordered_map<std::string, Watched> watched_;  // by key
  bool closed_ = false;
};

}  // namespace redlock::detail

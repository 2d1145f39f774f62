// SPDX-License-Identifier: Apache-2.0
// Release notifications for the waiters of one Client (detail/release_watch.h).
#include "detail/release_watch.h"

#include <hiredis/hiredis.h>

#include <string_view>

#include "detail/commands.h"
#include "detail/lock_commands.h"
#include "detail/master_set.h"
#include "detail/quorum.h"

namespace redlock::detail {
namespace {

std::string_view text(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_STRING && reply.type != REDIS_REPLY_STATUS) return {};
  return {reply.str, reply.len};
}

}  // namespace

ReleaseWatch::ReleaseWatch(EventLoop& loop, const ClientOptions& options, const std::vector<Endpoint>& endpoints,
                           TlsContext* tls, const MasterSet& masters, Wake wake)
    : loop_(loop),
      options_(options),
      endpoints_(endpoints),
      tls_(tls),
      masters_(masters),
      wake_(std::move(wake)),
      size_(static_cast<std::uint32_t>(endpoints.size())),
      needed_(size_ - quorum_of(size_) + 1),
      refused_(size_) {}

void ReleaseWatch::start() {
  if (closed_ || !connections_.empty()) return;
  for (std::uint32_t i = 0; i < size_; ++i) {
    ConnectionOptions co = connection_options(options_, endpoints_[i], tls_);
    co.on_push = [this, i](const redisReply& reply) { on_push(i, reply); };
    connections_.push_back(std::make_unique<Connection>(loop_, std::move(co)));
    connections_.back()->on_ready = [this, i] { on_ready(i); };
    connections_.back()->on_down = [this, i] { on_down(i); };
  }
  for (auto& connection : connections_) connection->start();
}

void ReleaseWatch::close() {
  closed_ = true;
  for (auto& connection : connections_) connection->close();
  watched_.clear();
}

void ReleaseWatch::watch(const std::string& key) {
  if (closed_) return;
  start();
  auto [it, added] = watched_.try_emplace(key);
  Watched& watched = it->second;
  if (++watched.refs > 1) return;
  watched.masters.assign(size_, Sub::none);
  for (std::uint32_t i = 0; i < size_; ++i) subscribe(i, key, watched);
}

void ReleaseWatch::subscribe(std::uint32_t index, const std::string& key, Watched& watched) {
  if (refused_[index] || !connections_[index]->ready()) return;
  if (connections_[index]->send_push(encode_command({"SUBSCRIBE", release_channel(key)}))) {
    watched.masters[index] = Sub::sent;
  }
}

void ReleaseWatch::unwatch(const std::string& key) {
  const auto it = watched_.find(key);
  if (it == watched_.end() || --it->second.refs > 0) return;
  for (std::uint32_t i = 0; i < size_; ++i) {
    if (it->second.masters[i] != Sub::none) {
      connections_[i]->send_push(encode_command({"UNSUBSCRIBE", release_channel(key)}));
    }
  }
  watched_.erase(it);
}

bool ReleaseWatch::reliable(const std::string& key) const {
  const auto it = watched_.find(key);
  if (it == watched_.end()) return false;
  std::uint32_t heard = 0;
  for (std::uint32_t i = 0; i < size_; ++i) {
    if (it->second.masters[i] == Sub::confirmed && masters_.notifications_permitted(i)) ++heard;
  }
  return heard >= needed_;
}

bool ReleaseWatch::subscribed(const std::string& key, std::uint32_t index) const {
  const auto it = watched_.find(key);
  return it != watched_.end() && index < size_ && it->second.masters[index] == Sub::confirmed;
}

void ReleaseWatch::on_ready(std::uint32_t index) {
  refused_[index] = false;
  for (auto& [key, watched] : watched_) subscribe(index, key, watched);
}

void ReleaseWatch::on_down(std::uint32_t index) {
  // What this master announced since the connection was lost is unknown: the Client's next
  // waiter of each key tries once more, and its waiters that only listened poll if the key's
  // announcements can no longer be relied on (ClientImpl::wake_waiters).
  std::vector<std::string> keys;
  for (auto& [key, watched] : watched_) {
    watched.masters[index] = Sub::none;
    keys.push_back(key);
  }
  for (const auto& key : keys) wake_(key, true);
}

void ReleaseWatch::on_push(std::uint32_t index, const redisReply& reply) {
  if (reply.type == REDIS_REPLY_ERROR) {
    // A refused SUBSCRIBE (NOPERM on the channel, or an older server's refusal): which one
    // RESP2 does not say, and they are all alike; this master is not relied on until it
    // reconnects.
    refused_[index] = true;
    for (auto& [key, watched] : watched_) {
      if (watched.masters[index] == Sub::sent) watched.masters[index] = Sub::none;
    }
    return;
  }
  // ["message", channel, payload], ["subscribe", channel, n], ["unsubscribe", channel, n];
  // anything else is not ours to read (and costs nothing: it is freed on return).
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 3) return;
  const std::string_view kind = text(*reply.element[0]);
  const std::string_view channel = text(*reply.element[1]);
  if (!channel.starts_with(kReleaseChannelPrefix)) return;
  const std::string key(channel.substr(kReleaseChannelPrefix.size()));
  const auto it = watched_.find(key);
  if (it == watched_.end()) return;
  if (kind == "message") {
    wake_(key, false);
  } else if (kind == "subscribe") {
    it->second.masters[index] = Sub::confirmed;
    // A release between the waiter's failed attempt and this confirmation was not heard.
    wake_(key, false);
  } else if (kind == "unsubscribe") {
    // The UNSUBSCRIBE of an earlier round of waiters; the new SUBSCRIBE follows it.
    if (it->second.masters[index] == Sub::confirmed) it->second.masters[index] = Sub::sent;
  }
}

}  // namespace redlock::detail

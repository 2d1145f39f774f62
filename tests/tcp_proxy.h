// SPDX-License-Identifier: Apache-2.0
// A fault-injecting TCP proxy for tests: forwards a loopback port to a real redis-server and
// lets a test delay what the client sends, chunk by chunk. Redis still answers everything;
// the proxy only moves bytes later. Blocking sockets, two threads per connection.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loopback_listener.h"

namespace redlock::testing {

class TcpProxy {
 public:
  // Runs on a proxy thread with each chunk the client sent, before it is forwarded; it may
  // sleep to delay that chunk (and everything behind it on that connection).
  using OnRequest = std::function<void(std::string_view chunk)>;
  // Runs on a proxy thread after a chunk of the server's replies was handed to the client's
  // socket (on loopback: it is in the client's receive queue when this runs).
  using OnReplyForwarded = std::function<void()>;

  TcpProxy(std::uint16_t upstream_port, OnRequest on_request, OnReplyForwarded on_reply_forwarded = {})
      : upstream_port_(upstream_port), on_request_(std::move(on_request)), on_reply_forwarded_(std::move(on_reply_forwarded)) {
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~TcpProxy() {
    listener_.stop();
    acceptor_.join();
    {
      const std::lock_guard lock(mutex_);
      for (const int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (auto& thread : pumps_) thread.join();
    for (const int fd : fds_) ::close(fd);
  }
  TcpProxy(const TcpProxy&) = delete;
  TcpProxy& operator=(const TcpProxy&) = delete;

  std::string uri() const { return listener_.uri(); }

  // From now on new connections go to `port` (a failover behind one address); the current
  // ones are cut (both ends shut down), so the client reconnects there.
  void retarget(std::uint16_t port) {
    upstream_port_.store(port);
    const std::lock_guard lock(mutex_);
    for (const int fd : fds_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  static sockaddr_in loopback(std::uint16_t port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    return address;
  }

  void accept_loop() {
    for (;;) {
      pollfd fds[2] = {{listener_.stop_fd(), POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 || fds[0].revents != 0) return;
      const int client = ::accept(listener_.fd(), nullptr, nullptr);
      if (client < 0) continue;
      const int server = ::socket(AF_INET, SOCK_STREAM, 0);
      const sockaddr_in upstream = loopback(upstream_port_.load());
      if (::connect(server, reinterpret_cast<const sockaddr*>(&upstream), sizeof(upstream)) != 0) {
        ::close(client);
        ::close(server);
        continue;
      }
      const int one = 1;
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      const std::lock_guard lock(mutex_);
      fds_.push_back(client);
      fds_.push_back(server);
      pumps_.emplace_back([this, client, server] { pump(client, server, true); });
      pumps_.emplace_back([this, client, server] { pump(server, client, false); });
    }
  }

  void pump(int from, int to, bool is_request) {
    char buffer[64 * 1024];
    for (;;) {
      const ssize_t got = ::read(from, buffer, sizeof(buffer));
      if (got <= 0) break;
      if (is_request && on_request_) on_request_(std::string_view(buffer, static_cast<std::size_t>(got)));
      for (ssize_t sent = 0; sent < got;) {
        const ssize_t n = ::send(to, buffer + sent, static_cast<std::size_t>(got - sent), MSG_NOSIGNAL);
        if (n <= 0) return;
        sent += n;
      }
      if (!is_request && on_reply_forwarded_) on_reply_forwarded_();
    }
    ::shutdown(to, SHUT_WR);
  }

  std::atomic<std::uint16_t> upstream_port_;
  const OnRequest on_request_;
  const OnReplyForwarded on_reply_forwarded_;
  LoopbackListener listener_{"proxy"};
  std::thread acceptor_;
  std::mutex mutex_;
  std::vector<int> fds_;             // guarded by mutex_
  std::vector<std::thread> pumps_;   // guarded by mutex_ (joined after the acceptor has ended)
};

}  // namespace redlock::testing

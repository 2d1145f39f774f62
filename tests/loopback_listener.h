// SPDX-License-Identifier: Apache-2.0
// A socket listening on 127.0.0.1 at a port the kernel picked, for the tests' own tiny servers
// and proxies, and a pipe whose read end becomes readable when stop() is called, so a server
// thread polling both ends its accept loop. Closed on destruction (after the thread joined).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace redlock::testing {

class LoopbackListener {
 public:
  // `who` names the server in the error thrown when the socket cannot be made.
  explicit LoopbackListener(const std::string& who) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(fd_, 16) != 0) {
      close_all();
      throw std::runtime_error(who + ": bind/listen failed");
    }
    socklen_t size = sizeof(address);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    if (::pipe(stop_) != 0) {
      close_all();
      throw std::runtime_error(who + ": pipe failed");
    }
  }
  ~LoopbackListener() { close_all(); }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  // Readable once stop() was called: poll it beside fd().
  [[nodiscard]] int stop_fd() const { return stop_[0]; }
  void stop() const {
    const char byte = 0;
    (void)!::write(stop_[1], &byte, 1);
  }

 private:
  void close_all() {
    for (const int fd : {fd_, stop_[0], stop_[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }

  int fd_ = -1;
  std::uint16_t port_ = 0;
  int stop_[2] = {-1, -1};
};

}  // namespace redlock::testing

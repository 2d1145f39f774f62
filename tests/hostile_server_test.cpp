// Masters that send what Redis never would: protocol garbage, replies of the wrong type,
// silence, and hang-ups. Each is one master's failure with a clear reason; nothing
// crashes, and real masters beside them still decide. The hostile peer is a tiny server
// of the test's own (the only stand-in the suite allows).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test_util.h"

namespace redlock::testing {
namespace {

enum class Behaviour { garbage, integer_for_everything, silent, hang_up };

class HostileServer {
 public:
  explicit HostileServer(Behaviour behaviour) : behaviour_(behaviour) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 || ::listen(listener_, 16) != 0) {
      throw std::runtime_error("hostile server: bind/listen failed");
    }
    socklen_t size = sizeof(address);
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    if (::pipe(stop_) != 0) throw std::runtime_error("hostile server: pipe failed");
    thread_ = std::thread([this] { serve(); });
  }
  ~HostileServer() {
    const char byte = 0;
    (void)!::write(stop_[1], &byte, 1);
    thread_.join();
    ::close(listener_);
    ::close(stop_[0]);
    ::close(stop_[1]);
  }
  std::string uri() const { return "redis://127.0.0.1:" + std::to_string(port_); }

 private:
  struct Peer {
    int fd;
    redisReader* reader;
  };

  void serve() {
    std::vector<Peer> peers;
    for (;;) {
      std::vector<pollfd> fds{{stop_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
      for (const auto& peer : peers) fds.push_back({peer.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), 1000) < 0) break;
      if (fds[0].revents != 0) break;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept(listener_, nullptr, nullptr);
        if (fd >= 0 && behaviour_ == Behaviour::hang_up) {
          ::close(fd);
        } else if (fd >= 0) {
          peers.push_back({fd, redisReaderCreate()});
        }
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (!(fds[i].revents & (POLLIN | POLLHUP))) continue;
        Peer& peer = peers[i - 2];
        char buffer[4096];
        const ssize_t got = ::read(peer.fd, buffer, sizeof(buffer));
        if (got <= 0) {
          ::close(peer.fd);
          peer.fd = -1;
          continue;
        }
        redisReaderFeed(peer.reader, buffer, static_cast<std::size_t>(got));
        void* request = nullptr;
        while (redisReaderGetReply(peer.reader, &request) == REDIS_OK && request != nullptr) {
          freeReplyObject(request);
          respond(peer.fd);
        }
      }
      std::vector<Peer> alive;
      for (auto& peer : peers) {
        if (peer.fd >= 0) alive.push_back(peer); else redisReaderFree(peer.reader);
      }
      peers.swap(alive);
    }
    for (auto& peer : peers) {
      ::close(peer.fd);
      redisReaderFree(peer.reader);
    }
  }

  void respond(int fd) const {
    std::string_view reply;
    switch (behaviour_) {
      case Behaviour::garbage: reply = "~this is not RESP\r\n"; break;
      case Behaviour::integer_for_everything: reply = ":5\r\n"; break;
      case Behaviour::silent:
      case Behaviour::hang_up: return;
    }
    // MSG_NOSIGNAL: the client may already have hung up; a SIGPIPE would end the test.
    (void)!::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  }

  const Behaviour behaviour_;
  int listener_ = -1;
  int stop_[2] = {-1, -1};
  std::uint16_t port_ = 0;
  std::thread thread_;
};

struct Case {
  Behaviour behaviour;
  MasterStatus status;
  const char* error_contains;
  const char* name;
};

class HostileServerTest : public ::testing::TestWithParam<Case> {};

TEST_P(HostileServerTest, TwoHostileMastersFailTheQuorumWithTheirReason) {
  RedisServer real;
  HostileServer bad1(GetParam().behaviour);
  HostileServer bad2(GetParam().behaviour);
  auto options = options_for({real.uri(), bad1.uri(), bad2.uri()});
  options.command_timeout = 150ms;
  Client client(options);
  const Result result = client.acquire("hostile");
  EXPECT_EQ(result.outcome, Outcome::quorum_unreachable) << format_result(result);
  for (const std::size_t i : {1u, 2u}) {
    EXPECT_EQ(result.masters[i].status, GetParam().status) << format_result(result);
    EXPECT_NE(result.masters[i].error.find(GetParam().error_contains), std::string::npos) << format_result(result);
  }
  // Nothing of ours is left on the real master.
  EXPECT_TRUE(eventually([&] { return real.command({"EXISTS", "redlock:hostile"}).integer == 0; }));
}

TEST_P(HostileServerTest, OneHostileMasterIsOutvoted) {
  RedisServer real1;
  RedisServer real2;
  HostileServer bad(GetParam().behaviour);
  auto options = options_for({real1.uri(), bad.uri(), real2.uri()});
  options.command_timeout = 150ms;
  Client client(options);
  for (int i = 0; i < 3; ++i) {
    const Result held = client.acquire("outvoted" + std::to_string(i));
    ASSERT_TRUE(held) << format_result(held);
    EXPECT_NE(held.masters[1].status, MasterStatus::ok);
    EXPECT_TRUE(client.release(*held.lock));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Behaviours, HostileServerTest,
    ::testing::Values(Case{Behaviour::garbage, MasterStatus::not_connected, "protocol error", "Garbage"},
                      Case{Behaviour::integer_for_everything, MasterStatus::server_error, "unexpected integer reply 5",
                           "IntegerForEverything"},
                      Case{Behaviour::silent, MasterStatus::timeout, "no reply within 150 ms", "Silent"},
                      Case{Behaviour::hang_up, MasterStatus::not_connected, "", "HangUp"}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return std::string(param_info.param.name); });

}  // namespace
}  // namespace redlock::testing

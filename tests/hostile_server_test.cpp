// SPDX-License-Identifier: Apache-2.0
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

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loopback_listener.h"
#include "support/process_memory.h"
#include "test_util.h"

namespace redlock::testing {
namespace {

// What the hostile server does. The first four answer every command alike (the handshake
// included); the others answer the handshake as Redis would and misbehave on the lock's
// own commands (SET, EVALSHA, EVAL), or while the client is idle.
enum class Behaviour {
  garbage,
  integer_for_everything,
  silent,
  hang_up,
  huge_bulk,          // "$2000000000\r\n" then bytes, as fast as the client takes them
  huge_array,         // "*200000000\r\n" then ":1\r\n" elements
  endless_line,       // "+" then 'x' without ever a CRLF
  slow_drip,          // "+" then one 'x' every 5 ms, never a CRLF
  resp3_push,         // a RESP3 push message ('>'), which hiredis 0.14 does not know
  extra_reply,        // two replies to every lock command
  swapped_replies,    // SET gets EVALSHA's reply and EVALSHA gets SET's
  unsolicited_idle,   // honest, but 50 ms after its last reply sends "$5\r\nab" unasked
  huge_bulk_idle,     // honest, but 50 ms after its last reply streams a huge bulk unasked
  endless_handshake,  // INFO server's reply starts and then drips forever
  huge_fence,         // honest, but its fencing counter is 2^63 - 1: GET and the lock scripts say so
  huge_time,          // honest, but TIME says 10^12 s and 2^63 - 1 microseconds
  huge_denial,        // the handshake's permission check says 1,000,000 bytes of commands are denied
  password_time,      // honest, but TIME's seconds are the password it was sent (kEchoedPassword)
  huge_run_id,        // honest, but INFO server's run_id is almost 1 MiB long (the same on every such server)
  slow_answers,       // honest replies to lock commands, in order, but one every kAnswerEvery (a growing backlog)
  noscript_always,    // honest, but every script (EVALSHA and EVAL alike) is answered NOSCRIPT
};

constexpr const char* kEchoedPassword = "echoed-Pw-7q2x";

constexpr const char* kHugeFence = "9223372036854775807";

class HostileServer {
 public:
  // Bytes one connection streams at most (huge_*, endless_line): enough for a client
  // without limits to show the growth, a bound on what a test can cost the machine.
  static constexpr std::uint64_t kStreamCap = std::uint64_t{256} << 20;

  explicit HostileServer(Behaviour behaviour) : behaviour_(behaviour) {
    thread_ = std::thread([this] { serve(); });
  }
  ~HostileServer() {
    listener_.stop();
    thread_.join();
  }
  std::string uri() const { return listener_.uri(); }
  // The lock's own EVALs (not the connect-time permission check's) received so far.
  int lock_evals() const { return lock_evals_.load(); }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kDripEvery = std::chrono::milliseconds(5);
  static constexpr auto kIdleAfter = std::chrono::milliseconds(50);

  struct Peer {
    int fd = -1;
    redisReader* reader = nullptr;
    std::string out;                  // written first
    std::uint64_t stream_left = 0;    // then this many bytes repeating `pattern`
    std::uint64_t streamed = 0;
    std::string_view pattern;
    bool muted = false;               // misbehaving now: answers nothing more
    bool dripping = false;
    Clock::time_point next_drip{};
    std::optional<Clock::time_point> idle_due;  // when the unasked bytes go out
    bool idle_sent = false;
    std::deque<std::string> queued;  // slow_answers: replies not sent yet, in order
    Clock::time_point next_answer{};
  };
 public:
  static constexpr auto kAnswerEvery = std::chrono::milliseconds(300);
 private:

  void serve() {
    std::vector<Peer> peers;
    for (;;) {
      std::vector<pollfd> fds{{listener_.stop_fd(), POLLIN, 0}, {listener_.fd(), POLLIN, 0}};
      bool timed = false;
      for (const auto& peer : peers) {
        const bool writing = !peer.out.empty() || peer.stream_left > 0;
        fds.push_back({peer.fd, static_cast<short>(POLLIN | (writing ? POLLOUT : 0)), 0});
        timed = timed || peer.dripping || (peer.idle_due && !peer.idle_sent) || !peer.queued.empty();
      }
      if (::poll(fds.data(), fds.size(), timed ? 2 : 1000) < 0) break;
      if (fds[0].revents != 0) break;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept(listener_.fd(), nullptr, nullptr);
        if (fd >= 0 && behaviour_ == Behaviour::hang_up) {
          ::close(fd);
        } else if (fd >= 0) {
          Peer peer;
          peer.fd = fd;
          peer.reader = redisReaderCreate();
          peers.push_back(std::move(peer));
        }
      }
      const auto now = Clock::now();
      for (std::size_t i = 2; i < fds.size(); ++i) {
        Peer& peer = peers[i - 2];
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          char buffer[4096];
          const ssize_t got = ::read(peer.fd, buffer, sizeof(buffer));
          if (got <= 0) {
            drop(peer);
            continue;
          }
          redisReaderFeed(peer.reader, buffer, static_cast<std::size_t>(got));
          void* request = nullptr;
          while (redisReaderGetReply(peer.reader, &request) == REDIS_OK && request != nullptr) {
            const auto* argv = static_cast<redisReply*>(request);
            const std::string name = argv->type == REDIS_REPLY_ARRAY && argv->elements > 0
                                         ? std::string(argv->element[0]->str, argv->element[0]->len)
                                         : std::string();
            // INFO's section (server, replication, ...), as sent.
            const std::string section = argv->type == REDIS_REPLY_ARRAY && argv->elements > 1
                                            ? std::string(argv->element[1]->str, argv->element[1]->len)
                                            : std::string();
            // The connect-time permission check runs the lock's commands on a probe key: part of
            // the handshake, answered as Redis would, so the misbehaviour hits real locks.
            bool probe = false;
            for (std::size_t arg = 1; argv->type == REDIS_REPLY_ARRAY && arg < argv->elements; ++arg) {
              probe = probe || std::string_view(argv->element[arg]->str, argv->element[arg]->len).find("__redlock_probe:") !=
                                   std::string_view::npos;
            }
            freeReplyObject(request);
            respond(peer, name, section, probe);
          }
        }
        if (!peer.queued.empty() && now >= peer.next_answer) {
          peer.out += peer.queued.front();
          peer.queued.pop_front();
          peer.next_answer = now + kAnswerEvery;
        }
        if (peer.dripping && now >= peer.next_drip) {
          peer.out += 'x';
          peer.next_drip = now + kDripEvery;
        }
        if (peer.idle_due && !peer.idle_sent && now >= *peer.idle_due) {
          peer.idle_sent = true;
          if (behaviour_ == Behaviour::unsolicited_idle) {
            peer.out += "$5\r\nab";  // begun, never finished: must be refused at once
          } else {
            peer.out += "$2000000000\r\n";
            stream(peer, "x");
          }
        }
        write_some(peer);
      }
      std::vector<Peer> alive;
      for (auto& peer : peers) {
        if (peer.fd >= 0) alive.push_back(std::move(peer));
      }
      peers.swap(alive);
    }
    for (auto& peer : peers) drop(peer);
  }

  static void drop(Peer& peer) {
    if (peer.fd >= 0) ::close(peer.fd);
    if (peer.reader != nullptr) redisReaderFree(peer.reader);
    peer.fd = -1;
    peer.reader = nullptr;
  }

  static void stream(Peer& peer, std::string_view pattern) {
    peer.pattern = pattern;
    peer.stream_left = kStreamCap;
    peer.muted = true;
  }

  // Non-blocking: whatever the socket takes now; the rest waits for POLLOUT.
  void write_some(Peer& peer) {
    // MSG_NOSIGNAL: the client may already have hung up; a SIGPIPE would end the test.
    const auto send_some = [&](const char* data, std::size_t size) -> ssize_t {
      const ssize_t sent = ::send(peer.fd, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK) drop(peer);
      return sent;
    };
    if (peer.fd >= 0 && !peer.out.empty()) {
      const ssize_t sent = send_some(peer.out.data(), peer.out.size());
      if (sent > 0) peer.out.erase(0, static_cast<std::size_t>(sent));
    }
    while (peer.fd >= 0 && peer.out.empty() && peer.stream_left > 0) {
      // A 64 KiB run of the pattern, starting where the last partial send stopped.
      static constexpr std::size_t kChunk = 64 * 1024;
      std::string& run = runs_[std::string(peer.pattern)];
      if (run.empty()) {
        while (run.size() < kChunk + peer.pattern.size()) run += peer.pattern;
      }
      const std::size_t offset = static_cast<std::size_t>(peer.streamed % peer.pattern.size());
      const std::size_t size = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, peer.stream_left));
      const ssize_t sent = send_some(run.data() + offset, size);
      if (sent <= 0) break;
      peer.streamed += static_cast<std::uint64_t>(sent);
      peer.stream_left -= static_cast<std::uint64_t>(sent);
    }
  }

  // What Redis would answer, for the handshake and for a lock that is free.
  static std::string honest(const std::string& name, std::size_t run_id_size = 40) {
    if (name == "INFO") {
      const std::string body = "# Server\r\nrun_id:" + std::string(run_id_size, 'a') + "\r\nuptime_in_seconds:1000\r\n";
      return "$" + std::to_string(body.size()) + "\r\n" + body + "\r\n";
    }
    if (name == "CONFIG") return "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n";
    if (name == "SCRIPT") return "$40\r\n" + std::string(40, 'b') + "\r\n";
    if (name == "EVALSHA" || name == "EVAL") return ":1\r\n";
    return "+OK\r\n";
  }

  void respond(Peer& peer, const std::string& name, const std::string& section, bool probe) {
    if (peer.muted) return;
    const bool lock_command = !probe && (name == "SET" || name == "EVALSHA" || name == "EVAL");
    if (lock_command && name == "EVAL") ++lock_evals_;
    switch (behaviour_) {
      case Behaviour::garbage: peer.out += "~this is not RESP\r\n"; return;
      case Behaviour::integer_for_everything: peer.out += ":5\r\n"; return;
      case Behaviour::silent:
      case Behaviour::hang_up: return;
      case Behaviour::endless_handshake:
        if (name == "INFO") {
          peer.out += "$100000\r\n";
          peer.dripping = true;
          peer.muted = true;
        } else {
          peer.out += honest(name);
        }
        return;
      default: break;
    }
    if (behaviour_ == Behaviour::huge_denial && probe && (name == "EVALSHA" || name == "EVAL")) {
      // The permission check's three lists: the lock's commands denied, the fencing's, the channels'.
      peer.out += "*3\r\n$1000000\r\n" + std::string(1'000'000, 'x') + "\r\n$0\r\n\r\n$0\r\n\r\n";
    } else if (behaviour_ == Behaviour::password_time && name == "TIME") {
      peer.out += "*2\r\n$" + std::to_string(std::string_view(kEchoedPassword).size()) + "\r\n" + kEchoedPassword +
                  "\r\n$1\r\n0\r\n";
    } else if (behaviour_ == Behaviour::huge_run_id && name == "INFO" && section == "server") {
      // INFO server only: every INFO section at 1 MiB (the role read every second among them)
      // kept a TSan build's handshakes past connect_timeout (CI: wait_connected failed).
      peer.out += honest(name, (std::size_t{1} << 20) - 200);  // the reply stays within ReplyLimits
    } else if (behaviour_ == Behaviour::huge_time && name == "TIME") {
      peer.out += "*2\r\n$13\r\n1000000000000\r\n$19\r\n9223372036854775807\r\n";
    } else if (behaviour_ == Behaviour::huge_fence && name == "GET") {
      peer.out += "$" + std::to_string(std::string_view(kHugeFence).size()) + "\r\n" + kHugeFence + "\r\n";
    } else if (!lock_command) {
      peer.out += honest(name);
    } else {
      switch (behaviour_) {
        case Behaviour::huge_bulk:
          peer.out += "$2000000000\r\n";
          stream(peer, "x");
          break;
        case Behaviour::huge_array:
          peer.out += "*200000000\r\n";
          stream(peer, ":1\r\n");
          break;
        case Behaviour::endless_line:
          peer.out += "+";
          stream(peer, "x");
          break;
        case Behaviour::slow_drip:
          peer.out += "+";
          peer.dripping = true;
          peer.muted = true;
          break;
        case Behaviour::slow_answers:
          if (peer.queued.empty() && peer.next_answer < Clock::now()) peer.next_answer = Clock::now() + kAnswerEvery;
          peer.queued.push_back(honest(name));
          return;
        case Behaviour::resp3_push: peer.out += ">2\r\n$7\r\nmessage\r\n$2\r\nhi\r\n"; break;
        case Behaviour::extra_reply: peer.out += honest(name) + honest(name); break;
        case Behaviour::swapped_replies: peer.out += name == "SET" ? ":1\r\n" : "+OK\r\n"; break;
        case Behaviour::noscript_always:
          peer.out += name == "SET" ? honest(name) : std::string("-NOSCRIPT No matching script. Please use EVAL.\r\n");
          break;
        case Behaviour::huge_fence:
          // The fenced acquire's INCR and the raise's answer (a plain SET is granted).
          peer.out += name == "SET" ? honest(name) : std::string(":") + kHugeFence + "\r\n";
          break;
        default: peer.out += honest(name); break;
      }
    }
    if ((behaviour_ == Behaviour::unsolicited_idle || behaviour_ == Behaviour::huge_bulk_idle) && !peer.idle_sent) {
      peer.idle_due = Clock::now() + kIdleAfter;
    }
  }

  const Behaviour behaviour_;
  LoopbackListener listener_{"hostile server"};
  std::thread thread_;
  std::map<std::string, std::string> runs_;  // pattern -> 64 KiB run of it (server thread only)
  std::atomic<int> lock_evals_{0};
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


// ---- one hostile master beside four real ones ----


// Growth this process may show while one hostile master does its worst: the client may
// hold one reply (1 MiB) plus a read, and a sanitizer's bookkeeping on top.
constexpr long kGrowthBoundKib = 32 * 1024;

constexpr std::size_t kHostile = 2;  // the hostile master's row

// No real master failed or timed out, and a quorum granted: the real masters alone, or
// with the hostile one where it answered an honest "OK" (extra_reply, *_idle) before
// misbehaving. One real master may still be pending when the quorum was reached.
void expect_real_masters_decided(const Result& result) {
  std::size_t granted = 0;
  for (std::size_t i = 0; i < result.masters.size(); ++i) {
    const MasterStatus status = result.masters[i].status;
    if (status == MasterStatus::ok) ++granted;
    if (i == kHostile) continue;
    EXPECT_TRUE(status == MasterStatus::ok || status == MasterStatus::pending) << format_result(result);
  }
  EXPECT_GE(granted, quorum_of_n(result.masters.size())) << format_result(result);
}

struct MatrixCase {
  Behaviour behaviour;
  MasterStatus status;     // the hostile master's row, once it has been refused
  const char* error;       // ... and what its error says
  bool idle;               // the client must be idle for the master to misbehave
  const char* name;
};

class HostileMatrixTest : public ::testing::TestWithParam<MatrixCase> {};

// Four real masters and one hostile one. Every acquire is decided by the real four; the
// hostile master's row ends up saying why it was refused; memory stays bounded meanwhile.
TEST_P(HostileMatrixTest, RealMastersDecideAndTheRowSaysWhy) {
  const MatrixCase& param = GetParam();
  RedisServerGroup real(4);
  HostileServer bad(param.behaviour);
  std::vector<std::string> uris = real.uris();
  uris.insert(uris.begin() + kHostile, bad.uri());
  auto options = options_for(uris);
  options.command_timeout = 150ms;
  options.connect_timeout = 400ms;
  options.stall_timeout = 400ms;
  // Once refused, the hostile master stays down for the rest of the case, so the next
  // acquire's row carries the reason instead of racing a reconnect.
  options.reconnect_min = 10s;
  options.reconnect_max = 10s;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(4, 5s));

  const bool peak_reset = support::reset_hwm();
  const long rss_before = support::rss_kib();
  Result last;
  bool refused = false;
  int acquires = 0;
  for (; acquires < (param.idle ? 30 : 150) && !refused; ++acquires) {
    std::this_thread::sleep_for(param.idle ? 150ms : 20ms);
    last = client.acquire("matrix" + std::to_string(acquires));
    ASSERT_EQ(last.outcome, Outcome::acquired) << format_result(last);
    expect_real_masters_decided(last);
    EXPECT_TRUE(client.release(*last.lock).ok());
    const auto& row = last.masters[kHostile];
    refused = row.status == param.status && row.error.find(param.error) != std::string::npos;
  }
  EXPECT_TRUE(refused) << "after " << acquires << " acquires:\n" << format_result(last);
  const long peak = peak_reset ? support::hwm_kib() : support::rss_kib();
  const long growth = peak - rss_before;
  std::printf("%s: refused after %d acquires; RSS %ld KiB before, %s %ld KiB (+%ld KiB); row: %s\n", param.name,
              acquires, rss_before, peak_reset ? "peak" : "now", peak, growth, last.masters[kHostile].error.c_str());
  EXPECT_LT(growth, kGrowthBoundKib);
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, HostileMatrixTest,
    ::testing::Values(
        MatrixCase{Behaviour::huge_bulk, MasterStatus::not_connected,
                   "bulk string of 2000000000 bytes: reply over max_reply_bytes (1048576)", false, "HugeBulk"},
        MatrixCase{Behaviour::huge_array, MasterStatus::not_connected,
                   "array of 200000000 elements: reply over max_elements (1024)", false, "HugeArray"},
        MatrixCase{Behaviour::endless_line, MasterStatus::not_connected, "reply over max_reply_bytes (1048576)", false,
                   "EndlessLine"},
        MatrixCase{Behaviour::slow_drip, MasterStatus::not_connected, "master stalled", false, "SlowDrip"},
        MatrixCase{Behaviour::resp3_push, MasterStatus::not_connected,
                   "protocol error: Protocol error, got \">\" as reply type byte", false, "Resp3Push"},
        MatrixCase{Behaviour::extra_reply, MasterStatus::not_connected, "with no command outstanding", false,
                   "ExtraReply"},
        MatrixCase{Behaviour::swapped_replies, MasterStatus::server_error, "unexpected integer reply 1", false,
                   "SwappedReplies"},
        MatrixCase{Behaviour::unsolicited_idle, MasterStatus::not_connected, "with no command outstanding", true,
                   "UnsolicitedWhileIdle"},
        MatrixCase{Behaviour::huge_bulk_idle, MasterStatus::not_connected, "with no command outstanding", true,
                   "HugeBulkWhileIdle"},
        MatrixCase{Behaviour::endless_handshake, MasterStatus::not_connected, "connect timed out", false,
                   "EndlessHandshake"}),
    [](const ::testing::TestParamInfo<MatrixCase>& param_info) { return std::string(param_info.param.name); });

// An idle client (nothing outstanding, so no stall check runs) while one master streams a
// huge bulk string unasked: the client refuses the first bytes instead of holding them.
TEST(HostileMasterTest, IdleClientHoldsNothingAnUnaskedStreamSends) {
  RedisServerGroup real(4);
  HostileServer bad(Behaviour::huge_bulk_idle);
  std::vector<std::string> uris = real.uris();
  uris.insert(uris.begin() + kHostile, bad.uri());
  auto options = options_for(uris);
  options.reconnect_min = 10s;
  options.reconnect_max = 10s;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(5, 5s));
  const bool peak_reset = support::reset_hwm();
  const long rss_before = support::rss_kib();
  // Time for the stream to arrive (it starts 50 ms after the handshake); not a measurement.
  std::this_thread::sleep_for(2s);
  const long peak = peak_reset ? support::hwm_kib() : support::rss_kib();
  const Result held = client.acquire("idle");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  expect_real_masters_decided(held);
  EXPECT_EQ(held.masters[kHostile].status, MasterStatus::not_connected) << format_result(held);
  EXPECT_NE(held.masters[kHostile].error.find("bytes arrived with no command outstanding"), std::string::npos)
      << format_result(held);
  std::printf("idle client, unasked huge bulk for 2 s: RSS %ld KiB before, %s %ld KiB (+%ld KiB)\n", rss_before,
              peak_reset ? "peak" : "now", peak, peak - rss_before);
  EXPECT_LT(peak - rss_before, kGrowthBoundKib);
}

// A line that never ends, from one master of five, with the library's default 50 ms
// command timeout: the four real masters still decide every acquire within it (a decision
// from them after the deadline would be quorum_unreachable). Reconnects are quick, so the
// hostile master keeps coming back and streaming. Prints the worst acquire, asserts none.
TEST(HostileMasterTest, EndlessLineDoesNotDelayTheRealFour) {
  RedisServerGroup real(4);
  HostileServer bad(Behaviour::endless_line);
  std::vector<std::string> uris = real.uris();
  uris.insert(uris.begin() + kHostile, bad.uri());
  auto options = options_for(uris);
  options.command_timeout = 50ms;
  options.reconnect_min = 10ms;
  options.reconnect_max = 20ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(5, 5s));
  std::chrono::steady_clock::duration worst{};
  int refusals = 0;
  int acquires = 0;
  Result last;
  for (; acquires < 300 && (acquires < 40 || refusals == 0); ++acquires) {
    const auto start = std::chrono::steady_clock::now();
    last = client.acquire("endless" + std::to_string(acquires));
    worst = std::max(worst, std::chrono::steady_clock::now() - start);
    ASSERT_EQ(last.outcome, Outcome::acquired) << format_result(last);
    expect_real_masters_decided(last);
    EXPECT_NE(last.masters[kHostile].status, MasterStatus::ok) << format_result(last);
    if (last.masters[kHostile].status == MasterStatus::not_connected &&
        last.masters[kHostile].error.find("max_reply_bytes") != std::string::npos) {
      ++refusals;
    }
    EXPECT_TRUE(client.release(*last.lock).ok());
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GT(refusals, 0) << format_result(last);
  std::printf("endless line, 1 of 5 masters: %d acquires, worst %.1f ms (command_timeout 50 ms), %d rows naming "
              "max_reply_bytes\n",
              acquires, std::chrono::duration<double, std::milli>(worst).count(), refusals);
}

// FAILS (a hole): a master whose fencing counter is beyond what the raise script compares
// exactly (it compares Lua numbers, doubles: exact up to 2^53) was believed. Its GET, read by
// the fence catch-up of every other master, and its round-1 INCR, the highest of the granting
// quorum's, were written into the honest masters' counters (strtoull, unbounded), where every
// INCR then failed ("increment or decrement would overflow"): fencing ended fleet-wide, and
// the value outlived the hostile master. Beyond 2^53 a raise could also be acknowledged below
// its token (doubles 1024 apart near 2^62). Now such a counter is not counted.
TEST(HostileMasterTest, AHugeFencingCounterOnOneMasterIsNotWrittenIntoTheOthers) {
  RedisServerGroup real(4);
  HostileServer bad(Behaviour::huge_fence);
  std::vector<std::string> uris = real.uris();
  uris.insert(uris.begin() + kHostile, bad.uri());
  auto options = options_for(uris);
  options.command_timeout = 100ms;  // the catch-up waits one command deadline first
  Client client(options);
  ASSERT_TRUE(client.wait_connected(5, 5s));
  // The real masters' catch-ups read the hostile counter too (and must not count it). Waited
  // for here: the acquire's 20 retries, 5 ms apart, lasted about as long as the catch-up's wait
  // of one command deadline, and a clean-clone CI run saw them run out first (2 of the real
  // masters still "not caught up" after 27 attempts).
  ASSERT_TRUE(eventually([&] {
    const FleetStatus status = client.status();
    for (std::size_t i = 0; i < status.masters.size(); ++i) {
      if (i != kHostile && !status.masters[i].fence_caught_up) return false;
    }
    return true;
  })) << "the real masters' fencing counters were not caught up";
  AcquireOptions fenced;
  fenced.fencing = true;
  fenced.retry_count = 20;
  const Result held = client.acquire("fenced", fenced);
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  EXPECT_LE(held.lock->fence, (std::uint64_t{1} << 53) - 1) << format_result(held);
  EXPECT_NE(held.masters[kHostile].status, MasterStatus::ok) << format_result(held);  // refused, or pending
  for (std::size_t i = 0; i < real.size(); ++i) {
    EXPECT_NE(get(real[i], options.fence_key), kHugeFence) << "real master " << i;
  }
  client.release(*held.lock);
  const Result again = client.acquire("fenced", fenced);
  ASSERT_EQ(again.outcome, Outcome::acquired) << format_result(again);
  EXPECT_GT(again.lock->fence, held.lock->fence) << format_result(again);
}

// A master answering NOSCRIPT even to the EVAL sent again after a NOSCRIPT (Redis never would:
// EVAL loads the script) is sent that EVAL once per release, not again and again: the resend is
// bounded by one per master per round (Round::on_reply, learned_[index].eval_sent). The lock's
// other masters release it.
TEST(HostileMasterTest, AMasterAnsweringNoscriptToEveryScriptIsSentOneEvalPerRelease) {
  RedisServerGroup real(2);
  HostileServer bad(Behaviour::noscript_always);
  auto options = options_for(std::vector<std::string>{bad.uri(), real[0].uri(), real[1].uri()});
  options.fence_catch_up = false;  // its raise is an EVAL too
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  constexpr int kCycles = 20;
  for (int i = 0; i < kCycles; ++i) {
    const Result held = client.acquire("noscript-bound");
    ASSERT_TRUE(held) << format_result(held);
    const Result released = client.release(*held.lock);
    ASSERT_EQ(released.outcome, Outcome::released) << format_result(released);
  }
  std::this_thread::sleep_for(200ms);  // any resend still on its way
  EXPECT_EQ(bad.lock_evals(), kCycles) << "a NOSCRIPT answer to the EVAL was followed by another EVAL";
  EXPECT_EQ(with_key(real, "redlock:noscript-bound"), 0u);
}

// FAILS (a hole, under the asan preset): TIME's seconds * 10^6 + microseconds overflowed (signed:
// UBSan aborts; other builds showed a garbage clock offset). A time that is not one is now a
// warning naming what the master said, and no offset.
TEST(HostileMasterTest, AnAbsurdTimeIsAWarningNotAnOverflow) {
  RedisServerGroup real(2);
  HostileServer bad(Behaviour::huge_time);
  std::vector<std::string> uris = real.uris();
  uris.push_back(bad.uri());
  Client client(options_for(uris));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const FleetStatus status = client.status();
  ASSERT_EQ(status.masters.size(), 3u);
  EXPECT_FALSE(status.masters[2].clock_offset.has_value());
  bool named = false;
  for (const auto& warning : status.masters[2].warnings) named = named || warning.find("9223372036854775807") != std::string::npos;
  EXPECT_TRUE(named) << "no warning names the bad time";
  EXPECT_TRUE(status.masters[0].clock_offset.has_value());
}

// FAILS (a hole): a master's handshake denial was kept whole on its connection, and every row
// of every round it then missed copied it, N + 2 times (not_permitted, Diagnostics::shown and
// one redaction per endpoint) before cutting it: 1 MB a master cost each round about 7 MB of
// copying (ThroughputHolds prints what that cost). A text no Redis sends is kept by its size.
TEST(HostileMasterTest, AHugeDenialTextIsKeptByItsSize) {
  RedisServerGroup real(4);
  HostileServer bad(Behaviour::huge_denial);
  std::vector<std::string> uris = real.uris();
  uris.insert(uris.begin() + kHostile, bad.uri());
  Client client(options_for(uris));
  ASSERT_TRUE(client.wait_connected(5, 5s));
  const Result held = client.acquire("denied");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  EXPECT_EQ(held.masters[kHostile].status, MasterStatus::not_permitted) << format_result(held);
  EXPECT_NE(held.masters[kHostile].error.find("a 1000000-byte text, not kept"), std::string::npos)
      << held.masters[kHostile].error.substr(0, 200);
  client.release(*held.lock);
}

// A hole (a review): a run_id of 1 MiB was kept whole, and with two masters that said the same
// (one server listed twice, or two hostile ones) every acquire built "same server (run_id ...)"
// from it and masked it once per endpoint on the loop thread: 7.7 ms of CPU per acquire
// instead of 0.28 at N = 5. Redis's run_id has 40 characters; a longer one is not kept.
TEST(HostileMasterTest, AHugeRunIdIsNotKept) {
  // Three servers that say the same run_id: one vote counts, the other two rows say why not.
  HostileServer first(Behaviour::huge_run_id);
  HostileServer second(Behaviour::huge_run_id);
  HostileServer third(Behaviour::huge_run_id);
  auto options = options_for({first.uri(), second.uri(), third.uri()});
  options.restart_guard = false;
  options.retry_count = 0;
  options.on_warning = [](const std::string&) {};
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const std::string piece(100, 'a');
  const Result result = client.acquire("twins");
  for (const auto& row : result.masters)
    EXPECT_EQ(row.error.find(piece), std::string::npos) << row.error.substr(0, 200);
  const FleetStatus status = client.status();
  ASSERT_EQ(status.masters.size(), 3u);
  for (const MasterReport& master : status.masters) {
    std::string said = master.error + "\n" + master.not_counted_reason + "\n" + master.role_error + "\n";
    for (const auto& warning : master.warnings) said += warning + "\n";
    EXPECT_EQ(said.find(piece), std::string::npos) << said.substr(0, 300);
  }
}

// FAILS (a hole, review of the test above's fix): the warning for a TIME that is not one showed
// what the master sent unmasked, and a master may echo the password it was sent.
TEST(HostileMasterTest, ATimeThatIsNotOneIsShownWithoutThePassword) {
  RedisServerGroup real(2);
  HostileServer bad(Behaviour::password_time);
  std::vector<std::string> uris = real.uris();
  uris.push_back("redis://:" + std::string(kEchoedPassword) + "@" + bad.uri().substr(std::string("redis://").size()));
  Client client(options_for(uris));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const FleetStatus status = client.status();
  ASSERT_EQ(status.masters.size(), 3u);
  bool warned = false;
  for (const auto& warning : status.masters[2].warnings) {
    warned = warned || warning.find("TIME said") != std::string::npos;
    EXPECT_EQ(warning.find(kEchoedPassword), std::string::npos) << warning;
  }
  EXPECT_TRUE(warned) << "no warning about the time";
}

// Throughput with one hostile master of five, against five real ones. A printed figure, not
// an assertion on time; every acquire must still succeed.
TEST(HostileMasterTest, ThroughputHolds) {
  struct Setup {
    const char* name;
    std::optional<Behaviour> hostile;
  };
  for (const Setup& setup : {Setup{"5 real", std::nullopt}, Setup{"4 real + endless line", Behaviour::endless_line},
                             Setup{"4 real + huge bulk", Behaviour::huge_bulk},
                             Setup{"4 real + huge array", Behaviour::huge_array},
                             Setup{"4 real + 1 MB denial", Behaviour::huge_denial}}) {
    RedisServerGroup real(setup.hostile ? 4 : 5);
    std::optional<HostileServer> bad;
    std::vector<std::string> uris = real.uris();
    if (setup.hostile) {
      bad.emplace(*setup.hostile);
      uris.insert(uris.begin() + kHostile, bad->uri());
    }
    auto options = options_for(uris);
    options.reconnect_min = 10ms;
    options.reconnect_max = 20ms;
    Client client(options);
    ASSERT_TRUE(client.wait_connected(setup.hostile ? 4 : 5, 5s));
    const auto start = std::chrono::steady_clock::now();
    int cycles = 0;
    while (std::chrono::steady_clock::now() - start < 1500ms) {
      const Result held = client.acquire("throughput" + std::to_string(cycles));
      ASSERT_EQ(held.outcome, Outcome::acquired) << setup.name << "\n" << format_result(held);
      client.release(*held.lock);
      ++cycles;
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("throughput, %s: %.0f acquire+release cycles/s\n", setup.name, cycles / seconds);
  }
}

// Review 61: a master that answers, in order, one reply every 300 ms (under stall_timeout,
// 400 ms) while the client sends every 20 ms: its backlog and each command's wait grow without
// bound, yet it never goes 400 ms without answering. With the stall check counted from the
// last answer alone it was kept for good (8.0 s, 366 acquires, every row timed out); the oldest
// command's own wait is bounded (8 x stall_timeout: dropped after about 3.4 s).
TEST(HostileMasterTest, AMasterAnsweringSlowerThanAskedIsDroppedAsStalled) {
  RedisServerGroup real(4);
  HostileServer bad(Behaviour::slow_answers);
  std::vector<std::string> uris = real.uris();
  uris.insert(uris.begin() + kHostile, bad.uri());
  auto options = options_for(uris);
  options.command_timeout = 150ms;
  options.stall_timeout = 400ms;
  options.reconnect_min = 10s;
  options.reconnect_max = 10s;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(5, 5s));
  const auto start = std::chrono::steady_clock::now();
  int acquires = 0;
  int stalled = 0;
  int timeouts = 0;
  Result last;
  while (std::chrono::steady_clock::now() - start < 8s && stalled == 0) {
    last = client.acquire("slow" + std::to_string(acquires++));
    ASSERT_EQ(last.outcome, Outcome::acquired) << format_result(last);
    if (last.masters[kHostile].error.find("master stalled") != std::string::npos) ++stalled;
    if (last.masters[kHostile].status == MasterStatus::timeout) ++timeouts;
    EXPECT_TRUE(client.release(*last.lock).ok());
    std::this_thread::sleep_for(20ms);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("slow answers: %d acquires in %.1f s, %d rows timed out, stalled row seen: %d; last row: %s\n", acquires,
              secs, timeouts, stalled, last.masters[kHostile].error.c_str());
  EXPECT_GT(stalled, 0) << format_result(last);
}

// Review 61: a master frozen (SIGSTOP) in the middle of a backlog is dropped about
// stall_timeout after its last answer (1.1 to 1.5 s after the freeze here on a plain build:
// replies already in the socket keep coming, and the loop, busy with the burst, runs the check
// late; 3.0 s under TSan). Bounded by the oldest command's wait (8 x stall_timeout, 4 s) plus
// the loop's lateness. Prints the time from the freeze to the first row naming the stall.
TEST(HostileMasterTest, AMasterFrozenMidBacklogIsDroppedWithinStallTimeout) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  options.command_timeout = 100ms;
  options.stall_timeout = 500ms;
  options.reconnect_min = 10s;
  options.reconnect_max = 10s;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  std::atomic<int> done{0};
  for (int i = 0; i < 20000; ++i) {
    client.acquire_async("burst" + std::to_string(i), [&](Result) { ++done; });
  }
  std::this_thread::sleep_for(30ms);
  masters[0].freeze();
  const auto frozen = std::chrono::steady_clock::now();
  std::printf("frozen with %d of 20000 acquires done\n", done.load());
  Result last;
  double seen = -1;
  for (int i = 0; i < 400; ++i) {
    last = client.acquire("probe" + std::to_string(i));
    if (last.masters[0].error.find("master stalled") != std::string::npos) {
      seen = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - frozen).count();
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  masters[0].thaw();
  std::printf("frozen mid-backlog: stall row after %.0f ms (stall_timeout 500 ms): %s\n", seen,
              last.masters[0].error.c_str());
  EXPECT_GT(seen, 0) << format_result(last);
  EXPECT_LT(seen, 6000) << format_result(last);
}
}  // namespace
}  // namespace redlock::testing

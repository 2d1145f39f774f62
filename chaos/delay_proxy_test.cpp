// SPDX-License-Identifier: Apache-2.0
// Tests for the delaying TCP proxy (delay_proxy.h), always against a real redis-server.
// Timing assertions are lower bounds (the delay must be there), or upper bounds of a second
// or more, or "fast at least once in several tries", so a loaded machine cannot fail them.
#include "support/delay_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/hiredis_handle.h"
#include "support/redis_server.h"

namespace {

using redlock::support::listen_on_free_port;
using redlock::support::ListeningSocket;
using redlock::support::ProxyRoute;
using redlock::support::run_delay_proxies;
using redlock::support::RedisServer;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using Context = redlock::support::RedisContextPtr;
using ReplyPtr = redlock::support::RedisReplyPtr;
using redlock::support::to_timeval;

// A blocking hiredis connection to 127.0.0.1:port with a generous I/O timeout.
Context connect_to(std::uint16_t port, std::chrono::milliseconds timeout = 5s) {
  const timeval tv = to_timeval(timeout);
  Context context(redisConnectWithTimeout("127.0.0.1", port, tv));
  if (!context) throw std::bad_alloc();
  if (context->err == 0) redisSetTimeout(context.get(), tv);
  return context;
}

ReplyPtr run(redisContext* context, const std::vector<std::string>& argv) {
  return redlock::support::command_argv(*context, argv);
}

bool is_pong(const ReplyPtr& reply) {
  return reply && reply->type == REDIS_REPLY_STATUS && std::string(reply->str, reply->len) == "PONG";
}

// One PING; the time it took, or a negative duration if it did not get PONG.
Clock::duration ping_round_trip(redisContext* context) {
  const auto start = Clock::now();
  const ReplyPtr reply = run(context, {"PING"});
  const auto elapsed = Clock::now() - start;
  return is_pong(reply) ? elapsed : Clock::duration(-1);
}

// True if one of `attempts` PINGs comes back faster than `limit`.
bool some_ping_faster_than(redisContext* context, Clock::duration limit, int attempts = 10) {
  for (int i = 0; i < attempts; ++i) {
    const auto rtt = ping_round_trip(context);
    if (rtt >= Clock::duration::zero() && rtt < limit) return true;
  }
  return false;
}

void flush_output(redisContext* context) {
  int done = 0;
  while (done == 0) ASSERT_EQ(redisBufferWrite(context, &done), REDIS_OK) << context->errstr;
}

// Whether connecting to 127.0.0.1:port is refused (nothing listening).
bool connection_refused(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  const int error = errno;
  ::close(fd);
  return rc != 0 && error == ECONNREFUSED;
}

// Waits for the peer to close: true if the read ends in EOF or a reset (not a timeout).
bool read_sees_close(redisContext* context) {
  void* raw = nullptr;
  const int rc = redisGetReply(context, &raw);
  ReplyPtr reply(static_cast<redisReply*>(raw));
  if (rc == REDIS_OK) return false;
  return context->err == REDIS_ERR_EOF || (context->err == REDIS_ERR_IO && errno == ECONNRESET);
}

// One route to `target_port`, served by run_delay_proxies on a thread of this process.
class ProxyThread {
 public:
  explicit ProxyThread(std::uint16_t target_port, std::chrono::nanoseconds delay = 0ns)
      : socket_(listen_on_free_port()) {
    set_delay(delay);
    thread_ = std::thread([this, target_port] {
      try {
        run_delay_proxies({ProxyRoute{socket_.fd, target_port, &delay_ns_}}, stop_);
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      returned_at_ = Clock::now();
      returned_.store(true, std::memory_order_release);
    });
  }
  ~ProxyThread() { stop_and_join(); }
  ProxyThread(const ProxyThread&) = delete;
  ProxyThread& operator=(const ProxyThread&) = delete;

  std::uint16_t port() const { return socket_.port; }
  void set_delay(std::chrono::nanoseconds delay) { delay_ns_.store(delay.count(), std::memory_order_relaxed); }
  void request_stop() { stop_.store(true, std::memory_order_release); }
  bool returned() const { return returned_.load(std::memory_order_acquire); }
  // Only after returned() or stop_and_join().
  Clock::time_point returned_at() const { return returned_at_; }
  const std::string& error() const { return error_; }
  void stop_and_join() {
    request_stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  ListeningSocket socket_;
  std::atomic<std::int64_t> delay_ns_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> returned_{false};
  Clock::time_point returned_at_{};
  std::string error_;
  std::thread thread_;
};

class DelayProxy : public ::testing::Test {
 protected:
  // A test client writing to a connection the proxy has closed gets EPIPE, not a signal.
  void SetUp() override { std::signal(SIGPIPE, SIG_IGN); }
};

// (a) delay 0: PING and a 1 MiB binary SET/GET come through byte for byte.
TEST_F(DelayProxy, ZeroDelayForwardsBytesExactly) {
  RedisServer server;
  ProxyThread proxy(server.port());
  Context client = connect_to(proxy.port());
  ASSERT_EQ(client->err, 0) << client->errstr;
  ASSERT_TRUE(is_pong(run(client.get(), {"PING"})));

  std::mt19937 random(12345);
  std::string value(1 << 20, '\0');
  for (char& c : value) c = static_cast<char>(random() & 0xff);
  value.replace(100, 4, "\r\n\0\n", 4);  // protocol-looking bytes in the middle, for good measure

  const ReplyPtr set = run(client.get(), {"SET", "big", value});
  ASSERT_TRUE(set) << client->errstr;
  ASSERT_EQ(set->type, REDIS_REPLY_STATUS);
  EXPECT_EQ(std::string(set->str, set->len), "OK");

  const ReplyPtr get = run(client.get(), {"GET", "big"});
  ASSERT_TRUE(get) << client->errstr;
  ASSERT_EQ(get->type, REDIS_REPLY_STRING);
  ASSERT_EQ(get->len, value.size());
  EXPECT_TRUE(std::string(get->str, get->len) == value);

  // What the server stored, read directly, is the same.
  EXPECT_TRUE(server.command({"GET", "big"}).str == value);
  EXPECT_TRUE(is_pong(run(client.get(), {"PING"})));
}

// (b) a 100 ms one-way delay makes a round trip take two delays.
TEST_F(DelayProxy, DelayAppliesInBothDirections) {
  RedisServer server;
  ProxyThread proxy(server.port(), 100ms);
  Context client = connect_to(proxy.port());
  ASSERT_EQ(client->err, 0) << client->errstr;
  for (int i = 0; i < 3; ++i) {
    const auto rtt = ping_round_trip(client.get());
    ASSERT_GE(rtt, Clock::duration::zero()) << client->errstr;
    EXPECT_GE(rtt, 200ms) << "round trip " << std::chrono::duration<double, std::milli>(rtt).count() << " ms";
  }
}

// Sub-millisecond delays are held as given, not rounded up to libuv's millisecond timers
// (redlock_compare's zone profiles use 0.1 ms one way): a 150 us one-way delay makes every
// round trip at least 300 us, and at least one of many round trips stays under 1.5 ms. With
// the delay rounded up to a whole millisecond per direction, no round trip could be under 2 ms.
TEST_F(DelayProxy, SubMillisecondDelayIsHeldWithoutRounding) {
  RedisServer server;
  ProxyThread proxy(server.port());
  Context client = connect_to(proxy.port());
  ASSERT_EQ(client->err, 0) << client->errstr;
  std::vector<double> direct_us;  // through the proxy with no delay, for the printed comparison
  for (int i = 0; i < 50; ++i) {
    const auto rtt = ping_round_trip(client.get());
    ASSERT_GE(rtt, Clock::duration::zero()) << client->errstr;
    direct_us.push_back(std::chrono::duration<double, std::micro>(rtt).count());
  }
  std::sort(direct_us.begin(), direct_us.end());
  proxy.set_delay(150us);
  std::vector<double> rtt_us;
  for (int i = 0; i < 200; ++i) {
    const auto rtt = ping_round_trip(client.get());
    ASSERT_GE(rtt, Clock::duration::zero()) << client->errstr;
    EXPECT_GE(rtt, 300us) << "round trip " << std::chrono::duration<double, std::micro>(rtt).count() << " us";
    rtt_us.push_back(std::chrono::duration<double, std::micro>(rtt).count());
  }
  std::sort(rtt_us.begin(), rtt_us.end());
  std::printf("[ info ] 150 us one way: round trip min %.0f us, p50 %.0f us, p90 %.0f us (300 us added to a "
              "p50 of %.0f us without delay)\n",
              rtt_us.front(), rtt_us[rtt_us.size() / 2], rtt_us[rtt_us.size() * 9 / 10], direct_us[direct_us.size() / 2]);
  EXPECT_LT(rtt_us.front(), 1500.0) << "every round trip took 1.5 ms or more: the delay was rounded up";
}

// Pipelines `count` RPUSHes of first, first + 1, ... onto the list "order" (no reads).
void pipeline_rpush(redisContext* context, int first, int count) {
  for (int i = first; i < first + count; ++i) redisAppendCommand(context, "RPUSH order %d", i);
  flush_output(context);
}

// Reads replies to RPUSHes: the list length, which must count up from `first`.
void expect_lengths(redisContext* context, long long first, long long count) {
  for (long long expected = first; expected < first + count; ++expected) {
    void* raw = nullptr;
    ASSERT_EQ(redisGetReply(context, &raw), REDIS_OK) << context->errstr;
    const ReplyPtr reply(static_cast<redisReply*>(raw));
    ASSERT_EQ(reply->type, REDIS_REPLY_INTEGER);
    ASSERT_EQ(reply->integer, expected);
  }
}

// (c) lowering the delay on a live connection makes later round trips fast, and pipelines
// sent across the change keep their order in both directions. RPUSH rather than INCR: its
// replies count up like INCR's, and the list shows the order the server received them in.
TEST_F(DelayProxy, DelayChangeAppliesToLaterBytesInOrder) {
  RedisServer server;
  ProxyThread proxy(server.port(), 100ms);
  Context client = connect_to(proxy.port());
  ASSERT_EQ(client->err, 0) << client->errstr;
  const auto slow = ping_round_trip(client.get());
  ASSERT_GE(slow, 200ms);

  proxy.set_delay(0ns);
  EXPECT_TRUE(some_ping_faster_than(client.get(), 150ms));

  // Toward the server: 250 commands read by the proxy at 100 ms, then 250 read at 0 ms. The
  // later ones are due first but must still leave after the earlier ones.
  proxy.set_delay(100ms);
  auto start = Clock::now();
  pipeline_rpush(client.get(), 1, 250);
  std::this_thread::sleep_for(30ms);  // let the proxy read the first half under the old delay
  proxy.set_delay(0ns);
  pipeline_rpush(client.get(), 251, 250);
  expect_lengths(client.get(), 1, 500);
  EXPECT_GE(Clock::now() - start, 100ms);  // the first half did wait

  // Toward the client: the replies to the first 250 are queued (read from the server at
  // ~100 ms, due at ~200 ms) when the delay drops and the replies to the next 250 arrive.
  proxy.set_delay(100ms);
  start = Clock::now();
  pipeline_rpush(client.get(), 501, 250);
  std::this_thread::sleep_for(150ms);
  proxy.set_delay(0ns);
  pipeline_rpush(client.get(), 751, 250);
  expect_lengths(client.get(), 501, 500);
  EXPECT_GE(Clock::now() - start, 200ms);

  const auto list = server.command({"LRANGE", "order", "0", "-1"});
  ASSERT_EQ(list.elements.size(), 1000u);
  for (std::size_t i = 0; i < list.elements.size(); ++i) ASSERT_EQ(list.elements[i].str, std::to_string(i + 1));
  EXPECT_TRUE(some_ping_faster_than(client.get(), 150ms));
}

// (d) the server dying closes the client's connection; while it is down a new connection is
// closed (upstream connect refused); after a restart a new connection works.
TEST_F(DelayProxy, ServerDeathClosesClientAndRestartWorks) {
  RedisServer server;
  ProxyThread proxy(server.port());
  Context client = connect_to(proxy.port(), 1s);  // reads give up after one second
  ASSERT_EQ(client->err, 0) << client->errstr;
  ASSERT_TRUE(is_pong(run(client.get(), {"PING"})));

  server.kill();
  EXPECT_TRUE(read_sees_close(client.get())) << "err " << client->err << ": " << client->errstr;

  Context while_down = connect_to(proxy.port(), 1s);
  ASSERT_EQ(while_down->err, 0) << while_down->errstr;  // the proxy still accepts ...
  EXPECT_TRUE(read_sees_close(while_down.get()))        // ... and closes it at once
      << "err " << while_down->err << ": " << while_down->errstr;

  server.restart();
  Context again = connect_to(proxy.port());
  ASSERT_EQ(again->err, 0) << again->errstr;
  EXPECT_TRUE(is_pong(run(again.get(), {"PING"}))) << again->errstr;
}

// A client that sends and closes at once still has its command delivered, one delay later
// (the close travels behind the data, as on a slow network).
TEST_F(DelayProxy, ClientCloseStillDeliversWhatItSent) {
  RedisServer server;
  ProxyThread proxy(server.port(), 200ms);
  Context client = connect_to(proxy.port());
  ASSERT_EQ(client->err, 0) << client->errstr;
  const auto sent_at = Clock::now();
  redisAppendCommand(client.get(), "SET late value");
  flush_output(client.get());
  client.reset();  // closes the socket without waiting for the reply

  const auto early = server.command({"GET", "late"});
  if (Clock::now() - sent_at < 150ms) {
    EXPECT_EQ(early.type, redlock::support::Reply::Type::nil);
  }
  bool arrived = false;
  while (!arrived && Clock::now() - sent_at < 5s) {
    arrived = server.command({"GET", "late"}).str == "value";
    if (!arrived) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(arrived);
  EXPECT_GE(Clock::now() - sent_at, 200ms);
}

// (e) the stop flag: run_delay_proxies returns promptly, closing its connections and the
// listening socket.
TEST_F(DelayProxy, StopReturnsPromptlyAndClosesEverything) {
  RedisServer server;
  ProxyThread proxy(server.port(), 50ms);
  Context client = connect_to(proxy.port(), 2s);
  ASSERT_EQ(client->err, 0) << client->errstr;
  ASSERT_TRUE(is_pong(run(client.get(), {"PING"})));

  const auto stop_at = Clock::now();
  proxy.request_stop();
  while (!proxy.returned() && Clock::now() - stop_at < 5s) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(proxy.returned());
  const auto took = proxy.returned_at() - stop_at;
  // Polled every 5 ms; 500 ms leaves room for a loaded machine or a sanitizer build.
  EXPECT_LT(took, 500ms) << std::chrono::duration<double, std::milli>(took).count() << " ms";
  EXPECT_EQ(proxy.error(), "");
  proxy.stop_and_join();

  EXPECT_TRUE(connection_refused(proxy.port()));
  EXPECT_TRUE(read_sees_close(client.get())) << "err " << client->err << ": " << client->errstr;
}

// Writes as much of data[offset..] to the non-blocking fd as goes through, waiting up to
// `patience` for each stall. Returns the new offset.
std::size_t send_until_stalled(int fd, const std::string& data, std::size_t offset, int patience_ms) {
  while (offset < data.size()) {
    const std::size_t chunk = std::min<std::size_t>(data.size() - offset, 1 << 20);
    const ssize_t n = ::send(fd, data.data() + offset, chunk, MSG_NOSIGNAL);
    if (n > 0) {
      offset += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      pollfd writable{fd, POLLOUT, 0};
      if (::poll(&writable, 1, patience_ms) == 0) break;  // no progress: stalled
      continue;
    }
    break;  // error
  }
  return offset;
}

// Backpressure: while the server is frozen (reading nothing) the proxy stops reading the
// client once 8 MiB are queued, so a 64 MiB SET stalls well short of its end instead of
// piling up in the proxy; after the thaw the whole value arrives intact.
TEST_F(DelayProxy, FrozenServerStallsClientAndValueSurvives) {
  RedisServer server;
  ProxyThread proxy(server.port());
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(proxy.port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK), 0);

  // Larger than what the kernel buffers on both sides and the proxy's own 8 MiB can hold,
  // so the writer must stall; small enough for sanitizer builds to copy quickly.
  constexpr std::size_t kValueBytes = 32u << 20;
  std::string value(kValueBytes, '\0');
  std::uint64_t state = 777;  // an LCG, eight bytes a step: cheap enough for sanitizer builds
  for (std::size_t i = 0; i < kValueBytes; i += sizeof(state)) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    const std::uint64_t word = state ^ (state >> 29);
    std::memcpy(value.data() + i, &word, sizeof(word));
  }
  const std::string request =
      "*3\r\n$3\r\nSET\r\n$3\r\nbig\r\n$" + std::to_string(kValueBytes) + "\r\n" + value + "\r\n";

  server.freeze();
  std::size_t sent = send_until_stalled(fd, request, 0, 500);
  // Kernel buffers on both sides of the proxy hold a few MiB each; the proxy itself 8 MiB.
  EXPECT_LT(sent, request.size()) << "sent all " << (sent >> 20) << " MiB: nothing stalled";
  std::printf("[ info ] stalled after %.1f MiB with the server frozen\n", static_cast<double>(sent) / (1 << 20));
  server.thaw();

  sent = send_until_stalled(fd, request, sent, 10'000);
  ASSERT_EQ(sent, request.size());
  std::string reply;
  while (reply.size() < 5) {
    pollfd readable{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&readable, 1, 10'000), 1) << "no reply to the SET";
    char buffer[64];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    ASSERT_GT(n, 0);
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(reply, "+OK\r\n");
  ::close(fd);

  Context direct = connect_to(server.port(), 10s);
  ASSERT_EQ(direct->err, 0) << direct->errstr;
  const ReplyPtr stored = run(direct.get(), {"GET", "big"});
  ASSERT_TRUE(stored) << direct->errstr;
  ASSERT_EQ(stored->type, REDIS_REPLY_STRING);
  ASSERT_EQ(stored->len, value.size());
  EXPECT_TRUE(std::string(stored->str, stored->len) == value);
}

// The real use: the proxy in a forked child, two routes, delays changed by the parent
// through MAP_SHARED memory; the child is stopped through the same memory and reaped by PID.
struct SharedControl {
  std::atomic<std::int64_t> delay_a{0};
  std::atomic<std::int64_t> delay_b{0};
  std::atomic<bool> stop{false};
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "cross-process atomics must be lock-free");

TEST_F(DelayProxy, RunsInForkedChildWithSharedDelay) {
  RedisServer server_a;
  RedisServer server_b;
  void* memory = ::mmap(nullptr, sizeof(SharedControl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(memory, MAP_FAILED);
  auto* control = new (memory) SharedControl;
  control->delay_a.store(std::chrono::nanoseconds(100ms).count());
  const ListeningSocket a = listen_on_free_port();
  const ListeningSocket b = listen_on_free_port();

  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(3);
    int status = 0;
    try {
      run_delay_proxies(
          {ProxyRoute{a.fd, server_a.port(), &control->delay_a}, ProxyRoute{b.fd, server_b.port(), &control->delay_b}},
          control->stop);
    } catch (...) {
      status = 2;
    }
    ::_exit(status);
  }
  ::close(a.fd);  // the child owns the listening sockets now
  ::close(b.fd);

  // Reaps the child on every way out of the test body.
  struct Reaper {
    pid_t pid;
    SharedControl* control;
    int status = -1;
    bool reaped = false;
    bool reap(std::chrono::milliseconds limit) {
      control->stop.store(true);
      const auto give_up = Clock::now() + limit;
      while (!reaped && Clock::now() < give_up) {
        const pid_t rc = ::waitpid(pid, &status, WNOHANG);
        if (rc == pid) reaped = true;
        if (rc < 0) break;
        if (!reaped) std::this_thread::sleep_for(2ms);
      }
      return reaped;
    }
    ~Reaper() {
      if (reaped) return;
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
  } reaper{child, control};

  {
    Context slow = connect_to(a.port);
    Context fast = connect_to(b.port);
    ASSERT_EQ(slow->err, 0) << slow->errstr;
    ASSERT_EQ(fast->err, 0) << fast->errstr;
    EXPECT_GE(ping_round_trip(slow.get()), 200ms);
    EXPECT_TRUE(some_ping_faster_than(fast.get(), 150ms));  // the other route is not delayed

    control->delay_a.store(0);
    EXPECT_TRUE(some_ping_faster_than(slow.get(), 150ms));
    control->delay_b.store(std::chrono::nanoseconds(100ms).count());
    EXPECT_GE(ping_round_trip(fast.get()), 200ms);

    const ReplyPtr set = run(slow.get(), {"SET", "k", "through-a"});
    ASSERT_TRUE(set) << slow->errstr;
    EXPECT_EQ(server_a.command({"GET", "k"}).str, "through-a");
  }

  ASSERT_TRUE(reaper.reap(5s)) << "proxy child did not exit after stop";
  ASSERT_TRUE(WIFEXITED(reaper.status));
  EXPECT_EQ(WEXITSTATUS(reaper.status), 0);
  EXPECT_TRUE(connection_refused(a.port));
  EXPECT_TRUE(connection_refused(b.port));
  control->~SharedControl();
  ::munmap(memory, sizeof(SharedControl));
}

}  // namespace

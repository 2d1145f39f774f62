// SPDX-License-Identifier: Apache-2.0
// redlock::Client over TLS (rediss://) against real TLS-only redis-servers
// (support/redis_server.h, RedisServerOptions::tls) with a test PKI generated per suite
// (support/tls_certs.h): acquire / extend / release for N = 1, 3, 5, mutual TLS, every
// handshake failure as its reason in the master's row (and no plaintext byte sent), a TLS
// master frozen mid-handshake and mid-round, the mixed-fleet rule, and secrets kept out of
// results and warnings. Mirrors ClientOptions::tls (include/redlock/options.h, tls.h).
//
// Two "servers" here are the test's own listening sockets (as in hostile_server_test and
// tls_session_test): one that answers a ClientHello in plaintext, one that never answers.
// Both record every byte they receive.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "detail/connection.h"
#include "detail/event_loop.h"
#include "redlock/client.h"
#include "redlock/errors.h"
#include "support/tls_certs.h"
#include "test_util.h"
#include "tls/tls_context.h"
#include "tls_test_base.h"

namespace redlock::testing {
namespace {

using support::RedisServerOptions;
using support::TestCertificate;
using support::TestPki;
using Clock = std::chrono::steady_clock;

class TlsClientTest : public TlsTestBase {
 protected:
  // Test options (no retries, no restart guard: test_util) trusting the test CA.
  static ClientOptions tls_options_for(const std::vector<std::string>& masters) {
    ClientOptions options = options_for(masters);
    options.tls.ca_file = pki_->ca_file();
    return options;
  }
};

std::string rows(const Result& result) { return format_result(result); }

// Acquires until master `index`'s row is `not_connected` with a text containing `reason`
// (the first attempt may still be waiting for the handshake), for at most 10 s.
Result acquire_until_reason(Client& client, const std::string& resource, const std::string& reason,
                            std::size_t index = 0) {
  Result result;
  eventually([&] {
    result = client.acquire(resource);
    if (result.lock) client.release(*result.lock);
    return result.masters.size() > index && result.masters[index].status == MasterStatus::not_connected &&
           result.masters[index].error.find(reason) != std::string::npos;
  }, 10s);
  return result;
}

// --------------------------------------------------------------------------------------
// Acquire, extend, release over TLS for N = 1, 3, 5

class TlsFleetTest : public TlsClientTest, public ::testing::WithParamInterface<std::size_t> {};

TEST_P(TlsFleetTest, AcquireExtendReleaseOverTls) {
  RedisServerGroup masters(GetParam(), tls_server(pki_->server()));
  auto options = tls_options_for(masters.uris());
  options.ttl = 5000ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(masters.size(), 10s));

  const Result held = client.acquire("tls-orders");
  ASSERT_EQ(held.outcome, Outcome::acquired) << rows(held);
  ASSERT_EQ(held.masters.size(), GetParam());
  for (const auto& row : held.masters) {
    EXPECT_EQ(row.endpoint.rfind("rediss://127.0.0.1:", 0), 0u) << row.endpoint;
  }
  // The helper reads the keys over TLS too: the token really is there.
  ASSERT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == masters.size(); }));

  const Result extended = client.extend(*held.lock, 20000ms);
  ASSERT_EQ(extended.outcome, Outcome::extended) << rows(extended);
  std::size_t renewed = 0;
  for (std::size_t i = 0; i < masters.size(); ++i) {
    if (masters[i].command({"PTTL", held.lock->key}).integer > 5000) ++renewed;
  }
  EXPECT_GE(renewed, client.quorum());

  const Result released = client.release(*extended.lock);
  ASSERT_EQ(released.outcome, Outcome::released) << rows(released);
  EXPECT_TRUE(eventually([&] { return with_key(masters, held.lock->key) == 0; }));

  // A second client is refused while the first holds it, over TLS as well.
  Client other(options);
  // A full TLS handshake under a sanitizer on a loaded machine may take longer than one
  // command_timeout: connect first, so the round measures the lock, not the handshake.
  ASSERT_TRUE(other.wait_connected(masters.size(), 10s));
  const Result again = client.acquire("tls-orders");
  ASSERT_TRUE(again) << rows(again);
  const Result refused = other.acquire("tls-orders");
  EXPECT_EQ(refused.outcome, Outcome::taken) << rows(refused);
}

INSTANTIATE_TEST_SUITE_P(N, TlsFleetTest, ::testing::Values(1u, 3u, 5u));

// What is queued when the Client closes is sent over TLS as on a plain socket: all of it.
// Review 48: the close encrypted one TLS record (16 KiB) of each connection's queue and
// dropped the rest; of 600 releases made just before ~Client, hundreds never reached the
// masters (their answers said "written to 3 of 3 masters"), the keys left for their ttl.
void releases_queued_at_the_clients_end(const support::RedisServerOptions& server, const ClientOptions& tls,
                                        bool flush_scripts) {
  RedisServerGroup masters(3, server);
  auto options = tls;
  options.masters = masters.uris();
  options.ttl = 60s;
  options.max_lock_ttl = 60s;
  constexpr int kLocks = 600;
  {
    Client client(options);
    ASSERT_TRUE(client.wait_connected(masters.size(), 10s));
    std::vector<std::future<Result>> granted;
    for (int i = 0; i < kLocks; ++i) {
      auto promise = std::make_shared<std::promise<Result>>();
      granted.push_back(promise->get_future());
      client.acquire_async("queued-" + std::to_string(i), [promise](Result r) { promise->set_value(std::move(r)); });
    }
    std::vector<Lock> locks;
    for (auto& future : granted) {
      const Result result = future.get();
      ASSERT_TRUE(result) << rows(result);
      locks.push_back(*result.lock);
    }
    // The SETs are answered at a quorum: wait for the third master's too, or a release could
    // go out before it.
    ASSERT_TRUE(eventually([&] {
      for (std::size_t i = 0; i < masters.size(); ++i) {
        if (masters[i].command({"DBSIZE"}).integer != kLocks) return false;
      }
      return true;
    }));
    if (flush_scripts) {
      for (std::size_t i = 0; i < masters.size(); ++i) masters[i].command({"SCRIPT", "FLUSH"});
    }
    // The loop held in a callback while the releases and the shutdown queue up behind it: they
    // run in one pass, and the close finds every release in the connection's queue.
    std::promise<void> holding_loop;
    client.acquire_async("loop-holder", [&](Result r) {
      if (r.lock) client.release_async(*r.lock, [](Result) {});
      holding_loop.set_value();
      std::this_thread::sleep_for(300ms);
    });
    holding_loop.get_future().wait();
    for (const Lock& lock : locks) client.release_async(lock, [](Result) {});
  }  // ~Client with the releases queued
  EXPECT_TRUE(eventually(
      [&] {
        for (std::size_t i = 0; i < masters.size(); ++i) {
          if (masters[i].command({"DBSIZE"}).integer != 0) return false;
        }
        return true;
      },
      3s))
      << "keys left: " << masters[0].command({"DBSIZE"}).integer << " / " << masters[1].command({"DBSIZE"}).integer
      << " / " << masters[2].command({"DBSIZE"}).integer << " (ttl 60 s)";
}

TEST_F(TlsClientTest, ReleasesQueuedAtTheClientsEndAreAllSentOverTls) {
  releases_queued_at_the_clients_end(tls_server(pki_->server()), tls_options_for({}), false);
}

// The same after SCRIPT FLUSH on the masters (review 59): the shutdown's SCRIPT LOAD went behind
// the releases queued in the same pass, which were answered NOSCRIPT on the closing socket and
// never sent again: every key was left for its ttl (601 on each master, 3 of 3). It goes ahead
// of what is not written yet.
TEST_F(TlsClientTest, ReleasesQueuedAtTheClientsEndAfterAScriptFlushAreAllSentOverTls) {
  releases_queued_at_the_clients_end(tls_server(pki_->server()), tls_options_for({}), true);
}

// --------------------------------------------------------------------------------------
// Mutual TLS

TEST_F(TlsClientTest, MutualTlsRequiredAndGiven) {
  RedisServerGroup masters(3, tls_server(pki_->server(), "yes"));
  auto options = tls_options_for(masters.uris());
  options.tls.cert_file = pki_->client().cert_file;
  options.tls.key_file = pki_->client().key_file;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 10s));
  const Result held = client.acquire("mtls");
  ASSERT_EQ(held.outcome, Outcome::acquired) << rows(held);
  // Early decision may leave one row pending: every master holds the token soon after.
  EXPECT_TRUE(eventually([&] { return holding(masters, held.lock->key, held.lock->token) == 3; }));
  ASSERT_TRUE(client.release(*held.lock));
}

TEST_F(TlsClientTest, MutualTlsRequiredAndNotGivenIsTheMastersReason) {
  RedisServer master(tls_server(pki_->server(), "yes"));
  Client client(tls_options_for({master.uri()}));
  const Result result = acquire_until_reason(client, "mtls-missing", "server requires a client certificate");
  EXPECT_EQ(result.outcome, Outcome::quorum_unreachable) << rows(result);
  ASSERT_EQ(result.masters[0].status, MasterStatus::not_connected) << rows(result);
  EXPECT_NE(result.masters[0].error.find("server requires a client certificate"), std::string::npos) << rows(result);
  EXPECT_EQ(master.command({"DBSIZE"}).integer, 0);
}

// --------------------------------------------------------------------------------------
// Handshake failures: each one's reason in the master's row, nothing run on the server

struct BrokenServer {
  const char* name;
  const TestCertificate& (TestPki::*cert)() const noexcept;
  const char* reason;
};

TEST_F(TlsClientTest, EachCertificateFailureIsTheMastersReason) {
  const BrokenServer cases[] = {
      {"unknown CA", &TestPki::unknown_ca_server, "unknown CA"},
      {"expired", &TestPki::expired_server, "certificate expired"},
      {"hostname mismatch", &TestPki::wrong_name_server, "hostname mismatch"},
  };
  for (const BrokenServer& broken : cases) {
    SCOPED_TRACE(broken.name);
    RedisServer master(tls_server((pki_->*broken.cert)()));
    Client client(tls_options_for({master.uri()}));
    const Result result = acquire_until_reason(client, "broken", broken.reason);
    EXPECT_EQ(result.outcome, Outcome::quorum_unreachable) << rows(result);
    ASSERT_EQ(result.masters.size(), 1u);
    EXPECT_EQ(result.masters[0].status, MasterStatus::not_connected) << rows(result);
    EXPECT_NE(result.masters[0].error.find(broken.reason), std::string::npos) << rows(result);
    // The handshake failed before anything of ours was decrypted: no SET ran.
    EXPECT_EQ(master.command({"DBSIZE"}).integer, 0);
  }
}

// A listening socket of the test's own, standing where a TLS master should be: it records
// what each connection sends and either answers once in plaintext (as a Redis error reply
// starts) or never answers (as a plain Redis port does with a ClientHello).
class PlainListener {
 public:
  explicit PlainListener(bool answer) : answer_(answer), listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof address;
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), len) != 0 ||
        ::listen(listener_, 16) != 0 || ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &len) != 0) {
      throw std::runtime_error("PlainListener: cannot listen");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~PlainListener() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    for (const Conn& conn : conns_) ::close(conn.fd);
    ::close(listener_);
  }
  PlainListener(const PlainListener&) = delete;
  PlainListener& operator=(const PlainListener&) = delete;

  std::uint16_t port() const { return port_; }
  // What each connection sent so far, in accept order.
  std::vector<std::string> received() {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const Conn& conn : conns_) out.push_back(conn.bytes);
    return out;
  }

 private:
  struct Conn {
    int fd;
    std::string bytes;
    bool answered = false;
  };

  void serve() {
    while (!stop_) {
      std::vector<pollfd> fds{{listener_, POLLIN, 0}};
      {
        std::lock_guard lock(mutex_);
        for (const Conn& conn : conns_) fds.push_back({conn.fd, POLLIN, 0});
      }
      if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
      if ((fds[0].revents & POLLIN) != 0) {
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          std::lock_guard lock(mutex_);
          conns_.push_back({fd, {}});
        }
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
        char buffer[4096];
        const ssize_t n = ::recv(fds[i].fd, buffer, sizeof buffer, MSG_DONTWAIT);
        std::lock_guard lock(mutex_);
        Conn& conn = conns_[i - 1];
        if (n <= 0) {
          if (n == 0) ::shutdown(conn.fd, SHUT_RDWR);
          continue;
        }
        conn.bytes.append(buffer, static_cast<std::size_t>(n));
        if (answer_ && !conn.answered) {
          static constexpr char kReply[] = "-ERR unknown command, with args beginning with: \r\n";
          (void)::send(conn.fd, kReply, sizeof kReply - 1, MSG_NOSIGNAL);
          conn.answered = true;
        }
      }
    }
  }

  const bool answer_;
  const int listener_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<Conn> conns_;  // guarded by mutex_ (the fds are the thread's)
  std::thread thread_;
};

// Every connection sent exactly one TLS record, a ClientHello, and nothing else: no
// command, no AUTH, no password, in plaintext or otherwise.
void expect_only_client_hellos(const std::vector<std::string>& connections, const std::string& password) {
  ASSERT_FALSE(connections.empty());
  for (const std::string& bytes : connections) {
    if (bytes.empty()) continue;  // accepted, closed before it sent (a reconnect cut short)
    ASSERT_GE(bytes.size(), 6u);
    EXPECT_EQ(static_cast<unsigned char>(bytes[0]), 0x16) << "not a TLS handshake record";
    const std::size_t record = (static_cast<std::size_t>(static_cast<unsigned char>(bytes[3])) << 8) |
                               static_cast<unsigned char>(bytes[4]);
    EXPECT_EQ(bytes.size(), 5 + record) << "bytes beyond the ClientHello were sent";
    EXPECT_EQ(static_cast<unsigned char>(bytes[5]), 0x01) << "the record is not a ClientHello";
    for (const char* word : {"AUTH", "INFO", "SET", "PING", "CONFIG", "SCRIPT"}) {
      EXPECT_EQ(bytes.find(word), std::string::npos) << word;
    }
    EXPECT_EQ(bytes.find(password), std::string::npos);
  }
}

TEST_F(TlsClientTest, PlaintextServerIsNotTlsAndGetsOnlyTheClientHello) {
  PlainListener plain(/*answer=*/true);
  const std::string password = "Plain-Text-Secret-42";
  Client client(tls_options_for({"rediss://:" + password + "@127.0.0.1:" + std::to_string(plain.port())}));
  const Result result = acquire_until_reason(client, "plain", "server not speaking TLS");
  ASSERT_EQ(result.masters.size(), 1u);
  EXPECT_EQ(result.masters[0].status, MasterStatus::not_connected) << rows(result);
  EXPECT_NE(result.masters[0].error.find("server not speaking TLS"), std::string::npos) << rows(result);
  EXPECT_EQ(rows(result).find(password), std::string::npos);
  expect_only_client_hellos(plain.received(), password);
}

TEST_F(TlsClientTest, SilentServerEndsInTheHandshakeTimeoutReason) {
  PlainListener silent(/*answer=*/false);
  const std::string password = "Plain-Text-Secret-43";
  auto options = tls_options_for({"rediss://:" + password + "@127.0.0.1:" + std::to_string(silent.port())});
  options.connect_timeout = 200ms;  // below command_timeout: the first round sees the reason
  Client client(options);
  const Result result = acquire_until_reason(client, "silent", "sent nothing in answer to the ClientHello");
  ASSERT_EQ(result.masters.size(), 1u);
  EXPECT_EQ(result.masters[0].status, MasterStatus::not_connected) << rows(result);
  EXPECT_NE(result.masters[0].error.find("TLS handshake timed out"), std::string::npos) << rows(result);
  expect_only_client_hellos(silent.received(), password);
}

// A real plain Redis behind a rediss:// URI: it never answers a ClientHello (docs/tls.md),
// so the connect timeout ends it with the handshake's reason, and no command ran there.
TEST_F(TlsClientTest, PlainRedisBehindRedissIsAHandshakeTimeoutAndRunsNothing) {
  RedisServer plain;
  auto options = tls_options_for({"rediss://127.0.0.1:" + std::to_string(plain.port())});
  options.connect_timeout = 200ms;
  Client client(options);
  const Result result = acquire_until_reason(client, "plain-redis", "sent nothing in answer to the ClientHello");
  EXPECT_EQ(result.masters[0].status, MasterStatus::not_connected) << rows(result);
  EXPECT_EQ(plain.command({"DBSIZE"}).integer, 0);
}

// --------------------------------------------------------------------------------------
// A frozen TLS master decides nothing: the round ends at command_timeout

TEST_F(TlsClientTest, MasterFrozenMidHandshakeDoesNotHoldTheDecision) {
  RedisServerGroup masters(3, tls_server(pki_->server()));
  // The kernel accepts its TCP connection; the frozen server never reads the ClientHello.
  masters[0].freeze();
  auto options = tls_options_for(masters.uris());
  options.connect_timeout = 60s;  // only command_timeout may end the round
  options.command_timeout = 300ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(2, 10s));
  // Master 1 holds another owner's token: the round needs master 0 to decide early, so it
  // can only end at its deadline.
  masters[1].command({"SET", "redlock:frozen-handshake", "someone-else", "PX", "60000"});
  const auto started = Clock::now();
  const Result result = client.acquire("frozen-handshake");
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  std::printf("frozen mid-handshake: decided in %lld ms (command_timeout 300 ms, connect_timeout 60 s)\n",
              static_cast<long long>(took.count()));
  EXPECT_FALSE(result) << rows(result);
  ASSERT_EQ(result.masters.size(), 3u);
  EXPECT_TRUE(result.masters[0].status == MasterStatus::timeout ||
              result.masters[0].status == MasterStatus::not_connected)
      << rows(result);
  EXPECT_EQ(result.masters[1].status, MasterStatus::held_by_other) << rows(result);
  EXPECT_EQ(result.masters[2].status, MasterStatus::ok) << rows(result);
  masters[0].thaw();
  // Thawed, it finishes the handshake and takes part again.
  EXPECT_TRUE(client.wait_connected(3, 10s));
  const Result later = client.acquire("after-thaw");
  ASSERT_TRUE(later) << rows(later);
  EXPECT_TRUE(eventually([&] { return holding(masters, later.lock->key, later.lock->token) == 3; }));
}

TEST_F(TlsClientTest, MasterFrozenMidRoundDoesNotHoldTheDecision) {
  RedisServerGroup masters(3, tls_server(pki_->server()));
  auto options = tls_options_for(masters.uris());
  options.command_timeout = 300ms;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 10s));
  const Result warm = client.acquire("warm");
  ASSERT_TRUE(warm) << rows(warm);
  ASSERT_TRUE(eventually([&] { return holding(masters, warm.lock->key, warm.lock->token) == 3; }));

  masters[1].command({"SET", "redlock:frozen-round", "someone-else", "PX", "60000"});
  masters[0].freeze();
  const auto started = Clock::now();
  const Result result = client.acquire("frozen-round");
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  std::printf("frozen mid-round: decided in %lld ms (command_timeout 300 ms)\n", static_cast<long long>(took.count()));
  EXPECT_FALSE(result) << rows(result);
  ASSERT_EQ(result.masters.size(), 3u);
  EXPECT_TRUE(result.masters[0].status == MasterStatus::timeout ||
              result.masters[0].status == MasterStatus::not_connected)
      << rows(result);
  EXPECT_EQ(result.masters[1].status, MasterStatus::held_by_other) << rows(result);
  EXPECT_EQ(result.masters[2].status, MasterStatus::ok) << rows(result);
  masters[0].thaw();
}

// --------------------------------------------------------------------------------------
// Reconnects resume the TLS session (the Client cannot show this: one Connection can)

TEST_F(TlsClientTest, ReconnectResumesTheTlsSession) {
  RedisServer server(tls_server(pki_->server()));
  TlsOptions tls;
  tls.ca_file = pki_->ca_file();
  detail::TlsContext context(tls);
  detail::EventLoop loop(nullptr);
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<bool> resumed;  // one per connection that became ready; guarded by mutex
  // Loop thread only. A Connection's before-poll hook lives as long as the loop, so closed
  // connections are kept until the loop has closed (as MasterSet keeps them).
  std::vector<std::unique_ptr<detail::Connection>> connections;
  detail::Connection* connection = nullptr;
  const auto connect = [&] {
    detail::ConnectionOptions co;
    co.endpoint = Endpoint::parse(server.uri());
    co.tls = &context;
    co.reconnect_min = 10ms;
    co.reconnect_max = 50ms;
    connections.push_back(std::make_unique<detail::Connection>(loop, std::move(co)));
    connection = connections.back().get();
    connection->on_ready = [&] {
      std::lock_guard lock(mutex);
      resumed.push_back(connection->tls_session_reused());
      changed.notify_all();
    };
    connection->start();
  };
  const auto wait_for_ready = [&](std::size_t count) {
    std::unique_lock lock(mutex);
    return changed.wait_for(lock, 10s, [&] { return resumed.size() >= count; });
  };
  loop.post(connect);
  ASSERT_TRUE(wait_for_ready(1));
  // Closed by us (with a close_notify), then connected again from the same context: what a
  // Client's reconnect does, minus the failure. Twice: TLS 1.3 tickets are single-use.
  for (std::size_t round = 2; round <= 3; ++round) {
    loop.post([&] {
      connection->close();
      connect();
    });
    ASSERT_TRUE(wait_for_ready(round));
  }
  // Cut by the server: the connection reconnects by itself and offers the cached session;
  // whether the server still accepts it after a cut is the server's choice (OpenSSL drops
  // a session from its cache when a connection ends without close_notify), so it is shown,
  // not asserted.
  server.command({"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_TRUE(wait_for_ready(4));
  loop.post([&] {
    connection->close();
    loop.close();
  });
  loop.join();
  connections.clear();
  std::lock_guard lock(mutex);
  EXPECT_FALSE(resumed[0]) << "the first connection has nothing to resume";
  EXPECT_TRUE(resumed[1]) << "the second connection did a full handshake";
  EXPECT_TRUE(resumed[2]) << "the third connection did a full handshake";
  std::printf("reconnect after the server cut the connection: session %s\n",
              resumed[3] ? "resumed" : "not resumed (full handshake)");
}

// --------------------------------------------------------------------------------------
// Configuration: mixed fleets, files checked at construction

TEST_F(TlsClientTest, MixedFleetIsRefusedUnlessAllowed) {
  RedisServerGroup secure(2, tls_server(pki_->server()));
  RedisServer plain;
  std::vector<std::string> uris = secure.uris();
  uris.push_back(plain.uri());
  try {
    Client refused(tls_options_for(uris));
    FAIL() << "a mixed fleet was accepted";
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rediss://"), std::string::npos) << message;
    EXPECT_NE(message.find("redis:// (plain)"), std::string::npos) << message;
    EXPECT_NE(message.find("allow_mixed_tls"), std::string::npos) << message;
  }

  auto options = tls_options_for(uris);
  options.allow_mixed_tls = true;
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 10s));
  const Result held = client.acquire("mixed");
  ASSERT_EQ(held.outcome, Outcome::acquired) << rows(held);
  EXPECT_TRUE(eventually([&] { return holding(secure, held.lock->key, held.lock->token) == 2; }));
  EXPECT_EQ(held.masters[2].endpoint, "127.0.0.1:" + std::to_string(plain.port()));
  EXPECT_TRUE(eventually([&] { return get(plain, held.lock->key) == held.lock->token; }));
}

TEST_F(TlsClientTest, TlsOptionsWithOnlyPlainMastersAreRefused) {
  auto options = options_for({"redis://127.0.0.1:1"});
  options.tls.ca_file = pki_->ca_file();
  try {
    Client client(options);
    FAIL() << "TLS options with plain masters were accepted";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("rediss://"), std::string::npos) << error.what();
  }
}

std::string file_contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The base64 lines of a PEM file (what must never be printed).
std::vector<std::string> pem_body_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::istringstream in(file_contents(path));
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.rfind("-----", 0) != 0) lines.push_back(line);
  }
  return lines;
}

TEST_F(TlsClientTest, BadTlsFilesAreAConfigErrorAtConstructionNamingTheFile) {
  RedisServer master(tls_server(pki_->server()));
  {
    auto options = tls_options_for({master.uri()});
    options.tls.ca_file = pki_->dir() + "/no-such-ca.pem";
    try {
      Client client(options);
      FAIL() << "a missing ca_file was accepted";
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("no-such-ca.pem"), std::string::npos) << error.what();
    }
  }
  {
    // A key that does not match the certificate: named, its contents never shown.
    auto options = tls_options_for({master.uri()});
    options.tls.cert_file = pki_->client().cert_file;
    options.tls.key_file = pki_->server().key_file;
    try {
      Client client(options);
      FAIL() << "a mismatched key was accepted";
    } catch (const ConfigError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(pki_->server().key_file), std::string::npos) << message;
      ASSERT_FALSE(pem_body_lines(pki_->server().key_file).empty());
      for (const std::string& line : pem_body_lines(pki_->server().key_file)) {
        EXPECT_EQ(message.find(line), std::string::npos);
      }
    }
  }
}

// --------------------------------------------------------------------------------------
// Secrets: the password and the key file's contents appear in no result and no warning

TEST_F(TlsClientTest, SecretsAreNeverInResultsOrWarnings) {
  const std::string password = "Tls-Secret-Password-77";
  auto server_options = tls_server(pki_->server(), "yes");
  server_options.password = password;
  RedisServerGroup masters(3, server_options);
  auto unknown_ca_options = tls_server(pki_->unknown_ca_server(), "yes");
  unknown_ca_options.password = password;
  RedisServer unknown_ca(unknown_ca_options);
  std::vector<std::string> uris;
  for (std::size_t i = 0; i < masters.size(); ++i) {
    uris.push_back("rediss://:" + password + "@127.0.0.1:" + std::to_string(masters[i].port()));
  }
  uris.push_back("rediss://:" + password + "@127.0.0.1:" + std::to_string(unknown_ca.port()));

  std::mutex mutex;
  std::vector<std::string> warnings;
  auto options = tls_options_for(uris);
  options.tls.cert_file = pki_->client().cert_file;
  options.tls.key_file = pki_->client().key_file;
  options.on_warning = [&](const std::string& text) {
    std::lock_guard lock(mutex);
    warnings.push_back(text);
  };
  std::string shown;
  {
    Client client(options);
    ASSERT_TRUE(client.wait_connected(3, 10s));
    const Result held = acquire_until_reason(client, "secret", "unknown CA", 3);
    const Result again = client.acquire("secret-2");
    EXPECT_EQ(again.outcome, Outcome::acquired) << rows(again);
    EXPECT_NE(again.masters[3].error.find("unknown CA"), std::string::npos) << rows(again);
    shown = rows(held) + rows(again);
    if (again.lock) shown += rows(client.release(*again.lock));
  }
  // With insecure_skip_verify the Client warns once, loudly, naming the option.
  auto insecure = options;
  insecure.tls.insecure_skip_verify = true;
  {
    Client client(insecure);
    ASSERT_TRUE(client.wait_connected(4, 10s));
    const Result held = client.acquire("insecure");
    ASSERT_TRUE(held) << rows(held);
    // The unknown CA's server is accepted too.
    EXPECT_TRUE(eventually([&] { return get(unknown_ca, held.lock->key) == held.lock->token; }));
    shown += rows(held);
    EXPECT_TRUE(eventually([&] {
      std::lock_guard lock(mutex);
      for (const auto& text : warnings) {
        if (text.find("insecure_skip_verify") != std::string::npos) return true;
      }
      return false;
    }));
  }
  std::lock_guard lock(mutex);
  for (const auto& text : warnings) shown += text + "\n";
  EXPECT_EQ(shown.find(password), std::string::npos) << shown;
  const auto key_lines = pem_body_lines(pki_->client().key_file);
  ASSERT_FALSE(key_lines.empty());
  for (const std::string& line : key_lines) EXPECT_EQ(shown.find(line), std::string::npos);
}

}  // namespace
}  // namespace redlock::testing

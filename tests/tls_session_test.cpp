// SPDX-License-Identifier: Apache-2.0
// Tests for the TLS engine (lib/tls: TlsContext, TlsSession) against real redis-servers
// started with --tls-port (support/redis_server.h, RedisServerOptions::tls) and a test PKI
// generated per suite (support/tls_certs.h). The engine is driven over a plain blocking
// loopback socket by a small pump in this file, the way Connection will drive it over
// libuv: socket -> feed_ciphertext, read_plaintext -> reply parser, write_plaintext <-
// commands, take_ciphertext -> socket.
//
// One hostile-server-style test runs a listener of its own that records what the engine
// sends to a server that is not speaking TLS.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "redlock/errors.h"
#include "redlock/tls.h"
#include "support/hiredis_handle.h"
#include "support/redis_server.h"
#include "support/tls_certs.h"
#include "tls/tls_context.h"
#include "tls/tls_session.h"
#include "tls_test_base.h"

namespace {

using namespace std::chrono_literals;
using redlock::TlsOptions;
using redlock::TlsVersion;
using redlock::detail::TlsContext;
using redlock::detail::TlsFailure;
using redlock::detail::TlsSession;
using redlock::support::RedisReplyPtr;
using redlock::support::RedisServer;
using redlock::support::RedisServerOptions;
using redlock::support::TestCertificate;
using redlock::support::TestPki;
using Clock = std::chrono::steady_clock;

// Generous for sanitizer builds on a loaded machine; a deadline, never an assertion on time.
constexpr auto kDeadline = 10s;

class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    return *this;
  }
  int get() const noexcept { return fd_; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

Fd connect_loopback(std::uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return Fd();
  return fd;
}

std::string resp(const std::vector<std::string>& argv) {
  std::string out = "*" + std::to_string(argv.size()) + "\r\n";
  for (const auto& arg : argv) out += "$" + std::to_string(arg.size()) + "\r\n" + arg + "\r\n";
  return out;
}

struct ReaderFree {
  void operator()(redisReader* reader) const noexcept { redisReaderFree(reader); }
};

// Moves bytes between a TlsSession and a blocking socket, as Connection will over libuv.
class Pump {
 public:
  Pump(TlsContext& context, std::uint16_t port, const std::string& host = "127.0.0.1")
      : fd_(connect_loopback(port)), session_(context, host, port), reader_(redisReaderCreate()) {}

  TlsSession& session() { return session_; }
  std::size_t max_buffered_in() const { return max_buffered_in_; }
  std::size_t max_pending_out() const { return max_pending_out_; }
  std::size_t bytes_sent() const { return bytes_sent_; }

  // Writes everything the engine has for the socket.
  void flush() {
    max_pending_out_ = std::max(max_pending_out_, session_.pending_ciphertext());
    const std::string bytes = session_.take_ciphertext();
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;  // the peer is gone; the read side will see it
      sent += static_cast<std::size_t>(n);
    }
    bytes_sent_ += sent;
  }

  // One socket read into the engine, at most ciphertext_room() bytes. False on timeout.
  bool pump_once(std::chrono::milliseconds timeout) {
    pollfd pfd{fd_.get(), POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(timeout.count())) != 1) return false;
    char buffer[16 * 1024];
    const std::size_t room = std::min(sizeof buffer, session_.ciphertext_room());
    EXPECT_GT(room, 0u) << "the engine must have room once its plaintext is drained";
    const ssize_t n = ::recv(fd_.get(), buffer, room, 0);
    if (n <= 0) {
      session_.feed_eof();
    } else {
      EXPECT_EQ(session_.feed_ciphertext(std::string_view(buffer, static_cast<std::size_t>(n))),
                static_cast<std::size_t>(n));
      max_buffered_in_ = std::max(max_buffered_in_, TlsSession::kMaxBufferedCiphertext - session_.ciphertext_room());
    }
    flush();
    return true;
  }

  // Drives the handshake to established or failed (or the deadline). True if established.
  bool handshake(std::chrono::milliseconds per_read = std::chrono::duration_cast<std::chrono::milliseconds>(kDeadline)) {
    flush();
    const auto give_up = Clock::now() + kDeadline;
    while (session_.state() == TlsSession::State::handshaking && Clock::now() < give_up) {
      if (!pump_once(per_read)) break;
    }
    return session_.handshake_done();
  }

  // Sends one command and reads its reply; nullptr if the session failed (or timed out).
  RedisReplyPtr round_trip(const std::vector<std::string>& argv) {
    const std::string request = resp(argv);
    std::size_t accepted = 0;
    while (accepted < request.size() && session_.handshake_done()) {
      const std::size_t n = session_.write_plaintext(std::string_view(request).substr(accepted));
      EXPECT_LE(session_.pending_ciphertext(), TlsSession::kMaxBufferedCiphertext);
      accepted += n;
      flush();
      if (n == 0 && session_.handshake_done()) pump_once(10ms);  // output full: let the server read
    }
    const auto give_up = Clock::now() + kDeadline;
    while (Clock::now() < give_up) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) return nullptr;
      if (raw != nullptr) return RedisReplyPtr(static_cast<redisReply*>(raw));
      // Drain decrypted bytes first (this also keeps ciphertext_room() open).
      char plain[4096];
      const std::size_t got = session_.read_plaintext(plain);
      flush();
      if (got > 0) {
        redisReaderFeed(reader_.get(), plain, got);
        continue;
      }
      if (session_.failed()) return nullptr;
      pump_once(100ms);
    }
    return nullptr;
  }

  void close() {
    session_.shutdown();
    flush();
    fd_.reset();
  }

 private:
  Fd fd_;
  TlsSession session_;
  std::unique_ptr<redisReader, ReaderFree> reader_;
  std::size_t max_buffered_in_ = 0;
  std::size_t max_pending_out_ = 0;
  std::size_t bytes_sent_ = 0;
};

std::string text_of(const RedisReplyPtr& reply) {
  return reply ? std::string(reply->str != nullptr ? reply->str : "", reply->len) : "<no reply>";
}

class TlsSessionTest : public redlock::testing::TlsTestBase {
 protected:
  static TlsOptions trusting_ca() {
    TlsOptions options;
    options.ca_file = pki_->ca_file();
    return options;
  }
};

TEST_F(TlsSessionTest, HandshakeThenLockCommandsByIpAndByName) {
  RedisServer server(tls_server(pki_->server()));
  EXPECT_EQ(server.uri(), "rediss://127.0.0.1:" + std::to_string(server.port()));
  TlsContext context(trusting_ca());

  Pump pump(context, server.port());
  ASSERT_TRUE(pump.handshake()) << pump.session().failure_reason();
  EXPECT_EQ(pump.session().protocol(), "TLSv1.3");
  EXPECT_FALSE(pump.session().session_reused());
  EXPECT_EQ(text_of(pump.round_trip({"PING"})), "PONG");
  EXPECT_EQ(text_of(pump.round_trip({"SET", "k", "v", "NX", "PX", "1000"})), "OK");
  const RedisReplyPtr again = pump.round_trip({"SET", "k", "other", "NX", "PX", "1000"});
  ASSERT_TRUE(again);
  EXPECT_EQ(again->type, REDIS_REPLY_NIL);
  EXPECT_EQ(text_of(pump.round_trip({"GET", "k"})), "v");
  // The helper's own TLS client sees the same key.
  EXPECT_EQ(server.command({"GET", "k"}).str, "v");

  // By name: SNI + a dNSName check.
  Pump by_name(context, server.port(), "localhost");
  ASSERT_TRUE(by_name.handshake()) << by_name.session().failure_reason();
  EXPECT_EQ(text_of(by_name.round_trip({"GET", "k"})), "v");
}

TEST_F(TlsSessionTest, MutualTlsRequiredAndGiven) {
  RedisServer server(tls_server(pki_->server(), "yes"));
  TlsOptions options = trusting_ca();
  options.cert_file = pki_->client().cert_file;
  options.key_file = pki_->client().key_file;
  TlsContext context(options);
  Pump pump(context, server.port());
  ASSERT_TRUE(pump.handshake()) << pump.session().failure_reason();
  EXPECT_TRUE(pump.session().client_certificate_requested());
  EXPECT_EQ(text_of(pump.round_trip({"PING"})), "PONG") << pump.session().failure_reason();
}

TEST_F(TlsSessionTest, MutualTlsRequiredAndNotGivenSaysSo) {
  RedisServer server(tls_server(pki_->server(), "yes"));
  TlsContext context(trusting_ca());
  Pump pump(context, server.port());
  // TLS 1.3: our side of the handshake completes; the server's refusal comes on the read.
  pump.handshake();
  EXPECT_FALSE(pump.round_trip({"PING"}));
  ASSERT_TRUE(pump.session().failed());
  EXPECT_EQ(pump.session().failure(), TlsFailure::client_certificate_required) << pump.session().failure_reason();
  EXPECT_NE(pump.session().failure_reason().find("server requires a client certificate"), std::string::npos)
      << pump.session().failure_reason();
}

TEST_F(TlsSessionTest, ClientCertificateFromAnUnknownCaIsRejected) {
  RedisServer server(tls_server(pki_->server(), "yes"));
  TlsOptions options = trusting_ca();
  options.cert_file = pki_->unknown_ca_client().cert_file;
  options.key_file = pki_->unknown_ca_client().key_file;
  TlsContext context(options);
  Pump pump(context, server.port());
  pump.handshake();
  EXPECT_FALSE(pump.round_trip({"PING"}));
  ASSERT_TRUE(pump.session().failed());
  EXPECT_EQ(pump.session().failure(), TlsFailure::client_certificate_rejected) << pump.session().failure_reason();
  EXPECT_NE(pump.session().failure_reason().find("server rejected our client certificate"), std::string::npos)
      << pump.session().failure_reason();
}

TEST_F(TlsSessionTest, UnknownCa) {
  RedisServer server(tls_server(pki_->unknown_ca_server()));
  TlsContext context(trusting_ca());
  Pump pump(context, server.port());
  EXPECT_FALSE(pump.handshake());
  EXPECT_EQ(pump.session().failure(), TlsFailure::unknown_ca) << pump.session().failure_reason();
  EXPECT_NE(pump.session().failure_reason().find("unknown CA"), std::string::npos) << pump.session().failure_reason();
  // Nothing was written after the failure but an alert: no command can have gone out.
  EXPECT_EQ(pump.session().write_plaintext(resp({"PING"})), 0u);
}

TEST_F(TlsSessionTest, ExpiredCertificate) {
  RedisServer server(tls_server(pki_->expired_server()));
  TlsContext context(trusting_ca());
  Pump pump(context, server.port());
  EXPECT_FALSE(pump.handshake());
  EXPECT_EQ(pump.session().failure(), TlsFailure::certificate_expired) << pump.session().failure_reason();
  EXPECT_NE(pump.session().failure_reason().find("certificate expired"), std::string::npos);
  EXPECT_NE(pump.session().failure_reason().find("notAfter"), std::string::npos) << pump.session().failure_reason();
}

TEST_F(TlsSessionTest, HostnameMismatchByIpAndByName) {
  RedisServer server(tls_server(pki_->wrong_name_server()));
  TlsContext context(trusting_ca());
  Pump by_ip(context, server.port());
  EXPECT_FALSE(by_ip.handshake());
  EXPECT_EQ(by_ip.session().failure(), TlsFailure::hostname_mismatch) << by_ip.session().failure_reason();
  const std::string& reason = by_ip.session().failure_reason();
  EXPECT_NE(reason.find("IP address '127.0.0.1'"), std::string::npos) << reason;
  EXPECT_NE(reason.find("DNS:wrong.example, IP:127.0.0.2"), std::string::npos) << reason;

  Pump by_name(context, server.port(), "localhost");
  EXPECT_FALSE(by_name.handshake());
  EXPECT_EQ(by_name.session().failure(), TlsFailure::hostname_mismatch) << by_name.session().failure_reason();
  EXPECT_NE(by_name.session().failure_reason().find("host 'localhost'"), std::string::npos);

  // server_name overrides the URI's host for both SNI and the check.
  TlsOptions renamed = trusting_ca();
  renamed.server_name = "wrong.example";
  TlsContext renamed_context(renamed);
  Pump overridden(renamed_context, server.port());
  EXPECT_TRUE(overridden.handshake()) << overridden.session().failure_reason();
  EXPECT_EQ(text_of(overridden.round_trip({"PING"})), "PONG");
}

TEST_F(TlsSessionTest, InsecureSkipVerifyAcceptsUnknownCaAndExpired) {
  RedisServer unknown(tls_server(pki_->unknown_ca_server()));
  RedisServer expired(tls_server(pki_->expired_server()));
  TlsOptions options;  // no CA at all
  options.insecure_skip_verify = true;
  TlsContext context(options);
  EXPECT_FALSE(context.verifies_peer());
  for (const RedisServer* server : {&unknown, &expired}) {
    Pump pump(context, server->port(), "somewhere.else");
    ASSERT_TRUE(pump.handshake()) << pump.session().failure_reason();
    EXPECT_EQ(text_of(pump.round_trip({"PING"})), "PONG");
  }
}

// A server that answers a ClientHello in plaintext, as Redis does once the ClientHello's
// random bytes happen to contain a newline: it records every byte it receives.
class PlaintextServer {
 public:
  PlaintextServer() : listener_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof address;
    if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&address), len) != 0 ||
        ::listen(listener_.get(), 1) != 0 ||
        ::getsockname(listener_.get(), reinterpret_cast<sockaddr*>(&address), &len) != 0) {
      throw std::runtime_error("PlaintextServer: cannot listen");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~PlaintextServer() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::uint16_t port() const { return port_; }
  // Everything received; call after the client closed (joins the thread).
  std::string received() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return received_;
  }

 private:
  void serve() {
    pollfd listening{listener_.get(), POLLIN, 0};
    while (!stop_ && ::poll(&listening, 1, 50) == 0) {
    }
    if (stop_ && (listening.revents & POLLIN) == 0) return;
    const Fd client(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    bool answered = false;
    const auto give_up = Clock::now() + kDeadline;
    // Read until the client closes; answer once, after the first bytes.
    while (Clock::now() < give_up) {
      pollfd pfd{client.get(), POLLIN, 0};
      if (::poll(&pfd, 1, 50) == 0) {
        if (stop_) return;
        continue;
      }
      char buffer[4096];
      const ssize_t n = ::recv(client.get(), buffer, sizeof buffer, 0);
      if (n <= 0) return;
      received_.append(buffer, static_cast<std::size_t>(n));
      if (!answered) {
        static constexpr char kReply[] = "-ERR unknown command '\x16\x03\x01', with args beginning with: \r\n";
        if (::send(client.get(), kReply, sizeof kReply - 1, MSG_NOSIGNAL) < 0) return;
        answered = true;
      }
    }
  }

  Fd listener_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::string received_;  // written by the thread; read after join
  std::thread thread_;
};

TEST_F(TlsSessionTest, PlaintextServerIsNotTlsAndGetsOnlyTheClientHello) {
  PlaintextServer plain;
  TlsContext context(trusting_ca());
  std::string received;
  {
    Pump pump(context, plain.port());
    // A command queued before the handshake is refused, not buffered or sent.
    EXPECT_EQ(pump.session().write_plaintext(resp({"SET", "k", "secret-value", "NX", "PX", "1000"})), 0u);
    EXPECT_FALSE(pump.handshake());
    EXPECT_EQ(pump.session().failure(), TlsFailure::not_tls) << pump.session().failure_reason();
    EXPECT_NE(pump.session().failure_reason().find("server not speaking TLS"), std::string::npos);
    // The reason describes the first byte, it never quotes the server's text.
    EXPECT_EQ(pump.session().failure_reason().find("unknown command"), std::string::npos)
        << pump.session().failure_reason();
    EXPECT_EQ(pump.session().write_plaintext(resp({"PING"})), 0u);
    pump.close();
    received = plain.received();
  }
  // Exactly one TLS record, a handshake record (the ClientHello), nothing after it.
  ASSERT_GE(received.size(), 5u);
  EXPECT_EQ(static_cast<unsigned char>(received[0]), 0x16) << "not a handshake record";
  const std::size_t record_length =
      (static_cast<std::size_t>(static_cast<unsigned char>(received[3])) << 8) |
      static_cast<unsigned char>(received[4]);
  EXPECT_EQ(received.size(), 5 + record_length) << "bytes beyond the ClientHello were sent";
  EXPECT_EQ(static_cast<unsigned char>(received[5]), 0x01) << "the record is not a ClientHello";
  EXPECT_EQ(received.find("secret-value"), std::string::npos);
  EXPECT_EQ(received.find("PING"), std::string::npos);
}

// Real Redis on a plain port reads the ClientHello as an inline command and looks for a
// newline with strchr(), which stops at the ClientHello's NUL bytes (its length fields):
// it never answers, so the engine cannot fail by itself; the owner's connect timeout ends
// the handshake and handshake_timeout_reason() says what most likely happened. What Redis
// holds is exactly our ClientHello, unexecuted.
TEST_F(TlsSessionTest, PlainRedisOnThePortNeverAnswersAndGetsOnlyTheClientHello) {
  RedisServer server;  // plain
  TlsContext context(trusting_ca());
  Pump pump(context, server.port());
  EXPECT_EQ(pump.session().write_plaintext(resp({"PING"})), 0u);
  EXPECT_FALSE(pump.handshake(500ms));
  EXPECT_EQ(pump.session().state(), TlsSession::State::handshaking);
  EXPECT_NE(pump.session().handshake_timeout_reason().find("sent nothing in answer to the ClientHello"),
            std::string::npos);
  ASSERT_GT(pump.bytes_sent(), 5u);

  // Redis's view of our connection: the ClientHello sits in its query buffer, no command ran.
  const std::string clients = server.command({"CLIENT", "LIST"}).str;
  const std::string ours_marker = "qbuf=" + std::to_string(pump.bytes_sent()) + " ";
  const auto at = clients.find(ours_marker);
  ASSERT_NE(at, std::string::npos) << "no client with " << ours_marker << " in\n" << clients;
  const auto line_start = clients.rfind('\n', at);
  const std::string line = clients.substr(line_start == std::string::npos ? 0 : line_start + 1,
                                          clients.find('\n', at) - (line_start == std::string::npos ? 0 : line_start + 1));
  EXPECT_NE(line.find("cmd=NULL"), std::string::npos) << line;
  EXPECT_EQ(server.command({"DBSIZE"}).integer, 0);
}

TEST_F(TlsSessionTest, SecondConnectResumesTheSession) {
  RedisServer server(tls_server(pki_->server()));
  TlsContext context(trusting_ca());
  {
    Pump first(context, server.port());
    ASSERT_TRUE(first.handshake()) << first.session().failure_reason();
    EXPECT_FALSE(first.session().session_reused());
    // TLS 1.3 tickets arrive after the handshake: reading the first reply processes them.
    EXPECT_EQ(text_of(first.round_trip({"PING"})), "PONG");
    first.close();
  }
  EXPECT_EQ(context.cached_sessions(), 1u);
  Pump second(context, server.port());
  ASSERT_TRUE(second.handshake()) << second.session().failure_reason();
  EXPECT_TRUE(second.session().session_reused());
  EXPECT_EQ(text_of(second.round_trip({"PING"})), "PONG");

  // Another endpoint key (same server, by name) does not get this endpoint's session.
  Pump by_name(context, server.port(), "localhost");
  ASSERT_TRUE(by_name.handshake()) << by_name.session().failure_reason();
  EXPECT_FALSE(by_name.session().session_reused());
}

TEST_F(TlsSessionTest, Tls12SessionIsResumedToo) {
  RedisServerOptions options = tls_server(pki_->server());
  options.tls.protocols = "TLSv1.2";
  RedisServer server(options);
  TlsContext context(trusting_ca());
  for (int i = 0; i < 3; ++i) {
    Pump pump(context, server.port());
    ASSERT_TRUE(pump.handshake()) << pump.session().failure_reason();
    EXPECT_EQ(pump.session().protocol(), "TLSv1.2");
    EXPECT_EQ(pump.session().session_reused(), i > 0) << "connect " << i;
    EXPECT_EQ(text_of(pump.round_trip({"PING"})), "PONG");
    pump.close();
  }
}

// Redis allows tls-protocols "TLSv1.1"; OpenSSL 3 needs security level 0 for it on the
// server (SHA-1 signatures), which --tls-ciphers sets. Without our TLS 1.2 floor,
// OpenSSL's default client would accept the TLS 1.1 ServerHello and fail later on the
// SHA-1 signature ("legacy sigalg disallowed"), a different reason; with the floor the
// server finds no common version and says so.
TEST_F(TlsSessionTest, ServerLimitedToTls11IsRefusedForItsVersion) {
  RedisServerOptions options = tls_server(pki_->server());
  options.tls.protocols = "TLSv1.1";
  options.tls.ciphers = "DEFAULT:@SECLEVEL=0";
  RedisServer server(options);
  TlsContext context(trusting_ca());
  EXPECT_EQ(SSL_CTX_get_min_proto_version(context.native()), TLS1_2_VERSION);
  Pump pump(context, server.port());
  EXPECT_FALSE(pump.handshake());
  EXPECT_EQ(pump.session().failure(), TlsFailure::protocol_version) << pump.session().failure_reason();
  EXPECT_NE(pump.session().failure_reason().find("protocol version too low"), std::string::npos);
}

TEST_F(TlsSessionTest, Tls13OnlyRefusesATls12Server) {
  RedisServerOptions options = tls_server(pki_->server());
  options.tls.protocols = "TLSv1.2";
  RedisServer server(options);
  TlsOptions tls = trusting_ca();
  tls.min_version = TlsVersion::tls1_3;
  TlsContext context(tls);
  Pump pump(context, server.port());
  EXPECT_FALSE(pump.handshake());
  EXPECT_EQ(pump.session().failure(), TlsFailure::protocol_version) << pump.session().failure_reason();
  EXPECT_NE(pump.session().failure_reason().find("TLS 1.3"), std::string::npos);
}

TEST_F(TlsSessionTest, BuffersStayBoundedForAMegabyteEachWay) {
  RedisServer server(tls_server(pki_->server()));
  TlsContext context(trusting_ca());
  Pump pump(context, server.port());
  ASSERT_TRUE(pump.handshake()) << pump.session().failure_reason();
  const std::string big(1 << 20, 'x');
  EXPECT_EQ(text_of(pump.round_trip({"SET", "big", big})), "OK");
  EXPECT_EQ(text_of(pump.round_trip({"GET", "big"})), big);
  EXPECT_LE(pump.max_pending_out(), TlsSession::kMaxBufferedCiphertext);
  EXPECT_LE(pump.max_buffered_in(), TlsSession::kMaxBufferedCiphertext);
  std::printf("1 MiB each way: max buffered ciphertext in %zu B, out %zu B (bound %zu B)\n", pump.max_buffered_in(),
              pump.max_pending_out(), TlsSession::kMaxBufferedCiphertext);

  // Feeding without draining stops at the bound.
  EXPECT_EQ(text_of(pump.round_trip({"PING"})), "PONG");
  const std::string junk(3 * TlsSession::kMaxBufferedCiphertext, '\x17');
  EXPECT_EQ(pump.session().feed_ciphertext(junk), TlsSession::kMaxBufferedCiphertext);
  EXPECT_EQ(pump.session().ciphertext_room(), 0u);
  EXPECT_EQ(pump.session().feed_ciphertext(junk), 0u);
}

TEST_F(TlsSessionTest, ServerClosingIsReportedAsClosed) {
  RedisServer server(tls_server(pki_->server()));
  TlsContext context(trusting_ca());
  Pump pump(context, server.port());
  ASSERT_TRUE(pump.handshake()) << pump.session().failure_reason();
  EXPECT_EQ(text_of(pump.round_trip({"QUIT"})), "OK");
  EXPECT_FALSE(pump.round_trip({"PING"}));
  EXPECT_EQ(pump.session().failure(), TlsFailure::closed) << pump.session().failure_reason();
}

TEST_F(TlsSessionTest, ConfigErrorsNameTheFileAndNoKeyMaterial) {
  auto error_of = [](const TlsOptions& options) -> std::string {
    try {
      TlsContext context(options);
    } catch (const redlock::ConfigError& e) {
      return e.what();
    }
    return "<no error>";
  };
  TlsOptions missing;
  missing.ca_file = pki_->dir() + "/nope.crt";
  EXPECT_EQ(error_of(missing), "TlsOptions::ca_file '" + pki_->dir() + "/nope.crt': no such file");

  TlsOptions key_as_ca;
  key_as_ca.ca_file = pki_->client().key_file;
  const std::string key_as_ca_error = error_of(key_as_ca);
  EXPECT_NE(key_as_ca_error.find("ca_file '" + pki_->client().key_file + "' cannot be loaded"), std::string::npos)
      << key_as_ca_error;

  TlsOptions only_cert = trusting_ca();
  only_cert.cert_file = pki_->client().cert_file;
  EXPECT_NE(error_of(only_cert).find("cert_file '" + pki_->client().cert_file + "' is set but key_file is not"),
            std::string::npos);

  TlsOptions mismatch = trusting_ca();
  mismatch.cert_file = pki_->client().cert_file;
  mismatch.key_file = pki_->server().key_file;
  EXPECT_EQ(error_of(mismatch), "TlsOptions::key_file '" + pki_->server().key_file + "' does not match cert_file '" +
                                    pki_->client().cert_file + "'");

  TlsOptions cert_as_key = trusting_ca();
  cert_as_key.cert_file = pki_->client().cert_file;
  cert_as_key.key_file = pki_->client().cert_file;
  const std::string cert_as_key_error = error_of(cert_as_key);
  EXPECT_NE(cert_as_key_error.find("key_file '" + pki_->client().cert_file + "' cannot be loaded"), std::string::npos)
      << cert_as_key_error;

  TlsOptions bad_name = trusting_ca();
  bad_name.server_name = "a b";
  EXPECT_NE(error_of(bad_name).find("server_name 'a b' has a space"), std::string::npos);

  for (const std::string& message : {key_as_ca_error, cert_as_key_error, error_of(mismatch)}) {
    EXPECT_EQ(message.find("BEGIN"), std::string::npos) << message;
    EXPECT_EQ(message.find("PRIVATE KEY"), std::string::npos) << message;
  }
}

}  // namespace

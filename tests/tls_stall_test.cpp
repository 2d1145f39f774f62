// SPDX-License-Identifier: Apache-2.0
// Review 61: the stall check's FIONREAD look-again over TLS. A TLS master begins a reply to
// the handshake's first command and then sends TLS records that decrypt to (almost) nothing:
// key updates, 30 at a time (OpenSSL refuses more than 32 in a row), one byte of the reply
// between them. Bytes wait in the socket at most stall checks, which then look again 1 ms later.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "loopback_listener.h"
#include "redlock/client.h"
#include "support/tls_certs.h"
#include "test_util.h"
#include "tls_test_base.h"

namespace redlock::testing {
namespace {

using Clock = std::chrono::steady_clock;
class TlsStallTest : public TlsTestBase {};

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

TEST_F(TlsStallTest, RecordsThatDecryptToAlmostNothingDoNotHoldAStalledMasterForever) {
  std::signal(SIGPIPE, SIG_IGN);  // the client hangs up while the master writes
  const LoopbackListener listener("key update trickle");
  std::atomic<long> updates{0};
  std::atomic<long> plaintext{0};
  std::atomic<bool> hung_up{false};
  std::atomic<bool> stop{false};
  Clock::time_point hung_up_at{};
  std::thread master([&] {
    pollfd ready[2] = {{listener.fd(), POLLIN, 0}, {listener.stop_fd(), POLLIN, 0}};
    if (::poll(ready, 2, 10'000) <= 0 || (ready[1].revents & POLLIN) != 0) return;
    const int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    SSL* ssl = nullptr;
    if (fd >= 0 && ctx != nullptr && SSL_CTX_use_certificate_chain_file(ctx, pki_->server().cert_file.c_str()) == 1 &&
        SSL_CTX_use_PrivateKey_file(ctx, pki_->server().key_file.c_str(), SSL_FILETYPE_PEM) == 1) {
      SSL_CTX_set_num_tickets(ctx, 0);
      ssl = SSL_new(ctx);
      SSL_set_fd(ssl, fd);
      if (SSL_accept(ssl) == 1) {
        const std::string head = "$1000000\r\n";  // INFO's reply begins, and never ends
        bool open = SSL_write(ssl, head.data(), static_cast<int>(head.size())) > 0;
        while (open && !stop.load() && plaintext.load() < 1'000'000) {
          for (int i = 0; i < 30 && open; ++i) {
            open = SSL_key_update(ssl, SSL_KEY_UPDATE_NOT_REQUESTED) == 1 && SSL_do_handshake(ssl) == 1;
            if (open) ++updates;
          }
          open = open && SSL_write(ssl, "x", 1) == 1;
          if (open) ++plaintext;
        }
      }
    }
    hung_up_at = Clock::now();
    hung_up = true;
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    if (fd >= 0) ::close(fd);
  });
  ClientOptions options = options_for({"rediss://127.0.0.1:" + std::to_string(listener.port())});
  options.tls.ca_file = pki_->ca_file();
  options.connect_timeout = 600s;  // (a master that answered the handshake, then did this)
  options.stall_timeout = 300ms;
  options.reconnect_min = options.reconnect_max = 600s;
  const double cpu_before = cpu_seconds();
  const auto start = Clock::now();
  {
    Client client(options);
    while (!hung_up.load() && Clock::now() - start < 20s) std::this_thread::sleep_for(50ms);
    stop = true;
    const double held = std::chrono::duration<double>((hung_up ? hung_up_at : Clock::now()) - start).count();
    std::printf(
        "TLS trickle: connection held %.2f s (stall_timeout 0.3 s), %ld key updates, %ld plaintext bytes, "
        "CPU %.2f s, server saw the hang-up: %d\n",
        held, updates.load(), plaintext.load(), cpu_seconds() - cpu_before, hung_up.load() ? 1 : 0);
    const Result after = client.acquire("after");
    std::printf("row: %s\n", after.masters.empty() ? "" : after.masters[0].error.c_str());
    EXPECT_LT(held, 3.0);
  }
  listener.stop();
  master.join();
}

}  // namespace
}  // namespace redlock::testing

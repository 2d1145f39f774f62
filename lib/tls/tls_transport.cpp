// SPDX-License-Identifier: Apache-2.0
// The TLS transport of a Connection (detail/connection.h): how a rediss:// master's bytes
// pass through its TlsSession (tls/tls_session.h) between the socket and the reply parser.
// docs/tls.md, "Wiring", says the same in prose.
//
//   TCP connected -> start_tls(): a TlsSession, its ClientHello written. State stays
//                    `connecting`: commands wait in held_, nothing of ours is encrypted yet,
//                    and the connect timer (started at the TCP connect) keeps running.
//   socket read   -> on_tls_read(): ciphertext into the engine (reads are sized to its
//                    room, so it takes all), then drain_tls(): once the TLS handshake is
//                    done our own handshake starts (AUTH, INFO, CONFIG, the steps), then
//                    decrypted bytes go to on_read(), exactly as a plain socket's would.
//   flush()       -> flush_tls(): out_ (plaintext, in send order) into the engine, its
//                    ciphertext to the socket; what the engine did not take stays in out_,
//                    so the backlog bounds (unsent_bytes) still count it.
//   failure       -> fail(failure_reason()): the master's `not_connected` text. Nothing is
//                    written after a failure (no plaintext ever: the engine refuses it
//                    before the handshake and after a failure).
#include <algorithm>
#include <string>
#include <string_view>

#include "detail/connection.h"
#include "tls/tls_session.h"

namespace redlock::detail {

void Connection::start_tls() {
  tls_ = std::make_unique<TlsSession>(*options_.tls, options_.endpoint.host, options_.endpoint.port);
  if (tls_->failed()) {
    fail(tls_->failure_reason());
    return;
  }
  write_owned(tls_->take_ciphertext());  // the ClientHello
}

std::size_t Connection::tls_read_room(std::size_t capacity) const noexcept {
  // 0 only if the engine were full of undecrypted input, which drain_tls() never leaves;
  // libuv then reports UV_ENOBUFS and the connection fails rather than buffering more.
  return tls_ != nullptr ? std::min(capacity, tls_->ciphertext_room()) : capacity;
}

void Connection::on_tls_read(char* data, std::size_t size, std::size_t capacity) {
  if (tls_ == nullptr) return;
  if (tls_->feed_ciphertext(std::string_view(data, size)) < size) {
    fail("TLS: more input than the engine may buffer");  // reads are sized to its room
    return;
  }
  drain_tls(data, capacity);
}

void Connection::on_tls_eof(char* buffer, std::size_t capacity) {
  if (tls_ == nullptr) return;
  const auto generation = generation_;
  tls_->feed_eof();  // a reply already decrypted is still delivered, then the session fails
  if (!drain_tls(buffer, capacity) || generation != generation_) return;
  fail("connection closed by the server");
}

bool Connection::drain_tls(char* buffer, std::size_t capacity) {
  const auto generation = generation_;
  if (state_ == State::connecting && tls_->handshake_done()) {
    // TLS is up: our own handshake now, encrypted (its flush writes the handshake's last
    // flight first: the engine's output is one stream, in order).
    start_handshake();
    if (generation != generation_) return false;
  }
  // The same per-read bound as plain: what one socket read brought, now decrypted. TLS 1.3
  // refusals of our client certificate arrive here, after the handshake (docs/tls.md).
  while (!tls_->failed()) {
    const std::size_t n = tls_->read_plaintext(std::span<char>(buffer, capacity));
    if (n == 0) break;
    on_read(buffer, n);
    if (generation != generation_) return false;
  }
  if (tls_->failed()) {
    fail(tls_->failure_reason());
    return false;
  }
  write_owned(tls_->take_ciphertext());  // handshake flights, KeyUpdate answers
  if (generation != generation_) return false;
  if (const std::size_t unsent = backlog_cost(); unsent > kMaxUnsentTlsBytes) {
    fail("TLS: " + std::to_string(unsent) + " bytes of ours the master has not read (over " +
         std::to_string(kMaxUnsentTlsBytes) + ", our TLS records included): it does not read what it asks for");
    return false;
  }
  return true;
}

void Connection::flush_tls() {
  const auto generation = generation_;
  std::size_t accepted = 0;
  while (accepted < out_.size()) {
    const std::size_t n = tls_->write_plaintext(std::string_view(out_).substr(accepted));
    if (n == 0) break;
    accepted += n;
    write_owned(tls_->take_ciphertext());
    if (generation != generation_) return;  // the write failed: out_ was dropped with the socket
  }
  out_.erase(0, accepted);
  if (accepted > 0) out_begins_inside_command_ = !out_.empty();  // (Connection::begin_close)
  if (tls_->failed()) fail(tls_->failure_reason());
}

bool Connection::tls_session_reused() const noexcept { return tls_ != nullptr && tls_->session_reused(); }

std::string Connection::tls_goodbye() {
  if (!tls_->handshake_done()) return {};
  // All of out_, as a plain socket writes all of it: write_plaintext() takes a record at a time
  // (review 48: one record, 16 KiB, was sent and the rest of the queue, releases included,
  // dropped). Bounded: out_ is held to kMaxUnsentBytes per kind of command.
  std::string encrypted;
  for (std::size_t accepted = 0; accepted < out_.size();) {
    const std::size_t n = tls_->write_plaintext(std::string_view(out_).substr(accepted));
    if (n == 0) break;  // the session failed (or cannot take more now): best effort, as before
    accepted += n;
    encrypted += tls_->take_ciphertext();
  }
  tls_->shutdown();
  encrypted += tls_->take_ciphertext();
  return encrypted;
}

}  // namespace redlock::detail

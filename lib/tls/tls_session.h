// SPDX-License-Identifier: Apache-2.0
// TlsSession: one TLS client connection as a pure state machine over memory BIOs.
//
// It never touches a socket: the owner moves bytes between it and the transport.
//   socket -> feed_ciphertext()        (what the server sent; drives the handshake)
//   read_plaintext()  -> reply parser  (decrypted Redis replies)
//   write_plaintext() <- commands      (only once handshake_done())
//   take_ciphertext() -> socket        (ClientHello, handshake flights, encrypted commands,
//                                       alerts, close_notify)
// After every feed_ciphertext(), read_plaintext() and write_plaintext() call, the owner
// writes take_ciphertext() to the socket (it may be empty).
//
// Bounds (per session, independent of what the server sends):
//   - ciphertext in:  feed_ciphertext() accepts at most ciphertext_room() bytes, and
//     buffered undecrypted input never exceeds kMaxBufferedCiphertext. The owner drains
//     read_plaintext() until it returns 0 before feeding more (room then is at least
//     kMaxBufferedCiphertext minus one partial record, so there is always progress).
//   - plaintext in: the engine keeps no plaintext of its own; OpenSSL holds at most the
//     rest of one record (16 KiB) that did not fit the owner's buffer.
//   - ciphertext out: write_plaintext() accepts only what keeps pending output at or below
//     kMaxBufferedCiphertext, and read_plaintext() stops while pending output is that full
//     (a server's KeyUpdate requests make us write); only the handshake's own flights are
//     exempt (their size is set by our certificate chain, not by the server).
//
// Failures: once state() is failed, failure() and failure_reason() say why, precisely
// (unknown CA, expired certificate, name mismatch, client certificate required or
// rejected, not TLS at all, protocol too old, closed ...). No reason contains key
// material; of what the server sent, only its certificate's names and dates appear,
// sanitised to printable ASCII and bounded (never its stream's bytes).
//
// TLS 1.3 note: the server checks our client certificate AFTER our side of the handshake
// is complete, so "client certificate required/rejected" arrives on the first
// read_plaintext() after handshake_done(), not during the handshake. A connection is
// only proven usable once the first reply has been read.
//
// Threading: not thread-safe; one owner thread (the loop thread). The TlsContext must
// outlive the session.
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tls/tls_context.h"

namespace redlock::detail {

enum class TlsFailure {
  none,
  unknown_ca,                   // the server's chain does not lead to a trusted CA
  certificate_expired,          // the server's certificate (or a CA above it) expired
  certificate_not_yet_valid,    // ... or is not valid yet (clock, or a fresh certificate)
  hostname_mismatch,            // the certificate does not name the host / server_name
  certificate_invalid,          // any other verification failure (purpose, signature, ...)
  client_certificate_required,  // the server wants a client certificate; none configured
  client_certificate_rejected,  // the server refused the client certificate we sent
  not_tls,                      // the server answered the ClientHello in plaintext
  protocol_version,             // no common protocol version at or above our minimum
  closed,                       // the server closed the connection (or sent close_notify)
  handshake_failed,             // any other TLS error (no shared cipher, bad record, ...)
};

// Stable snake_case name of a failure kind ("unknown_ca", ...), for logs and results.
const char* to_string(TlsFailure failure) noexcept;

class TlsSession {
 public:
  enum class State { handshaking, established, failed };

  // Bound of buffered ciphertext, each direction (see the banner).
  static constexpr std::size_t kMaxBufferedCiphertext = 64 * 1024;

  // `host` is the endpoint's host as written in the URI (a DNS name or an IP literal,
  // IPv6 with or without brackets); `port` only tells endpoints apart in the session
  // cache. The name checked and sent as SNI is context.options().server_name, else host.
  // Starts the handshake: the ClientHello is ready in take_ciphertext() on return.
  // Never throws for a bad host: the session is then failed with a reason.
  // Throws std::bad_alloc if OpenSSL cannot allocate.
  TlsSession(TlsContext& context, std::string_view host, std::uint16_t port);
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  State state() const noexcept { return state_; }
  bool handshake_done() const noexcept { return state_ == State::established; }
  bool failed() const noexcept { return state_ == State::failed; }
  TlsFailure failure() const noexcept { return failure_; }
  const std::string& failure_reason() const noexcept { return failure_reason_; }

  // How many bytes feed_ciphertext() accepts now (size the socket read with it; 0 means
  // drain read_plaintext() first).
  std::size_t ciphertext_room() const noexcept;
  // Hands the engine bytes read from the socket. Returns how many it took (all of them
  // when bytes.size() <= ciphertext_room()). Drives the handshake. After failure it takes
  // everything and ignores it.
  std::size_t feed_ciphertext(std::string_view bytes);
  // The socket reached EOF. During the handshake this fails the session at once; when
  // established, read_plaintext() returns what is left, then the session fails (closed).
  void feed_eof();

  // Bytes to write to the socket, moved out (empty when there are none).
  std::string take_ciphertext();
  std::size_t pending_ciphertext() const noexcept;

  // Encrypts plaintext. Returns how many bytes were accepted: 0 before handshake_done(),
  // after failure, or while pending output is full (take_ciphertext(), then retry).
  std::size_t write_plaintext(std::string_view bytes);
  // Decrypts into `out`. Returns the byte count, 0 when nothing is available yet (or the
  // session just failed: check failed()).
  std::size_t read_plaintext(std::span<char> out);

  // What to report when the owner's connect timeout ends a handshake that is still
  // running: a server that sent nothing at all is most likely a plain redis:// port
  // (Redis reads a ClientHello as an inline command and waits for a newline that never
  // comes: its search stops at the ClientHello's NUL bytes), so it never answers.
  std::string handshake_timeout_reason() const;

  // Queues a close_notify (then take_ciphertext() and close the socket). Idempotent.
  void shutdown();

  // After the handshake: whether the cached session for this endpoint was resumed, the
  // protocol ("TLSv1.3") and the cipher suite. Empty strings before.
  bool session_reused() const noexcept;
  std::string protocol() const;
  std::string cipher() const;
  // Whether the server asked for a client certificate (during the handshake).
  bool client_certificate_requested() const noexcept { return client_cert_requested_; }

 private:
  struct SslDeleter {
    void operator()(SSL* ssl) const noexcept { SSL_free(ssl); }
  };

  static int on_certificate_request(SSL* ssl, void* self);
  static int on_verify(int preverify_ok, X509_STORE_CTX* store);

  void advance_handshake();
  void fail_from(int ssl_error);
  void fail(TlsFailure failure, std::string reason);
  std::string describe_verify_failure(long result, TlsFailure& kind) const;

  TlsContext& context_;
  std::unique_ptr<SSL, SslDeleter> ssl_;
  BIO* in_ = nullptr;   // owned by ssl_
  BIO* out_ = nullptr;  // owned by ssl_
  std::string host_;         // as given, brackets stripped
  std::string checked_name_; // server_name or host
  bool name_is_ip_ = false;
  std::string cache_key_;    // stored in the SSL's ex_data for the new-session callback
  State state_ = State::handshaking;
  TlsFailure failure_ = TlsFailure::none;
  std::string failure_reason_;
  bool eof_ = false;
  bool any_byte_received_ = false;
  unsigned char first_byte_ = 0;
  bool client_cert_requested_ = false;
  bool offered_session_ = false;
  // First verification error as the verify callback saw it (depth, and the failing
  // certificate's dates and names, which are public).
  int verify_error_depth_ = -1;
  std::string verify_error_not_after_;
  std::string verify_error_not_before_;
  std::string verify_error_names_;
};

}  // namespace redlock::detail

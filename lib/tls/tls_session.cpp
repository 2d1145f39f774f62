// SPDX-License-Identifier: Apache-2.0
#include "tls/tls_session.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstdio>
#include <initializer_list>
#include <new>
#include <utility>
#include <vector>

namespace redlock::detail {
namespace {

// Room kept free for record overhead when accepting plaintext: write_plaintext() takes
// at most 64 KiB - pending - this, which is at most 5 records, each adding at most a
// 5-byte header, 16 bytes of IV, 64 of MAC and 256 of padding (TLS 1.2 CBC; TLS 1.3 adds 22).
constexpr std::size_t kRecordOverheadMargin = 5 * 512;

// Certificate names and dates are the server's bytes: printed only as sanitised, bounded text.
std::string sanitized(std::string_view text, std::size_t limit = 128) {
  std::string out;
  for (const char c : text.substr(0, limit)) {
    const auto byte = static_cast<unsigned char>(c);
    out += byte >= 0x20 && byte < 0x7f ? c : '?';
  }
  if (text.size() > limit) out += "...";
  return out;
}

std::string asn1_time_text(const ASN1_TIME* time) {
  if (time == nullptr) return {};
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return {};
  std::string out;
  if (ASN1_TIME_print(bio, time) == 1) {
    char* data = nullptr;
    const long len = BIO_get_mem_data(bio, &data);
    if (len > 0) out.assign(data, static_cast<std::size_t>(len));
  }
  BIO_free(bio);
  return sanitized(out, 64);
}

// "DNS:a, IP:127.0.0.2" from the subjectAltName (at most 8 entries), else the CN.
std::string certificate_names(X509* cert) {
  if (cert == nullptr) return {};
  std::string out;
  auto* names = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names != nullptr) {
    const int count = sk_GENERAL_NAME_num(names);
    for (int i = 0; i < count && i < 8; ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
      std::string entry;
      if (name->type == GEN_DNS) {
        const ASN1_STRING* dns = name->d.dNSName;
        entry = "DNS:" + sanitized(std::string_view(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)),
                                                    static_cast<std::size_t>(ASN1_STRING_length(dns))));
      } else if (name->type == GEN_IPADD) {
        const ASN1_OCTET_STRING* ip = name->d.iPAddress;
        char text[INET6_ADDRSTRLEN] = {};
        const int len = ASN1_STRING_length(ip);
        const int family = len == 4 ? AF_INET : len == 16 ? AF_INET6 : 0;
        if (family != 0 && inet_ntop(family, ASN1_STRING_get0_data(ip), text, sizeof text) != nullptr) {
          entry = std::string("IP:") + text;
        }
      }
      if (entry.empty()) continue;
      if (!out.empty()) out += ", ";
      out += entry;
    }
    if (count > 8) out += ", ...";
    GENERAL_NAMES_free(names);
  }
  if (!out.empty()) return out;
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0) {
    return "CN=" + sanitized(cn) + " (no subjectAltName)";
  }
  return "no names";
}

bool is_ip_literal(const std::string& host) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 || inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

bool any_reason(const std::vector<int>& reasons, std::initializer_list<int> wanted) {
  return std::any_of(reasons.begin(), reasons.end(), [&](int r) {
    return std::find(wanted.begin(), wanted.end(), r) != wanted.end();
  });
}

}  // namespace

const char* to_string(TlsFailure failure) noexcept {
  switch (failure) {
    case TlsFailure::none: return "none";
    case TlsFailure::unknown_ca: return "unknown_ca";
    case TlsFailure::certificate_expired: return "certificate_expired";
    case TlsFailure::certificate_not_yet_valid: return "certificate_not_yet_valid";
    case TlsFailure::hostname_mismatch: return "hostname_mismatch";
    case TlsFailure::certificate_invalid: return "certificate_invalid";
    case TlsFailure::client_certificate_required: return "client_certificate_required";
    case TlsFailure::client_certificate_rejected: return "client_certificate_rejected";
    case TlsFailure::not_tls: return "not_tls";
    case TlsFailure::protocol_version: return "protocol_version";
    case TlsFailure::closed: return "closed";
    case TlsFailure::handshake_failed: return "handshake_failed";
  }
  return "unknown";
}

TlsSession::TlsSession(TlsContext& context, std::string_view host, std::uint16_t port) : context_(context) {
  host_ = std::string(host);
  if (host_.size() >= 2 && host_.front() == '[' && host_.back() == ']') host_ = host_.substr(1, host_.size() - 2);
  checked_name_ = context_.options().server_name.empty() ? host_ : context_.options().server_name;
  name_is_ip_ = is_ip_literal(checked_name_);
  // The effective name is part of the key: a session verified for one name is never
  // offered to a connection that must verify another.
  cache_key_ = checked_name_ + '\n' + host_ + '\n' + std::to_string(port);

  ERR_clear_error();
  ssl_.reset(SSL_new(context_.native()));
  if (!ssl_) throw std::bad_alloc();
  in_ = BIO_new(BIO_s_mem());
  out_ = BIO_new(BIO_s_mem());
  if (in_ == nullptr || out_ == nullptr) {
    BIO_free(in_);
    BIO_free(out_);
    throw std::bad_alloc();
  }
  // An empty input BIO means "retry later", not EOF, until feed_eof().
  BIO_set_mem_eof_return(in_, -1);
  SSL_set_bio(ssl_.get(), in_, out_);
  SSL_set_connect_state(ssl_.get());
  SSL_set_app_data(ssl_.get(), this);
  SSL_set_ex_data(ssl_.get(), TlsContext::session_ex_index(), &cache_key_);
  SSL_set_cert_cb(ssl_.get(), &TlsSession::on_certificate_request, this);
  SSL_set_verify(ssl_.get(), context_.verifies_peer() ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, &TlsSession::on_verify);

  if (checked_name_.empty()) {
    fail(TlsFailure::hostname_mismatch, "TLS: no host name to verify the server's certificate against");
    return;
  }
  if (context_.verifies_peer()) {
    const bool set = name_is_ip_
                         ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_.get()), checked_name_.c_str()) == 1
                         : SSL_set1_host(ssl_.get(), checked_name_.c_str()) == 1;
    if (!set) {
      fail(TlsFailure::hostname_mismatch,
           "TLS: cannot check the certificate against '" + sanitized(checked_name_) + "': " + drain_openssl_errors());
      return;
    }
    SSL_set_hostflags(ssl_.get(), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  }
  // SNI carries names only (RFC 6066 section 3: "Literal IPv4 and IPv6 addresses are not permitted").
  if (!name_is_ip_ && SSL_set_tlsext_host_name(ssl_.get(), checked_name_.c_str()) != 1) {
    fail(TlsFailure::handshake_failed,
         "TLS: '" + sanitized(checked_name_) + "' cannot be sent as a server name: " + drain_openssl_errors());
    return;
  }
  if (SslSessionPtr cached = context_.take_session(cache_key_)) {
    offered_session_ = SSL_set_session(ssl_.get(), cached.get()) == 1;
  }
  advance_handshake();
}

TlsSession::~TlsSession() = default;

std::size_t TlsSession::ciphertext_room() const noexcept {
  const std::size_t pending = BIO_ctrl_pending(in_);
  return pending >= kMaxBufferedCiphertext ? 0 : kMaxBufferedCiphertext - pending;
}

std::size_t TlsSession::feed_ciphertext(std::string_view bytes) {
  if (state_ == State::failed || eof_) return bytes.size();
  const std::size_t take = std::min(bytes.size(), ciphertext_room());
  if (take == 0) return 0;
  if (!any_byte_received_) {
    any_byte_received_ = true;
    first_byte_ = static_cast<unsigned char>(bytes.front());
  }
  // A memory BIO grows as needed; `take` is bounded by the room, so it fits in an int.
  if (BIO_write(in_, bytes.data(), static_cast<int>(take)) != static_cast<int>(take)) {
    fail(TlsFailure::handshake_failed, "TLS: out of memory buffering input");
    return bytes.size();
  }
  if (state_ == State::handshaking) advance_handshake();
  return take;
}

void TlsSession::feed_eof() {
  if (eof_ || state_ == State::failed) return;
  eof_ = true;
  BIO_set_mem_eof_return(in_, 0);
  if (state_ == State::handshaking) {
    advance_handshake();
    if (state_ == State::handshaking) {
      fail(TlsFailure::closed, "TLS: the server closed the connection during the handshake");
    }
  }
}

std::string TlsSession::take_ciphertext() {
  std::string out;
  const std::size_t pending = BIO_ctrl_pending(out_);
  if (pending == 0) return out;
  out.resize(pending);
  const int got = BIO_read(out_, out.data(), static_cast<int>(pending));
  out.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  return out;
}

std::size_t TlsSession::pending_ciphertext() const noexcept { return BIO_ctrl_pending(out_); }

std::size_t TlsSession::write_plaintext(std::string_view bytes) {
  if (state_ != State::established || bytes.empty()) return 0;
  const std::size_t pending = pending_ciphertext();
  if (pending + kRecordOverheadMargin >= kMaxBufferedCiphertext) return 0;
  const std::size_t take = std::min(bytes.size(), kMaxBufferedCiphertext - kRecordOverheadMargin - pending);
  ERR_clear_error();
  std::size_t written = 0;
  const int rc = SSL_write_ex(ssl_.get(), bytes.data(), take, &written);
  if (rc == 1) return written;
  const int error = SSL_get_error(ssl_.get(), rc);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return 0;
  fail_from(error);
  return 0;
}

std::size_t TlsSession::read_plaintext(std::span<char> out) {
  if (state_ != State::established || out.empty()) return 0;
  // Reading may make us write (KeyUpdate, alerts); never past the output bound.
  if (pending_ciphertext() + kRecordOverheadMargin >= kMaxBufferedCiphertext) return 0;
  ERR_clear_error();
  std::size_t got = 0;
  const int rc = SSL_read_ex(ssl_.get(), out.data(), out.size(), &got);
  if (rc == 1) return got;
  const int error = SSL_get_error(ssl_.get(), rc);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return 0;
  fail_from(error);
  return 0;
}

void TlsSession::shutdown() {
  if (state_ != State::established) return;
  ERR_clear_error();
  // One call queues our close_notify; we do not wait for the server's.
  if (SSL_shutdown(ssl_.get()) < 0) ERR_clear_error();
}

std::string TlsSession::handshake_timeout_reason() const {
  if (!any_byte_received_) {
    return "TLS handshake timed out: the server sent nothing in answer to the ClientHello "
           "(a plain redis:// port never answers one; is this master really TLS?)";
  }
  return "TLS handshake timed out: the server answered the ClientHello but did not complete the handshake";
}

bool TlsSession::session_reused() const noexcept {
  return state_ != State::handshaking && ssl_ && SSL_session_reused(ssl_.get()) == 1;
}

std::string TlsSession::protocol() const {
  if (state_ == State::handshaking || !ssl_) return {};
  return SSL_get_version(ssl_.get());
}

std::string TlsSession::cipher() const {
  if (state_ == State::handshaking || !ssl_) return {};
  const char* name = SSL_get_cipher_name(ssl_.get());
  return name != nullptr ? name : "";
}

int TlsSession::on_certificate_request(SSL* /*ssl*/, void* self) {
  static_cast<TlsSession*>(self)->client_cert_requested_ = true;
  return 1;  // proceed with whatever certificate the context has (maybe none)
}

int TlsSession::on_verify(int preverify_ok, X509_STORE_CTX* store) {
  if (preverify_ok == 1) return 1;
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* self = ssl != nullptr ? static_cast<TlsSession*>(SSL_get_app_data(ssl)) : nullptr;
  if (self != nullptr && self->verify_error_depth_ < 0) {
    self->verify_error_depth_ = X509_STORE_CTX_get_error_depth(store);
    X509* cert = X509_STORE_CTX_get_current_cert(store);
    if (cert != nullptr) {
      self->verify_error_not_after_ = asn1_time_text(X509_get0_notAfter(cert));
      self->verify_error_not_before_ = asn1_time_text(X509_get0_notBefore(cert));
      self->verify_error_names_ = certificate_names(cert);
    }
  }
  return 0;  // OpenSSL's verdict stands
}

void TlsSession::advance_handshake() {
  ERR_clear_error();
  const int rc = SSL_do_handshake(ssl_.get());
  if (rc == 1) {
    state_ = State::established;
    return;
  }
  const int error = SSL_get_error(ssl_.get(), rc);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) return;
  fail_from(error);
}

std::string TlsSession::describe_verify_failure(long result, TlsFailure& kind) const {
  const std::string what = verify_error_depth_ > 0
                               ? "a CA certificate in the server's chain (depth " + std::to_string(verify_error_depth_) + ")"
                               : "the server's certificate";
  const std::string openssl = X509_verify_cert_error_string(result);
  switch (result) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      kind = TlsFailure::unknown_ca;
      return "unknown CA: the server's certificate is not signed by a trusted CA (" + openssl +
             "); set TlsOptions::ca_file to the CA that signed the masters' certificates";
    case X509_V_ERR_CERT_HAS_EXPIRED:
      kind = TlsFailure::certificate_expired;
      return "certificate expired: " + what + " expired (notAfter " + verify_error_not_after_ + ")";
    case X509_V_ERR_CERT_NOT_YET_VALID:
      kind = TlsFailure::certificate_not_yet_valid;
      return "certificate not yet valid: " + what + " is valid from " + verify_error_not_before_ +
             " (is this machine's clock right?)";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      kind = TlsFailure::hostname_mismatch;
      return "hostname mismatch: the server's certificate does not name " +
             std::string(name_is_ip_ ? "IP address '" : "host '") + sanitized(checked_name_) + "' (it names " +
             (verify_error_names_.empty() ? std::string("nothing usable") : verify_error_names_) +
             "); set TlsOptions::server_name if the masters are reached under another name";
    default:
      kind = TlsFailure::certificate_invalid;
      return "certificate rejected: " + what + ": " + openssl;
  }
}

void TlsSession::fail_from(int ssl_error) {
  // Collect the error queue's reasons (library SSL) and its text, then decide.
  std::vector<int> reasons;
  std::string text;
  for (unsigned long code = ERR_get_error(); code != 0; code = ERR_get_error()) {
    reasons.push_back(ERR_GET_REASON(code));
    const char* reason = ERR_reason_error_string(code);
    if (reason != nullptr && text.find(reason) == std::string::npos) {
      if (!text.empty()) text += "; ";
      text += reason;
    }
  }
  const std::string openssl = text.empty() ? std::string() : " (" + text + ")";
  const bool handshaking = state_ == State::handshaking;

  // 1. Our own verification of the server.
  const long verify = SSL_get_verify_result(ssl_.get());
  if (context_.verifies_peer() && verify != X509_V_OK && handshaking) {
    TlsFailure kind = TlsFailure::certificate_invalid;
    std::string reason = describe_verify_failure(verify, kind);
    fail(kind, std::move(reason));
    return;
  }

  // 2. Not TLS at all: a TLS server's first byte is a record type (20..24: change cipher
  // spec, alert, handshake, application data, heartbeat). The byte is described, never
  // the server's text.
  if (handshaking && any_byte_received_ && (first_byte_ < 20 || first_byte_ > 24)) {
    std::string looks;
    switch (first_byte_) {
      case '-': looks = ", as a Redis error reply starts"; break;
      case '+': looks = ", as a Redis status reply starts"; break;
      case '$': case '*': case ':': looks = ", as a Redis reply starts"; break;
      default: break;
    }
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", first_byte_);
    fail(TlsFailure::not_tls, std::string("server not speaking TLS: it answered the ClientHello with byte ") + hex +
                                  looks + " instead of a TLS record (a plain redis:// port?)");
    return;
  }

  // 3. Protocol version: no common version at or above our minimum.
  if (any_reason(reasons, {SSL_R_TLSV1_ALERT_PROTOCOL_VERSION, SSL_R_UNSUPPORTED_PROTOCOL,
                           SSL_R_NO_PROTOCOLS_AVAILABLE, SSL_R_WRONG_SSL_VERSION, SSL_R_VERSION_TOO_LOW})) {
    const char* floor = context_.options().min_version == TlsVersion::tls1_3 ? "TLS 1.3" : "TLS 1.2";
    fail(TlsFailure::protocol_version,
         std::string("protocol version too low: the server offers no TLS version at or above ") + floor + openssl);
    return;
  }

  // 4. The server refused us for our certificate (or its absence). In TLS 1.3 this comes
  // after our handshake completed, on the first read.
  if (any_reason(reasons, {SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED}) ||
      (client_cert_requested_ &&
       any_reason(reasons, {SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE, SSL_R_SSLV3_ALERT_BAD_CERTIFICATE,
                            SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE, SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED,
                            SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED, SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN,
                            SSL_R_TLSV1_ALERT_UNKNOWN_CA, SSL_R_TLSV1_ALERT_ACCESS_DENIED,
                            SSL_R_TLSV1_ALERT_DECRYPT_ERROR}))) {
    if (!context_.has_client_certificate()) {
      fail(TlsFailure::client_certificate_required,
           "server requires a client certificate (tls-auth-clients): set TlsOptions::cert_file and key_file" +
               openssl);
    } else {
      fail(TlsFailure::client_certificate_rejected,
           "server rejected our client certificate (TlsOptions::cert_file '" +
               sanitized(context_.options().cert_file, 256) + "')" + openssl);
    }
    return;
  }

  // 5. Closed.
  if (ssl_error == SSL_ERROR_ZERO_RETURN) {
    fail(TlsFailure::closed, "the server closed the TLS connection (close_notify)");
    return;
  }
  if (eof_ || ssl_error == SSL_ERROR_SYSCALL || any_reason(reasons, {SSL_R_UNEXPECTED_EOF_WHILE_READING})) {
    fail(TlsFailure::closed, handshaking ? (any_byte_received_
                                                ? "the server closed the connection during the TLS handshake"
                                                : "the server closed the connection without answering the TLS "
                                                  "ClientHello (not a TLS port?)")
                                         : "the server closed the connection without a TLS close_notify");
    return;
  }

  // 6. A wrong-version record from a server whose first byte looked like TLS.
  if (handshaking && any_reason(reasons, {SSL_R_WRONG_VERSION_NUMBER, SSL_R_PACKET_LENGTH_TOO_LONG})) {
    fail(TlsFailure::not_tls, "server not speaking TLS: its answer to the ClientHello is not a TLS record" + openssl);
    return;
  }
  fail(TlsFailure::handshake_failed,
       std::string(handshaking ? "TLS handshake failed" : "TLS connection failed") +
           (text.empty() ? std::string() : ": " + text));
}

void TlsSession::fail(TlsFailure failure, std::string reason) {
  if (state_ == State::failed) return;
  // After a failed handshake (or a refusal of our certificate) the endpoint's cached
  // session is not offered again: the next connect does a full, fully verified handshake.
  if (state_ == State::handshaking || failure == TlsFailure::client_certificate_required ||
      failure == TlsFailure::client_certificate_rejected) {
    context_.forget_session(cache_key_);
  }
  state_ = State::failed;
  failure_ = failure;
  failure_reason_ = std::move(reason);
  ERR_clear_error();
}

}  // namespace redlock::detail

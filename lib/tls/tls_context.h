// SPDX-License-Identifier: Apache-2.0
// TlsContext: one OpenSSL SSL_CTX per Client, built from redlock::TlsOptions, plus the
// cache of the last TLS session of each endpoint (so a reconnect can resume).
//
// Transport-agnostic: it never touches a socket. TlsSession (tls_session.h) makes one SSL
// per connection from it.
//
// Thread safety: construction may happen on any thread; new_session() and the session
// cache may be used from any thread (the cache has its own mutex; SSL_CTX is safe for
// concurrent SSL_new). The context must outlive every TlsSession made from it.
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "redlock/tls.h"

namespace redlock::detail {

struct SslCtxDeleter {
  void operator()(SSL_CTX* ctx) const noexcept { SSL_CTX_free(ctx); }
};
struct SslSessionDeleter {
  void operator()(SSL_SESSION* session) const noexcept { SSL_SESSION_free(session); }
};
using SslCtxPtr = std::unique_ptr<SSL_CTX, SslCtxDeleter>;
using SslSessionPtr = std::unique_ptr<SSL_SESSION, SslSessionDeleter>;

class TlsContext {
 public:
  // Validates `options` and loads the CA store, the client certificate and key.
  // Throws redlock::ConfigError naming the field, the file and OpenSSL's reason
  // (e.g. "TlsOptions::key_file '/x/client.key' does not match cert_file '/x/client.crt'").
  // The message never contains key material or file contents.
  explicit TlsContext(TlsOptions options);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  const TlsOptions& options() const noexcept { return options_; }
  SSL_CTX* native() const noexcept { return ctx_.get(); }
  // True when insecure_skip_verify is set: the caller should warn once, loudly.
  bool verifies_peer() const noexcept { return !options_.insecure_skip_verify; }
  // Whether a client certificate is configured (for failure reasons).
  bool has_client_certificate() const noexcept { return !options_.cert_file.empty(); }

  // Session cache, one entry per endpoint key (TlsSession builds the key from host, port
  // and the effective server name). take_session() hands out the stored session; a TLS 1.3
  // ticket is removed on the way out (tickets are single-use, RFC 8446 C.4), a TLS 1.2
  // session stays. Returns nullptr when there is none.
  SslSessionPtr take_session(const std::string& key);
  void remember_session(const std::string& key, SslSessionPtr session);
  void forget_session(const std::string& key);
  std::size_t cached_sessions() const;

  // The SSL ex_data index under which TlsSession stores itself (for OpenSSL callbacks).
  static int session_ex_index();

 private:
  TlsOptions options_;
  SslCtxPtr ctx_;
  mutable std::mutex cache_mutex_;
  std::map<std::string, SslSessionPtr> sessions_;  // guarded by cache_mutex_
};

// OpenSSL's error queue, drained into one line ("reason; reason"), empty if the queue was
// empty. Reason strings only: OpenSSL never puts key material there.
std::string drain_openssl_errors();

}  // namespace redlock::detail

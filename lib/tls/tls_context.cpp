// SPDX-License-Identifier: Apache-2.0
#include "tls/tls_context.h"

#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <filesystem>
#include <utility>

#include "redlock/errors.h"

namespace redlock::detail {
namespace {

[[noreturn]] void config_error(const std::string& what) {
  throw ConfigError("TlsOptions::" + what);
}

std::string with_reason(const std::string& what) {
  const std::string reason = drain_openssl_errors();
  return reason.empty() ? what : what + ": " + reason;
}

// A value we quote in errors: the paths and the server name are configuration, not
// secrets, but a control byte in them would garble a log line.
std::string printable(std::string_view value) {
  std::string out;
  for (const char c : value) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

// OpenSSL's own messages for a missing file are "system library" codes; saying it plainly
// first is clearer, and it is checked before OpenSSL is asked.
void require_regular_file(const char* field, const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    config_error(std::string(field) + " '" + printable(path) + "': no such file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    config_error(std::string(field) + " '" + printable(path) + "': not a regular file");
  }
}

// OpenSSL would prompt on the terminal for the passphrase of an encrypted key without a
// callback; a library must never do that. Refusing makes loading fail with a clear reason.
int refuse_passphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*userdata*/) { return -1; }

// Called by OpenSSL for every session the server hands us (TLS 1.2 at the end of a full
// handshake, TLS 1.3 for each NewSessionTicket, which arrives after the handshake).
int on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* context = static_cast<TlsContext*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  const auto* key = static_cast<const std::string*>(SSL_get_ex_data(ssl, TlsContext::session_ex_index()));
  if (context == nullptr || key == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;
  context->remember_session(*key, SslSessionPtr(session));
  return 1;  // we took the reference
}

}  // namespace

std::string drain_openssl_errors() {
  std::string out;
  for (unsigned long code = ERR_get_error(); code != 0; code = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(code);
    std::string text = reason != nullptr ? reason : "error code " + std::to_string(ERR_GET_REASON(code));
    if (out.find(text) != std::string::npos) continue;
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out;
}

int TlsContext::session_ex_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

TlsContext::TlsContext(TlsOptions options) : options_(std::move(options)) {
  ERR_clear_error();
  ctx_.reset(SSL_CTX_new(TLS_client_method()));
  if (!ctx_) throw ConfigError(with_reason("TLS: cannot create an OpenSSL context"));
  SSL_CTX* ctx = ctx_.get();
  SSL_CTX_set_app_data(ctx, this);

  // Our floor, whatever openssl.cnf or the security level would allow.
  const int min_version = options_.min_version == TlsVersion::tls1_3 ? TLS1_3_VERSION : TLS1_2_VERSION;
  if (SSL_CTX_set_min_proto_version(ctx, min_version) != 1) {
    throw ConfigError(with_reason("TLS: cannot set the minimum protocol version"));
  }
  // Renegotiation is an attack surface we do not need (Redis never asks for it).
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  // Memory BIOs: SSL_write may report progress record by record (the engine bounds what
  // it accepts), the caller's buffer may move between retries, and idle connections give
  // their 16 KiB record buffers back (a Client keeps one connection per master).
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                            SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_default_passwd_cb(ctx, &refuse_passphrase);

  if (!options_.server_name.empty()) {
    for (const char c : options_.server_name) {
      const auto byte = static_cast<unsigned char>(c);
      if (byte <= 0x20 || byte == 0x7f) {
        config_error("server_name '" + printable(options_.server_name) +
                     "' has a space or control byte");
      }
    }
  }

  // Trust: the given CAs only, else the system store. Loaded even with
  // insecure_skip_verify, so a bad path is reported either way.
  if (!options_.ca_file.empty()) require_regular_file("ca_file", options_.ca_file);
  if (!options_.ca_dir.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(options_.ca_dir, ec)) {
      config_error("ca_dir '" + printable(options_.ca_dir) + "': not a directory");
    }
  }
  if (!options_.ca_file.empty() || !options_.ca_dir.empty()) {
    const char* file = options_.ca_file.empty() ? nullptr : options_.ca_file.c_str();
    const char* dir = options_.ca_dir.empty() ? nullptr : options_.ca_dir.c_str();
    if (SSL_CTX_load_verify_locations(ctx, file, dir) != 1) {
      const std::string what = file != nullptr ? "ca_file '" + printable(options_.ca_file) + "'"
                                               : "ca_dir '" + printable(options_.ca_dir) + "'";
      config_error(with_reason(what + " cannot be loaded (expected PEM certificates)"));
    }
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    throw ConfigError(with_reason("TLS: cannot load the system's CA store"));
  }

  if (options_.cert_file.empty() != options_.key_file.empty()) {
    config_error(options_.cert_file.empty()
                     ? "key_file '" + printable(options_.key_file) + "' is set but cert_file is not (both or neither)"
                     : "cert_file '" + printable(options_.cert_file) + "' is set but key_file is not (both or neither)");
  }
  if (!options_.cert_file.empty()) {
    require_regular_file("cert_file", options_.cert_file);
    require_regular_file("key_file", options_.key_file);
    if (SSL_CTX_use_certificate_chain_file(ctx, options_.cert_file.c_str()) != 1) {
      config_error(with_reason("cert_file '" + printable(options_.cert_file) +
                               "' cannot be loaded (expected a PEM certificate)"));
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, options_.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      // OpenSSL checks the key against the certificate while loading it.
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
        ERR_clear_error();
        config_error("key_file '" + printable(options_.key_file) + "' does not match cert_file '" +
                     printable(options_.cert_file) + "'");
      }
      config_error(with_reason("key_file '" + printable(options_.key_file) +
                               "' cannot be loaded (expected an unencrypted PEM private key)"));
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      ERR_clear_error();
      config_error("key_file '" + printable(options_.key_file) + "' does not match cert_file '" +
                   printable(options_.cert_file) + "'");
    }
  }

  SSL_CTX_set_verify(ctx, options_.insecure_skip_verify ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, nullptr);

  // Client-side cache through our own map (keyed by endpoint); OpenSSL's internal store
  // is only a server-side lookup table, so it is switched off.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, &on_new_session);
}

TlsContext::~TlsContext() {
  // Sessions first: they refer to nothing in the context, but keep the order obvious.
  const std::lock_guard lock(cache_mutex_);
  sessions_.clear();
}

SslSessionPtr TlsContext::take_session(const std::string& key) {
  const std::lock_guard lock(cache_mutex_);
  const auto it = sessions_.find(key);
  if (it == sessions_.end()) return nullptr;
  if (SSL_SESSION_get_protocol_version(it->second.get()) >= TLS1_3_VERSION) {
    SslSessionPtr session = std::move(it->second);
    sessions_.erase(it);
    return session;
  }
  SSL_SESSION_up_ref(it->second.get());
  return SslSessionPtr(it->second.get());
}

void TlsContext::remember_session(const std::string& key, SslSessionPtr session) {
  const std::lock_guard lock(cache_mutex_);
  sessions_[key] = std::move(session);
}

void TlsContext::forget_session(const std::string& key) {
  const std::lock_guard lock(cache_mutex_);
  sessions_.erase(key);
}

std::size_t TlsContext::cached_sessions() const {
  const std::lock_guard lock(cache_mutex_);
  return sessions_.size();
}

}  // namespace redlock::detail

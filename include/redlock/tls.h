// SPDX-License-Identifier: Apache-2.0
// redlock/tls.h — how the library speaks TLS to masters (rediss://).
//
// TlsOptions says HOW to talk TLS; WHETHER a master is reached over TLS is decided by its
// URI: rediss://host:port is TLS, redis://host:port is plain TCP. One set of TlsOptions
// applies to every rediss:// master of a Client (one OpenSSL context per Client).
//
// What is verified by default (insecure_skip_verify == false):
//   - the server's certificate chain up to a trusted CA (ca_file / ca_dir, else the
//     system store), including validity dates;
//   - that the certificate names the server: DNS names against a subjectAltName dNSName
//     (no partial wildcards; the subject CN when it has no DNS subjectAltName, as OpenSSL
//     checks), IP literals against a subjectAltName iPAddress;
//   - TLS 1.2 or newer (never lower, whatever OpenSSL's configuration allows).
// See docs/tls.md for what is not verified and for the failure reasons.
//
// Thread safety: a plain value type. Validation happens when a Client is built from it
// (redlock::ConfigError naming the bad field and file; never any key material).
#pragma once

#include <string>

namespace redlock {

enum class TlsVersion {
  tls1_2,  // TLS 1.2 or 1.3 (the default)
  tls1_3,  // TLS 1.3 only
};

struct TlsOptions {
  // PEM file of CA certificates trusted to sign the masters' certificates.
  // Empty (default) together with an empty ca_dir: the system's default store
  // (OpenSSL's default paths, /etc/ssl/certs on Debian). When set, ONLY these CAs are
  // trusted (the system store is not added).
  std::string ca_file;
  // Directory of CA certificates in OpenSSL's hashed layout (`openssl rehash`).
  // May be combined with ca_file. Empty (default) = not used.
  std::string ca_dir;

  // Client certificate (PEM, may hold the chain after the leaf) and its private key
  // (PEM, unencrypted: a passphrase is not supported and is never prompted for), for
  // masters that run with tls-auth-clients yes (mutual TLS). Both or neither; empty
  // (default) = no client certificate is offered.
  std::string cert_file;
  std::string key_file;

  // Name sent as SNI and checked against the certificate instead of the URI's host.
  // Empty (default) = the host as written in each master's URI: a DNS name is sent as SNI
  // and checked as a name; an IP literal is not sent as SNI (RFC 6066 forbids it) and is
  // checked against the certificate's IP addresses. Set it when the masters are reached
  // by IP but their certificates carry a name. Applies to every master of the Client.
  std::string server_name;

  // Lowest protocol version accepted. Never below TLS 1.2.
  TlsVersion min_version = TlsVersion::tls1_2;

  // DANGER: true turns OFF every check of the server's identity: any certificate from
  // anyone is accepted (expired, self-signed, for another host). The connection is still
  // encrypted, but an active attacker on the path can read and change every command,
  // including AUTH. Only for tests and throw-away setups. Default false.
  bool insecure_skip_verify = false;
};

}  // namespace redlock

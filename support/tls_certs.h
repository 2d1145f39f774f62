// SPDX-License-Identifier: Apache-2.0
// redlock::support — a throw-away PKI for TLS tests (rediss://).
//
// Generated with libcrypto (no `openssl` command needed) into a private temp dir that the
// TestPki owns and removes. Keys are EC P-256, certificates SHA-256, written as PEM
// (keys unencrypted, mode 0600). Test tooling only: nothing here is fit for production.
//
// What is made, all but the "unknown" ones signed by ca_file():
//   server            subjectAltName DNS:localhost, IP:127.0.0.1, IP:::1; serverAuth
//   client            CN=redlock-test-client; clientAuth
//   expired_server    like server, but valid from 2 days ago to 1 day ago
//   wrong_name_server subjectAltName DNS:wrong.example, IP:127.0.0.2 only
//   unknown_ca_server like server, signed by another CA (other_ca_file()) nobody trusts
//   unknown_ca_client like client, signed by that other CA
//
// Threading: one instance per thread; construction is slow-ish (a few key generations).
#pragma once

#include <string>

#include "support/redis_server.h"

namespace redlock::support {

struct TestCertificate {
  std::string cert_file;  // PEM certificate
  std::string key_file;   // PEM private key (unencrypted)
};

class TestPki {
 public:
  // Throws std::runtime_error (with OpenSSL's reason) if generation or writing fails.
  TestPki();
  // Removes the directory and everything in it.
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;

  const std::string& dir() const noexcept { return dir_; }
  const std::string& ca_file() const noexcept { return ca_.cert_file; }
  const std::string& other_ca_file() const noexcept { return other_ca_.cert_file; }

  const TestCertificate& ca() const noexcept { return ca_; }
  const TestCertificate& server() const noexcept { return server_; }
  const TestCertificate& client() const noexcept { return client_; }
  const TestCertificate& expired_server() const noexcept { return expired_server_; }
  const TestCertificate& wrong_name_server() const noexcept { return wrong_name_server_; }
  const TestCertificate& unknown_ca_server() const noexcept { return unknown_ca_server_; }
  const TestCertificate& unknown_ca_client() const noexcept { return unknown_ca_client_; }

 private:
  std::string dir_;
  TestCertificate ca_;
  TestCertificate other_ca_;
  TestCertificate server_;
  TestCertificate client_;
  TestCertificate expired_server_;
  TestCertificate wrong_name_server_;
  TestCertificate unknown_ca_server_;
  TestCertificate unknown_ca_client_;
};

// A TLS-only redis-server presenting `cert`, trusting the PKI's CA; `auth_clients` is
// tls-auth-clients ("no", "yes", "optional"). The starter's own connections (readiness,
// command()) present the PKI's good client certificate.
inline RedisServerOptions tls_server_options(const TestPki& pki, const TestCertificate& cert,
                                             const std::string& auth_clients = "no") {
  RedisServerOptions options;
  options.tls.cert_file = cert.cert_file;
  options.tls.key_file = cert.key_file;
  options.tls.ca_cert_file = pki.ca_file();
  options.tls.auth_clients = auth_clients;
  options.tls.client_cert_file = pki.client().cert_file;
  options.tls.client_key_file = pki.client().key_file;
  return options;
}

}  // namespace redlock::support

// SPDX-License-Identifier: Apache-2.0
// The base of the TLS test suites: one test PKI (a CA and its certificates, support/tls_certs.h)
// generated per suite, and a redis-server configured with one of its certificates.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "support/redis_server.h"
#include "support/tls_certs.h"

namespace redlock::testing {

class TlsTestBase : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pki_ = new support::TestPki(); }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }

  static support::RedisServerOptions tls_server(const support::TestCertificate& cert,
                                                const std::string& auth_clients = "no") {
    return support::tls_server_options(*pki_, cert, auth_clients);
  }

  static inline support::TestPki* pki_ = nullptr;
};

}  // namespace redlock::testing

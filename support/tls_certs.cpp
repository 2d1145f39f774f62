// SPDX-License-Identifier: Apache-2.0
#include "support/tls_certs.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace redlock::support {
namespace {

struct PkeyDeleter {
  void operator()(EVP_PKEY* key) const noexcept { EVP_PKEY_free(key); }
};
struct X509Deleter {
  void operator()(X509* cert) const noexcept { X509_free(cert); }
};
struct FileCloser {
  void operator()(FILE* file) const noexcept { std::fclose(file); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;

[[noreturn]] void openssl_failed(const std::string& what) {
  std::string reasons;
  for (unsigned long code = ERR_get_error(); code != 0; code = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(code);
    if (reason == nullptr) continue;
    if (!reasons.empty()) reasons += "; ";
    reasons += reason;
  }
  throw std::runtime_error("TestPki: " + what + (reasons.empty() ? "" : ": " + reasons));
}

constexpr long kDay = 24 * 60 * 60;

struct Issued {
  PkeyPtr key;
  X509Ptr cert;
};

struct Spec {
  std::string common_name;
  bool is_ca = false;
  std::string extended_key_usage;  // "serverAuth", "clientAuth" or empty
  std::string subject_alt_name;    // e.g. "DNS:localhost,IP:127.0.0.1"; empty = none
  long not_before = -kDay;         // seconds from now
  long not_after = 30 * kDay;
};

void add_extension(X509* cert, X509V3_CTX& ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (ext == nullptr) openssl_failed("extension " + std::string(OBJ_nid2sn(nid)) + "=" + value);
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (ok != 1) openssl_failed("adding extension " + std::string(OBJ_nid2sn(nid)));
}

// Issues a certificate for a fresh P-256 key; self-signed when `issuer` is null.
Issued issue(const Spec& spec, const Issued* issuer) {
  static std::atomic<std::uint64_t> serial{1};
  Issued out;
  out.key.reset(EVP_EC_gen("P-256"));
  if (!out.key) openssl_failed("EC key generation");
  out.cert.reset(X509_new());
  X509* cert = out.cert.get();
  if (cert == nullptr) openssl_failed("X509_new");
  if (X509_set_version(cert, 2) != 1) openssl_failed("X509_set_version");
  if (ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert), serial++) != 1) openssl_failed("serial");
  if (X509_gmtime_adj(X509_getm_notBefore(cert), spec.not_before) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(cert), spec.not_after) == nullptr) {
    openssl_failed("validity dates");
  }
  if (X509_set_pubkey(cert, out.key.get()) != 1) openssl_failed("X509_set_pubkey");
  X509_NAME* subject = X509_get_subject_name(cert);
  if (X509_NAME_add_entry_by_txt(subject, "O", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>("redlock tests"), -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1, -1, 0) != 1) {
    openssl_failed("subject name");
  }
  X509* issuer_cert = issuer != nullptr ? issuer->cert.get() : cert;
  EVP_PKEY* issuer_key = issuer != nullptr ? issuer->key.get() : out.key.get();
  if (X509_set_issuer_name(cert, X509_get_subject_name(issuer_cert)) != 1) openssl_failed("issuer name");

  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer_cert, cert, nullptr, nullptr, 0);
  add_extension(cert, ctx, NID_basic_constraints, spec.is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  add_extension(cert, ctx, NID_key_usage,
                spec.is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature,keyAgreement");
  add_extension(cert, ctx, NID_subject_key_identifier, "hash");
  if (issuer != nullptr) add_extension(cert, ctx, NID_authority_key_identifier, "keyid:always");
  if (!spec.extended_key_usage.empty()) add_extension(cert, ctx, NID_ext_key_usage, spec.extended_key_usage);
  if (!spec.subject_alt_name.empty()) add_extension(cert, ctx, NID_subject_alt_name, spec.subject_alt_name);

  if (X509_sign(cert, issuer_key, EVP_sha256()) == 0) openssl_failed("signing " + spec.common_name);
  return out;
}

std::unique_ptr<FILE, FileCloser> open_for_writing(const std::string& path, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "TestPki: open " + path);
  FILE* file = ::fdopen(fd, "w");
  if (file == nullptr) {
    ::close(fd);
    throw std::system_error(errno, std::generic_category(), "TestPki: fdopen " + path);
  }
  return std::unique_ptr<FILE, FileCloser>(file);
}

TestCertificate write(const std::string& dir, const std::string& name, const Issued& issued) {
  TestCertificate out{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  {
    const auto file = open_for_writing(out.cert_file, 0644);
    if (PEM_write_X509(file.get(), issued.cert.get()) != 1) openssl_failed("writing " + out.cert_file);
  }
  {
    const auto file = open_for_writing(out.key_file, 0600);
    if (PEM_write_PrivateKey(file.get(), issued.key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
      openssl_failed("writing " + out.key_file);
    }
  }
  return out;
}

std::string make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string dir =
      (base != nullptr && *base != '\0' ? std::string(base) : std::string("/tmp")) + "/redlock-pki-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "TestPki: mkdtemp " + dir);
  }
  return dir;
}

}  // namespace

TestPki::TestPki() : dir_(make_temp_dir()) {
  try {
    const std::string server_names = "DNS:localhost,IP:127.0.0.1,IP:::1";
    // Specs built field by field (designated initializers that skip fields trip
    // -Wmissing-field-initializers under -Werror).
    auto ca_spec = [](std::string name) {
      Spec spec;
      spec.common_name = std::move(name);
      spec.is_ca = true;
      spec.not_after = 365 * kDay;
      return spec;
    };
    auto server_spec = [](std::string name, std::string alt_names) {
      Spec spec;
      spec.common_name = std::move(name);
      spec.extended_key_usage = "serverAuth";
      spec.subject_alt_name = std::move(alt_names);
      return spec;
    };
    Spec client_spec;
    client_spec.common_name = "redlock-test-client";
    client_spec.extended_key_usage = "clientAuth";
    Spec expired_spec = server_spec("localhost", server_names);
    expired_spec.not_before = -2 * kDay;
    expired_spec.not_after = -kDay;

    const Issued ca = issue(ca_spec("redlock test CA"), nullptr);
    const Issued other_ca = issue(ca_spec("redlock unknown CA"), nullptr);
    ca_ = write(dir_, "ca", ca);
    other_ca_ = write(dir_, "other-ca", other_ca);
    server_ = write(dir_, "server", issue(server_spec("localhost", server_names), &ca));
    client_ = write(dir_, "client", issue(client_spec, &ca));
    expired_server_ = write(dir_, "expired-server", issue(expired_spec, &ca));
    wrong_name_server_ =
        write(dir_, "wrong-name-server", issue(server_spec("wrong.example", "DNS:wrong.example,IP:127.0.0.2"), &ca));
    unknown_ca_server_ = write(dir_, "unknown-ca-server", issue(server_spec("localhost", server_names), &other_ca));
    unknown_ca_client_ = write(dir_, "unknown-ca-client", issue(client_spec, &other_ca));
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

TestPki::~TestPki() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace redlock::support

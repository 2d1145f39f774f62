// SPDX-License-Identifier: Apache-2.0
#include "detail/validation.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "detail/lock_commands.h"
#include "detail/ms_text.h"
#include "detail/quorum.h"
#include "detail/token.h"
#include "redlock/errors.h"

namespace redlock::detail {
namespace {

std::string ms(Milliseconds value) { return std::to_string(value.count()) + " ms"; }

void require(bool condition, const std::string& message) {
  if (!condition) throw ConfigError(message);
}

void not_negative(Milliseconds value, const char* field) {
  require(value.count() >= 0, std::string("ClientOptions.") + field + " must not be negative (got " + ms(value) + ")");
}

void positive(Milliseconds value, const char* field) {
  require(value.count() > 0, std::string("ClientOptions.") + field + " must be positive (got " + ms(value) + ")");
}

// Every deadline is a sum of a clock reading and one of these: bounding them keeps each
// sum far from overflowing (steady_clock nanoseconds last ~292 years).
void not_too_long(Milliseconds value, const char* field) {
  require(value <= kMaxDuration, std::string("ClientOptions.") + field + " is " + ms(value) +
                                     ", more than the maximum " + ms(kMaxDuration) + " (365 days)");
}

// A printable excerpt of a resource name for error messages.
std::string excerpt(std::string_view text) {
  std::string out;
  for (const char c : text.substr(0, 32)) {
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  if (text.size() > 32) out += "...";
  return out;
}

bool tls_options_set(const TlsOptions& tls) {
  return !tls.ca_file.empty() || !tls.ca_dir.empty() || !tls.cert_file.empty() || !tls.key_file.empty() ||
         !tls.server_name.empty() || tls.min_version != TlsVersion::tls1_2 || tls.insecure_skip_verify;
}

// No silent plaintext: a fleet is all TLS or all plain unless mixing was asked for, and TLS
// options with no rediss:// master are a forgotten "s", not a configuration to ignore.
void check_transport(const ClientOptions& options, const std::vector<Endpoint>& endpoints) {
  std::string first_tls;
  std::string first_plain;
  for (const auto& ep : endpoints) {
    std::string& first = ep.tls ? first_tls : first_plain;
    if (first.empty()) first = ep.display();
  }
  if (!first_tls.empty() && !first_plain.empty()) {
    require(options.allow_mixed_tls, "ClientOptions.masters mixes rediss:// (TLS) masters (" + first_tls +
                                         ") with redis:// (plain) masters (" + first_plain +
                                         "): set ClientOptions.allow_mixed_tls to allow plaintext to some masters");
  }
  require(!first_tls.empty() || !tls_options_set(options.tls),
          "ClientOptions.tls is set but every master is redis:// (plain TCP): use rediss:// URIs for TLS");
}

}  // namespace

std::optional<std::string> check_ttl(const ClientOptions& options, Milliseconds ttl) {
  if (ttl.count() <= 0) return "ttl must be positive (got " + ms(ttl) + ")";
  if (ttl > kMaxDuration) return "ttl " + ms(ttl) + " is more than the maximum " + ms(kMaxDuration) + " (365 days)";
  const auto drift = drift_for(ttl, options.drift_factor, options.drift_constant);
  const auto usable = std::chrono::duration_cast<std::chrono::microseconds>(ttl) - drift;
  if (usable <= options.min_validity) {
    return "ttl " + ms(ttl) + " is not larger than the drift allowance " + ms_text(drift) +
           " (ttl * drift_factor + drift_constant) plus min_validity " + ms(options.min_validity);
  }
  return std::nullopt;
}

std::optional<std::string> check_acquire_options(const AcquireOptions& options) {
  if (options.retry_count && *options.retry_count < -1) {
    return "retry_count " + std::to_string(*options.retry_count) +
           " is not allowed: give -1 (retry until `wait` runs out) or a count of 0 or more";
  }
  if (options.wait && options.wait->count() < 0) return "wait " + ms(*options.wait) + " is negative";
  return std::nullopt;
}

std::optional<std::string> check_resource(std::string_view resource) {
  if (resource.empty()) return std::string("resource name is empty");
  if (resource.size() > kMaxResourceSize) {
    return "resource name '" + excerpt(resource) + "' is " + std::to_string(resource.size()) +
           " bytes, more than the maximum " + std::to_string(kMaxResourceSize);
  }
  return std::nullopt;
}

std::optional<std::string> check_lock_key(std::string_view key) {
  constexpr std::size_t kMaxKeySize = kMaxKeyPrefixSize + kMaxResourceSize;
  if (key.size() <= kMaxKeySize) return std::nullopt;
  return "the Lock's key '" + excerpt(key) + "' is " + std::to_string(key.size()) +
         " bytes, more than any key this library makes (" + std::to_string(kMaxKeySize) +
         ": key_prefix and resource at their maximum)";
}

std::optional<std::string> check_not_fence_key(const ClientOptions& options, std::string_view resource) {
  const std::string_view prefix = options.key_prefix;
  const std::string_view fence = options.fence_key;
  const bool same = fence.size() == prefix.size() + resource.size() && fence.substr(0, prefix.size()) == prefix &&
                    fence.substr(prefix.size()) == resource;
  if (!same && resource == kMarkKeyName) {
    return "resource '" + std::string(kMarkKeyName) + "' is reserved: with key_prefix '" + options.key_prefix +
           "' its key is the restart guard's keyspace mark; use another name";
  }
  if (!same) return std::nullopt;
  return "resource '" + excerpt(resource) + "' with key_prefix '" + options.key_prefix +
         "' is the fencing counter's key '" + options.fence_key +
         "' (ClientOptions.fence_key): its lock would replace the counter; use another name or a key_prefix";
}

std::optional<std::string> check_token(std::string_view token) {
  const bool hex = std::all_of(token.begin(), token.end(),
                               [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  if (token.size() == 2 * kTokenBytes && hex) return std::nullopt;
  return "token '" + excerpt(token) + "' (" + std::to_string(token.size()) + " bytes) is not an owner token: " +
         std::to_string(2 * kTokenBytes) + " lowercase hex digits, as acquire returns them";
}

std::vector<Endpoint> validate(const ClientOptions& options) {
  require(!options.masters.empty(), "ClientOptions.masters is empty: at least one master URI is required");
  require(options.masters.size() <= kMaxMasters, "ClientOptions.masters lists " +
                                                     std::to_string(options.masters.size()) +
                                                     " masters, more than the maximum " + std::to_string(kMaxMasters));
  std::vector<Endpoint> endpoints;
  std::unordered_set<std::string> seen;
  for (const auto& uri : options.masters) {
    Endpoint ep = Endpoint::parse(uri);
    std::string host = ep.host;
    std::transform(host.begin(), host.end(), host.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const std::string identity = host + ":" + std::to_string(ep.port);
    // Two URIs for one server (even with different dbs) would give it two votes.
    require(seen.insert(identity).second, "ClientOptions.masters lists " + identity + " more than once");
    endpoints.push_back(std::move(ep));
  }
  check_transport(options, endpoints);
  require(options.key_prefix.size() <= kMaxKeyPrefixSize,
          "ClientOptions.key_prefix is " + std::to_string(options.key_prefix.size()) + " bytes, more than the maximum " +
              std::to_string(kMaxKeyPrefixSize));
  require(std::isfinite(options.drift_factor) && options.drift_factor >= 0.0 && options.drift_factor < 1.0,
          "ClientOptions.drift_factor must be in [0, 1) (got " + std::to_string(options.drift_factor) + ")");
  not_negative(options.drift_constant, "drift_constant");
  not_negative(options.min_validity, "min_validity");
  for (const auto& [value, field] : {std::pair{options.drift_constant, "drift_constant"},
                                     {options.min_validity, "min_validity"}, {options.retry_delay, "retry_delay"},
                                     {options.retry_jitter, "retry_jitter"}, {options.command_timeout, "command_timeout"},
                                     {options.connect_timeout, "connect_timeout"}, {options.reconnect_min, "reconnect_min"},
                                     {options.reconnect_max, "reconnect_max"}, {options.stall_timeout, "stall_timeout"},
                                     {options.max_lock_ttl, "max_lock_ttl"},
                                     {options.yield_to_waiters, "yield_to_waiters"}}) {
    not_too_long(value, field);
  }
  if (const auto why = check_ttl(options, options.ttl)) throw ConfigError("ClientOptions." + *why);
  require(options.retry_count >= 0,
          "ClientOptions.retry_count must not be negative (got " + std::to_string(options.retry_count) + ")");
  not_negative(options.retry_delay, "retry_delay");
  not_negative(options.retry_jitter, "retry_jitter");
  positive(options.command_timeout, "command_timeout");
  positive(options.connect_timeout, "connect_timeout");
  positive(options.reconnect_min, "reconnect_min");
  require(options.reconnect_max >= options.reconnect_min,
          "ClientOptions.reconnect_max (" + ms(options.reconnect_max) + ") is below reconnect_min (" +
              ms(options.reconnect_min) + ")");
  not_negative(options.stall_timeout, "stall_timeout");
  not_negative(options.max_lock_ttl, "max_lock_ttl");
  not_negative(options.yield_to_waiters, "yield_to_waiters");
  require(!options.fence_key.empty(), "ClientOptions.fence_key is empty");
  require(options.fence_key.size() <= kMaxKeyPrefixSize,
          "ClientOptions.fence_key is " + std::to_string(options.fence_key.size()) + " bytes, more than the maximum " +
              std::to_string(kMaxKeyPrefixSize));
  require(options.key_prefix.empty() || options.fence_key.rfind(options.key_prefix, 0) != 0,
          "ClientOptions.fence_key '" + options.fence_key + "' starts with key_prefix '" + options.key_prefix +
              "': a resource could share its key");
  if (options.restart_guard && options.max_lock_ttl.count() > 0) {
    require(options.max_lock_ttl >= options.ttl, "ClientOptions.max_lock_ttl (" + ms(options.max_lock_ttl) +
                                                     ") is below ttl (" + ms(options.ttl) + ")");
  }
  if (!options.source_address.empty()) {
    unsigned char buffer[sizeof(in6_addr)];
    const bool is_ip = inet_pton(AF_INET, options.source_address.c_str(), buffer) == 1 ||
                       inet_pton(AF_INET6, options.source_address.c_str(), buffer) == 1;
    require(is_ip, "ClientOptions.source_address '" + options.source_address + "' is not an IP address");
  }
  return endpoints;
}

}  // namespace redlock::detail


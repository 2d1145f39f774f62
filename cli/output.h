// SPDX-License-Identifier: Apache-2.0
// cli/output.h — what the tool prints: tokens and JSON on stdout, diagnostics on stderr.
// Everything printed through here has password-carrying command-line words masked
// (secrets.h); the library masks passwords in the texts it reports (Endpoint::redact).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "redlock/result.h"

namespace redlock_cli {

// Keys stay in the order they are set, so the output reads naturally.
using Json = nlohmann::ordered_json;

// A Result as JSON: command, resource, key, outcome, ok, token (null unless the Result
// carries a lock), validity_ms, attempts, message, masters[{endpoint, status, latency_ms,
// error}]. `token` is used when the Result has no lock (release, failed extend).
[[nodiscard]] Json result_json(const redlock::Result& result, std::string_view command,
                              std::string_view resource, std::string_view key, std::string_view token = {});

class Output {
 public:
  Output(bool json, bool quiet) : json_(json), quiet_(quiet) {}

  [[nodiscard]] bool json() const noexcept { return json_; }
  [[nodiscard]] bool quiet() const noexcept { return quiet_; }

  // "redlock: <text>" on stderr, unless --quiet.
  void note(std::string_view text) const;
  // "redlock: <headline>" and the Result's per-master table on stderr, unless --quiet.
  void failure(std::string_view headline, const redlock::Result& result) const;
  // One JSON object on one line.
  static void emit(std::FILE* stream, const Json& object);

 private:
  bool json_;
  bool quiet_;
};

// "usage" errors always reach stderr, --quiet or not.
void print_error(std::string_view text);

}  // namespace redlock_cli

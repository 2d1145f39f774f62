// SPDX-License-Identifier: Apache-2.0
// detail/diagnostics.h — how the Client shows text from or about a master: in result rows
// and in warnings, never with a configured password, never unbounded.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "redlock/endpoint.h"

namespace redlock::detail {

class Diagnostics {
 public:
  Diagnostics(std::vector<Endpoint> endpoints, std::function<void(const std::string&)> on_warning)
      : endpoints_(std::move(endpoints)), on_warning_(std::move(on_warning)) {}

  // Every configured password masked (a server may echo one back), at most kMaxShownText
  // bytes.
  [[nodiscard]] std::string shown(std::string_view text) const;
  // To ClientOptions::on_warning (its exceptions stop here), else to stderr; shown() first.
  void warn(const std::string& message) const;

  static constexpr std::size_t kMaxShownText = 1024;

 private:
  const std::vector<Endpoint> endpoints_;
  const std::function<void(const std::string&)> on_warning_;
};

// A text from a master (a handshake error, an ACL denial) as kept on its connection, to be
// shown (redacted, cut) in every row of every round the master then misses: whole up to
// kMaxKeptText; a longer one, which no Redis sends, only by its size. Kept whole, one master's
// 1 MiB text cost every round megabytes of copying. Never cut: a cut could split a password
// that Diagnostics::shown would then not mask.
inline constexpr std::size_t kMaxKeptText = 512;
// Of a longer text only its first word is kept, when it is an error code (capitals only:
// WRONGPASS, NOPERM...), which callers read (the CLI's exit status for refused credentials).
inline std::string kept_server_text(std::string_view text) {
  if (text.size() <= kMaxKeptText) return std::string(text);
  std::size_t code = 0;
  while (code < text.size() && code < 16 && text[code] >= 'A' && text[code] <= 'Z') ++code;
  const bool coded = code > 0 && code < text.size() && text[code] == ' ';
  return (coded ? std::string(text.substr(0, code)) + " " : std::string()) + "(a " + std::to_string(text.size()) +
         "-byte text, not kept)";
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/diagnostics.h — how the Client shows text from or about a master: in result rows
// and in warnings, never with a configured password, never unbounded.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "detail/loop_time.h"
#include "redlock/endpoint.h"

namespace redlock::detail {

class Diagnostics {
 public:
  using Now = std::uint64_t (*)();  // monotonic nanoseconds; a test may give its own
  Diagnostics(std::vector<Endpoint> endpoints, std::function<void(const std::string&)> on_warning, Now now = &now_ns)
      : endpoints_(longest_password_first(std::move(endpoints))), on_warning_(std::move(on_warning)), now_(now) {}

  // Every configured password masked (a server may echo one back), at most kMaxShownText
  // bytes.
  [[nodiscard]] std::string shown(std::string_view text) const;
  // To ClientOptions::on_warning (its exceptions stop here), else to stderr; shown() first.
  // `about` names the source (a master's name and the kind of problem, "m1:6379 (eviction)";
  // empty: the Client itself; at most a few kinds per master). Each source may show
  // at most kWarningsPerWindow in a kWarningWindow (which starts at its first warning after its
  // last window ended): a master that flaps (a new incarnation, policy or ACL text at each
  // reconnect) would otherwise warn without end, and with one budget for all it used up the
  // others' (an evicting policy on another master was never shown). The last one shown in a
  // window says that more are counted, not shown; the next one shown about that source says
  // how many were not. Returns whether this one was shown: a caller that warns once per
  // problem records the problem as warned only then, so it is warned again later. Loop thread
  // only.
  bool warn(const std::string& message, const std::string& about = {}) const;

  static constexpr std::size_t kMaxShownText = 1024;
  static constexpr std::uint32_t kWarningsPerWindow = 10;
  static constexpr std::chrono::seconds kWarningWindow{60};

 private:
  struct Window {
    std::uint64_t start_ns = 0;
    std::uint32_t shown = 0;
    std::uint64_t not_shown = 0;
  };
  // Masked longest first: a shorter password inside a longer one, masked first, would leave
  // the rest of the longer one unmatched, and shown.
  static std::vector<Endpoint> longest_password_first(std::vector<Endpoint> endpoints);
  const std::vector<Endpoint> endpoints_;
  const std::function<void(const std::string&)> on_warning_;
  const Now now_;
  // The rate limit's state per source, changed by warn() (const: every part of the Client
  // that warns holds a const Diagnostics&). At most one entry per master and kind, plus the
  // Client's.
  mutable std::unordered_map<std::string, Window> windows_;
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

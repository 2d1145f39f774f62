// SPDX-License-Identifier: Apache-2.0
#include "detail/diagnostics.h"

#include <cstdio>
#include <string>

namespace redlock::detail {

std::string Diagnostics::shown(std::string_view text) const {
  if (text.empty()) return {};  // nothing to redact (most rows of a round have no text)
  std::string out(text);
  for (const auto& endpoint : endpoints_) out = endpoint.redact(out);
  if (out.size() > kMaxShownText) {
    out.resize(kMaxShownText);
    out += "... (cut)";
  }
  return out;
}

void Diagnostics::warn(const std::string& message) const {
  const std::uint64_t now = now_();
  if (shown_in_window_ == 0 || now - window_start_ns_ >= to_ns(kWarningWindow)) {
    window_start_ns_ = now;
    shown_in_window_ = 0;
  }
  if (shown_in_window_ == kWarningsPerWindow) {
    ++not_shown_;
    return;
  }
  std::string text;
  if (not_shown_ > 0) {
    text = "(" + std::to_string(not_shown_) + (not_shown_ == 1 ? " warning was" : " warnings were") +
           " not shown: more than " + std::to_string(kWarningsPerWindow) + " in " +
           std::to_string(kWarningWindow.count()) + " s) ";
    not_shown_ = 0;
  }
  text += shown(message);
  if (++shown_in_window_ == kWarningsPerWindow) {
    text += " (" + std::to_string(kWarningsPerWindow) + " warnings in under " + std::to_string(kWarningWindow.count()) +
            " s: more in the same " + std::to_string(kWarningWindow.count()) + " s are counted, not shown)";
  }
  if (on_warning_) {
    try {
      on_warning_(text);
    } catch (...) {
    }
    return;
  }
  std::fprintf(stderr, "redlock: warning: %s\n", text.c_str());
}

}  // namespace redlock::detail

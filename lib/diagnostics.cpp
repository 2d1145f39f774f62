// SPDX-License-Identifier: Apache-2.0
#include "detail/diagnostics.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace redlock::detail {

std::vector<Endpoint> Diagnostics::longest_password_first(std::vector<Endpoint> endpoints) {
  std::stable_sort(endpoints.begin(), endpoints.end(),
                   [](const Endpoint& a, const Endpoint& b) { return a.password.size() > b.password.size(); });
  return endpoints;
}

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

bool Diagnostics::warn(const std::string& message, const std::string& about) const {
  const std::uint64_t now = now_();
  Window& window = windows_[about];
  if (window.shown == 0 || now - window.start_ns >= to_ns(kWarningWindow)) {
    window.start_ns = now;
    window.shown = 0;
  }
  if (window.shown == kWarningsPerWindow) {
    ++window.not_shown;
    return false;
  }
  const std::string source = about.empty() ? std::string() : " about " + shown(about);
  std::string text;
  if (window.not_shown > 0) {
    text = "(" + std::to_string(window.not_shown) + (window.not_shown == 1 ? " warning" : " warnings") + source +
           (window.not_shown == 1 ? " was" : " were") + " not shown: more than " + std::to_string(kWarningsPerWindow) +
           " in " + std::to_string(kWarningWindow.count()) + " s) ";
    window.not_shown = 0;
  }
  text += shown(message);
  if (++window.shown == kWarningsPerWindow) {
    text += " (" + std::to_string(kWarningsPerWindow) + " warnings" + source + " in under " +
            std::to_string(kWarningWindow.count()) + " s: more in the same " + std::to_string(kWarningWindow.count()) +
            " s are counted, not shown)";
  }
  if (on_warning_) {
    try {
      on_warning_(text);
    } catch (...) {
    }
    return true;
  }
  std::fprintf(stderr, "redlock: warning: %s\n", text.c_str());
  return true;
}

}  // namespace redlock::detail

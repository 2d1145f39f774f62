// SPDX-License-Identifier: Apache-2.0
#include "detail/diagnostics.h"

#include <cstdio>

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
  const std::string text = shown(message);
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

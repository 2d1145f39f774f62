// SPDX-License-Identifier: Apache-2.0
// detail/ms_text.h — a duration as messages and tables show it: "12.345 ms".
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace redlock::detail {

inline std::string ms_text(std::chrono::microseconds value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(value.count()) / 1000.0);
  return text;
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
#include "redlock/result.h"

#include <algorithm>
#include <cstdio>

#include "detail/ms_text.h"

namespace redlock {

std::string_view to_string(Outcome outcome) noexcept {
  switch (outcome) {
    case Outcome::acquired: return "acquired";
    case Outcome::extended: return "extended";
    case Outcome::released: return "released";
    case Outcome::taken: return "taken";
    case Outcome::lost: return "lost";
    case Outcome::quorum_unreachable: return "quorum_unreachable";
    case Outcome::validity_expired: return "validity_expired";
    case Outcome::cancelled: return "cancelled";
    case Outcome::invalid_argument: return "invalid_argument";
  }
  return "unknown";
}

std::string_view to_string(MasterStatus status) noexcept {
  switch (status) {
    case MasterStatus::ok: return "ok";
    case MasterStatus::held_by_other: return "held_by_other";
    case MasterStatus::not_found: return "not_found";
    case MasterStatus::server_error: return "server_error";
    case MasterStatus::timeout: return "timeout";
    case MasterStatus::not_connected: return "not_connected";
    case MasterStatus::not_counted: return "not_counted";
    case MasterStatus::not_permitted: return "not_permitted";
    case MasterStatus::pending: return "pending";
  }
  return "unknown";
}

std::size_t Result::count(MasterStatus status) const noexcept {
  return static_cast<std::size_t>(std::count_if(
      masters.begin(), masters.end(), [status](const MasterResult& m) { return m.status == status; }));
}

std::string format_result(const Result& result) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "outcome: %s after %d attempt%s", std::string(to_string(result.outcome)).c_str(),
                result.attempts, result.attempts == 1 ? "" : "s");
  out += line;
  if (result.ok() && result.validity.count() > 0) {
    out += ", validity " + detail::ms_text(result.validity);
  }
  if (!result.message.empty()) out += " (" + result.message + ")";
  out += "\n";
  std::size_t width = 8;
  for (const auto& m : result.masters) width = std::max(width, m.endpoint.size());
  std::snprintf(line, sizeof(line), "  %-*s  %-14s  %10s  %s\n", static_cast<int>(width), "master", "status",
                "latency", "detail");
  out += line;
  for (const auto& m : result.masters) {
    const std::string latency =
        m.status != MasterStatus::pending && m.latency.count() > 0 ? detail::ms_text(m.latency) : "-";
    std::snprintf(line, sizeof(line), "  %-*s  %-14s  %10s  ", static_cast<int>(width), m.endpoint.c_str(),
                  std::string(to_string(m.status)).c_str(), latency.c_str());
    out += line;
    out += m.error;  // any length: appended, not formatted into the fixed buffer
    out += "\n";
  }
  return out;
}

}  // namespace redlock

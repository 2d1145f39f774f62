// SPDX-License-Identifier: Apache-2.0
// `redlock status [RESOURCE]`: what the masters look like to a lock client right now
// (Client::status, redlock/status.h): a table per master, warnings, and whether the fleet can
// grant a lock now (exit 0) or not (69). --json: one object, every field always present.
#include <cstdio>
#include <string>

#include "commands.h"
#include "exit_codes.h"
#include "redlock/status.h"
#include "secrets.h"

namespace redlock_cli {
namespace {

using std::chrono::microseconds;

template <class T>
Json or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

template <class Duration>
Json count_or_null(const std::optional<Duration>& value) {
  return value ? Json(value->count()) : Json(nullptr);
}

Json status_json(const redlock::FleetStatus& status, int code) {
  Json object;
  object["command"] = "status";
  object["can_grant"] = status.can_grant;
  object["exit_code"] = code;
  object["size"] = status.size;
  object["quorum"] = status.quorum;
  object["voters"] = status.voters;
  object["reason"] = status.reason;
  if (status.resource) {
    const auto& r = *status.resource;
    object["resource"] = Json{{"resource", r.resource},   {"key", r.key},
                              {"quorum_holder", or_null(r.quorum_holder)}, {"holders", r.holders},
                              {"summary", r.summary}};
  } else {
    object["resource"] = nullptr;
  }
  Json masters = Json::array();
  for (const auto& m : status.masters) {
    Json row;
    row["endpoint"] = m.endpoint;
    row["reachable"] = m.reachable;
    row["error"] = in_cli_terms(m.error);
    row["connected_before"] = m.connected_before;
    row["rtt_us"] = count_or_null(m.round_trip);
    row["role"] = or_null(m.role);
    row["replica_of"] = m.replica_of;
    row["role_error"] = m.role_error;
    row["uptime_s"] = count_or_null(m.uptime);
    row["counted"] = m.counted;
    row["counted_after_ms"] = count_or_null(m.counted_after);
    row["not_counted_reason"] = m.not_counted_reason;
    row["counted_because"] = m.counted_because;
    row["appendonly"] = m.appendonly;
    row["appendfsync"] = m.appendfsync;
    row["durable"] = m.durable;
    row["maxmemory_policy"] = m.maxmemory_policy;
    row["clock_offset_us"] = count_or_null(m.clock_offset);
    row["clock_uncertainty_us"] = count_or_null(m.clock_uncertainty);
    row["not_permitted"] = m.not_permitted;
    row["fence_not_permitted"] = m.fence_not_permitted;
    row["can_vote"] = m.can_vote;
    row["holder"] = or_null(m.holder);
    row["holder_is_token"] = m.holder_is_token;
    row["pttl_ms"] = count_or_null(m.pttl);
    row["resource_error"] = m.resource_error;
    row["warnings"] = m.warnings;
    masters.push_back(std::move(row));
  }
  object["masters"] = std::move(masters);
  return object;
}

std::string ms(microseconds value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1fms", static_cast<double>(value.count()) / 1000.0);
  return text;
}

std::string seconds_text(long long seconds) {
  if (seconds < 120) return std::to_string(seconds) + "s";
  if (seconds < 2 * 3600) return std::to_string(seconds / 60) + "m";
  if (seconds < 2 * 86400) return std::to_string(seconds / 3600) + "h";
  return std::to_string(seconds / 86400) + "d";
}

std::string guard_text(const redlock::MasterReport& m) {
  if (m.counted) return m.counted_because.empty() ? "counted" : "counted (durable restart)";
  if (m.counted_after) return "counted after " + std::to_string((m.counted_after->count() + 999) / 1000) + "s";
  return "not counted";
}

void print_table(const redlock::FleetStatus& status, bool with_resource) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-24s %-12s %-9s %-8s %-7s %-20s %-16s %-18s %-18s", "MASTER", "STATE", "RTT",
                "ROLE", "UPTIME", "RESTART GUARD", "AOF/FSYNC", "EVICTION", "CLOCK");
  out += line;
  if (with_resource) out += " HOLDER    PTTL";
  out += "\n";
  for (const auto& m : status.masters) {
    const std::string state = !m.reachable ? "unreachable" : m.can_vote ? "votes" : "no vote";
    const std::string rtt = m.round_trip ? ms(*m.round_trip) : "-";
    const std::string uptime = m.uptime ? seconds_text(m.uptime->count()) : "-";
    const std::string aof = m.appendonly.empty() ? "?" : m.appendonly + "/" + (m.appendfsync.empty() ? "?" : m.appendfsync);
    // Appended, not `"+" + ms(...)`: GCC 12 -O3 warns (-Wrestrict, falsely) on the insert at 0.
    std::string clock = "-";
    if (m.clock_offset) {
      clock = m.clock_offset->count() >= 0 ? "+" : "";
      clock += ms(*m.clock_offset);
      clock += " +-";
      clock += ms(m.clock_uncertainty.value_or(microseconds{0}));
    }
    std::snprintf(line, sizeof line, "%-24s %-12s %-9s %-8s %-7s %-20s %-16s %-18s %-18s", m.endpoint.c_str(),
                  state.c_str(), rtt.c_str(), m.role.value_or("?").c_str(), uptime.c_str(), guard_text(m).c_str(),
                  aof.c_str(), (m.maxmemory_policy.empty() ? std::string("?") : m.maxmemory_policy).c_str(),
                  clock.c_str());
    out += line;
    if (with_resource) {
      const std::string holder = !m.holder ? "?" : m.holder->empty() ? "-" : *m.holder;
      const std::string pttl = m.pttl ? std::to_string(m.pttl->count()) + "ms" : "-";
      std::snprintf(line, sizeof line, " %-9s %s", holder.c_str(), pttl.c_str());
      out += line;
    }
    out += "\n";
  }
  for (const auto& m : status.masters) {
    if (!m.reachable) out += "error: " + m.endpoint + ": " + in_cli_terms(m.error) + "\n";
    if (!m.counted && m.reachable) out += "note: " + m.endpoint + ": " + m.not_counted_reason + "\n";
    if (!m.counted_because.empty()) out += "note: " + m.endpoint + ": " + m.counted_because + "\n";
    for (const auto& warning : m.warnings) out += "warning: " + m.endpoint + ": " + warning + "\n";
  }
  if (status.resource) {
    out += "resource '" + printable(status.resource->resource) + "': " + status.resource->summary + "\n";
  }
  if (status.can_grant) {
    out += "can grant: yes (" + std::to_string(status.voters) + " of " + std::to_string(status.size) +
           " masters can vote, " + std::to_string(status.quorum) + " needed)\n";
  } else {
    out += "can grant: no: " + status.reason + "\n";
  }
  // The library never shows a password; a command-line word that carries one is masked too.
  const std::string shown = mask_secrets(out);
  std::fwrite(shown.data(), 1, shown.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

int status_command(const Settings& settings, const Output& out) {
  redlock::Client client(settings.client);
  // Every master's handshake first (a frozen one costs the connect timeout), so that the
  // round trips measure the command, not the connect.
  client.wait_connected(client.size(), client.options().connect_timeout);
  std::optional<std::string> resource;
  if (!settings.resource.empty()) resource = settings.resource;
  const redlock::FleetStatus status = client.status(resource);
  const int code = status.can_grant ? kExitOk : kExitUnavailable;
  if (out.json()) {
    Output::emit(stdout, status_json(status, code));
  } else {
    print_table(status, resource.has_value());
  }
  return code;
}

}  // namespace redlock_cli

// SPDX-License-Identifier: Apache-2.0
// Reading the handshake's INFO server and CONFIG GET replies (detail/server_info.h).
#include "detail/server_info.h"

#include <hiredis/hiredis.h>

#include <charconv>
#include <limits>
#include <string_view>

#include "detail/diagnostics.h"

namespace redlock::detail {

namespace {

// The value of INFO field `name` (written "\nname:"), up to the end of its line; empty if absent.
std::string_view info_field(std::string_view text, std::string_view name) {
  const auto at = text.find(name);
  if (at == std::string_view::npos) return {};
  const auto start = at + name.size();
  return text.substr(start, text.find_first_of("\r\n", start) - start);
}

// The value of the last INFO field `name`. For the fields Redis prints after the replica lines
// of INFO replication ("slave0:ip=..."): a replica announces its address unchecked, CR LF
// included, and can add field lines of its own there, ahead of the master's (a review: a fake
// master_replid hid a promotion from the restart guard, two holders). The fields read with
// info_field (role, master_host, master_port) come before those lines.
std::string_view info_last_field(std::string_view text, std::string_view name) {
  const auto at = text.rfind(name);
  if (at == std::string_view::npos) return {};
  const auto start = at + name.size();
  return text.substr(start, text.find_first_of("\r\n", start) - start);
}

// A replication ID as Redis makes them: 40 lowercase hex digits.
bool is_replication_id(std::string_view id) {
  return id.size() == 40 && id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// A whole decimal field, all of it a number.
template <typename Number>
bool read_number(std::string_view text, Number& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// Redis's run_id (and its replication IDs) are 40 hex characters, and its CONFIG values read here are single words. A
// master that sends more is not kept: every round that names its run_id (a twin's row) would
// copy and mask it, on the loop thread (a review: a 1 MiB run_id on two masters made each
// acquire cost 7.7 ms of CPU instead of 0.28).
constexpr std::size_t kMaxRunIdSize = 64;
constexpr std::size_t kMaxConfigValueSize = 64;

}  // namespace

void read_info_server(const redisReply& reply, std::uint64_t read_at_ns, ServerInfo& info) {
  if (reply.type != REDIS_REPLY_STRING) {
    info.error = "INFO server failed: " +
                 (reply.type == REDIS_REPLY_ERROR ? kept_server_text(std::string_view(reply.str, reply.len))
                                                  : std::string("no text"));
    return;
  }
  const std::string_view text(reply.str, reply.len);
  const std::string_view run_id = info_field(text, "\nrun_id:");
  std::uint64_t seconds = 0;
  if (run_id.empty() || !read_number(info_field(text, "\nuptime_in_seconds:"), seconds)) {
    info.error = "INFO server has no run_id / uptime_in_seconds";
    return;
  }
  if (run_id.size() > kMaxRunIdSize) {
    info.error = "INFO server's run_id is " + std::to_string(run_id.size()) + " bytes long (Redis's has 40): not kept";
    return;
  }
  info.run_id = std::string(run_id);
  // uptime_in_seconds is the difference of two whole wall-clock seconds (now and the start),
  // so a server started at x.9 s reads 1 at x+1.0 s: the true age can be up to 1 s less.
  // Counting from (uptime - 1) s before this read is the youngest the server can be.
  const std::uint64_t whole = seconds > 0 ? seconds - 1 : 0;
  const std::uint64_t at_least_ns =
      whole > std::numeric_limits<std::uint64_t>::max() / 1'000'000'000u ? read_at_ns : whole * 1'000'000'000u;
  info.started_ns = at_least_ns < read_at_ns ? read_at_ns - at_least_ns : 0;
}

void read_info_replication(const redisReply& reply, ServerInfo& info) {
  if (reply.type != REDIS_REPLY_STRING) {
    info.role_error = "INFO replication failed: " + (reply.type == REDIS_REPLY_ERROR
                                                         ? kept_server_text(std::string_view(reply.str, reply.len))
                                                         : std::string("unexpected reply"));
    return;
  }
  const std::string_view text(reply.str, reply.len);
  const std::string_view role = info_field(text, "\nrole:");
  const std::string_view id = info_last_field(text, "\nmaster_replid:");
  if ((role == "master" || role == "slave") && !is_replication_id(id)) {
    // The restart guard could not see a promotion (RestartGuard::observe_role): as unknown.
    info.role_error = "INFO replication has no master_replid (40 hex digits)";
    return;
  }
  info.replid = std::string(id);
  if (role == "master") {
    info.role = "master";
  } else if (role == "slave") {
    info.role = "replica";
    const std::string_view host = info_field(text, "\nmaster_host:");
    const std::string_view port = info_field(text, "\nmaster_port:");
    info.replica_of = kept_server_text(std::string(host) + ":" + std::string(port));
  } else {
    info.role_error = "INFO replication has no role";
  }
}

void read_info_persistence(const redisReply& reply, ServerInfo& info) {
  if (reply.type != REDIS_REPLY_STRING) return;
  const std::string_view text(reply.str, reply.len);
  long long rewrites = 0;
  long long last_rewrite_sec = 0;
  int in_progress = 0;
  int scheduled = 0;
  if (!read_number(info_field(text, "\naof_rewrites:"), rewrites) || rewrites < 0 ||
      !read_number(info_field(text, "\naof_last_rewrite_time_sec:"), last_rewrite_sec) ||
      !read_number(info_field(text, "\naof_rewrite_in_progress:"), in_progress) ||
      !read_number(info_field(text, "\naof_rewrite_scheduled:"), scheduled)) {
    return;
  }
  // CONFIG RESETSTAT zeroes the count but not the last rewrite's duration (-1: none yet).
  info.aof_rewrites = rewrites == 0 && last_rewrite_sec != -1 ? 1 : rewrites;
  info.aof_rewriting = in_progress != 0 || scheduled != 0;
}

void read_config_get(const redisReply& reply, ServerInfo& info) {
  if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2 || reply.element[0]->type != REDIS_REPLY_STRING ||
      reply.element[1]->type != REDIS_REPLY_STRING) {
    return;
  }
  const std::string_view name(reply.element[0]->str, reply.element[0]->len);
  if (reply.element[1]->len > kMaxConfigValueSize) return;  // no value of these: left unknown
  std::string value(reply.element[1]->str, reply.element[1]->len);
  if (name == "maxmemory-policy") info.maxmemory_policy = std::move(value);
  if (name == "appendonly") info.appendonly = std::move(value);
  if (name == "appendfsync") info.appendfsync = std::move(value);
  if (name == "no-appendfsync-on-rewrite") info.no_appendfsync_on_rewrite = std::move(value);
}

std::string eviction_risk(std::string_view policy, std::string_view fence_key) {
  const std::string named = "maxmemory-policy " + std::string(policy);
  if (policy.rfind("allkeys-", 0) == 0) {
    return named + " may evict lock keys and the fencing counter '" + std::string(fence_key) +
           "' once maxmemory is reached; use noeviction";
  }
  if (policy.rfind("volatile-", 0) == 0) {
    return named + " may evict lock keys (they have a ttl) once maxmemory is reached; use noeviction";
  }
  return {};
}

bool is_server_state_error(const redisReply& reply) noexcept {
  return reply.type == REDIS_REPLY_ERROR && is_server_state_error(std::string_view(reply.str, reply.len));
}

}  // namespace redlock::detail

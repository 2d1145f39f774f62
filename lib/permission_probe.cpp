// SPDX-License-Identifier: Apache-2.0
// The permission check (docs/permissions.md): on every connect, before a master is sent a
// lock's SET, prove that this ACL user can run every command the lock paths run, those the
// scripts call inside included. Redis checks a script's inner command only when the script
// calls it, so the probe runs the real paths on a probe key under the prefix: SET NX PX with
// a short PX, the extend script, the release script (which removes the key; if it cannot,
// the PX does). Redis's own ACL check (kPermissionCheckScript) names what is missing,
// the fencing counter's commands included, without running them.
#include <algorithm>
#include <utility>

#include <hiredis/hiredis.h>

#include "detail/diagnostics.h"
#include "detail/lock_commands.h"
#include "detail/token.h"

namespace redlock::detail {
namespace {

// Long enough for the pipelined extend and release to find the key on a loaded server;
// short, because a probe whose release is refused leaves its key for this long.
constexpr std::chrono::milliseconds kProbeTtl{2000};

std::string text_of(const redisReply& reply) {
  if (reply.type == REDIS_REPLY_ERROR || reply.type == REDIS_REPLY_STATUS || reply.type == REDIS_REPLY_STRING) {
    return std::string(reply.str, std::min<std::size_t>(reply.len, 256));
  }
  if (reply.type == REDIS_REPLY_INTEGER) return "integer " + std::to_string(reply.integer);
  if (reply.type == REDIS_REPLY_NIL) return "nil";
  return "an array";
}

// Adds one problem; a server text already reported (EVALSHA refused for every script) is
// not repeated.
void deny(std::string& into, const std::string& what, std::string_view text_from_server) {
  const std::string server_text = kept_server_text(text_from_server);
  if (!server_text.empty() && into.find(server_text) != std::string::npos) return;
  if (!into.empty()) into += "; ";
  into += what;
  if (!server_text.empty()) into += ": " + server_text;
}

bool is_error(const redisReply& reply) { return reply.type == REDIS_REPLY_ERROR; }

// A step of the probe on the probe key: an ACL refusal is recorded with `what` it ran. Any
// other reply that is not the expected one (+OK for SET, 1 for the scripts) follows from an
// earlier step or from the server's state (see is_acl_refusal), and is left to the rounds.
HandshakeStep step(std::string encoded, std::string what) {
  return {std::move(encoded), [what = std::move(what)](const redisReply& reply, ServerInfo& info) {
            if (is_acl_refusal(reply)) deny(info.not_permitted, what, text_of(reply));
          }};
}

}  // namespace

// Only what the ACL refused makes a master not_permitted. Other errors (READONLY on a
// replica, OOM, NOAUTH without a password, LOADING...) are the server's state, not this
// user's rights: the rounds meet them too and report them as server_error.
// Redis 7.0 says "NOPERM this user has no permissions to run the 'x' command" (or "... to
// access one of the keys / channels used as arguments"), and inside a script "The user
// executing the script can't run this command or subcommand" (or "can't access at least one
// of the keys ..."). Redis 7.2 and later say "NOPERM User u has no permissions to run the 'x'
// command" or "NOPERM No permissions to access a key", and inside a script "ACL failure in
// script: " followed by the same reasons. (Only 7.0 runs here; the later texts are from
// Redis's sources and are checked as texts, CommandsTest.AclRefusalTexts.)
bool is_acl_refusal(const redisReply& reply) {
  if (!is_error(reply)) return false;
  const std::string_view text(reply.str, reply.len);
  return text.starts_with("NOPERM") || text.find("The user executing the script can't") != std::string_view::npos ||
         text.find("ACL failure in script") != std::string_view::npos;
}

bool is_key_refusal_text(std::string_view text) {
  const auto has = [&](std::string_view part) { return text.find(part) != std::string_view::npos; };
  const bool acl = text.starts_with("NOPERM") || has("ACL failure in script") || has("The user executing the script");
  return acl && (has("access one of the keys") || has("access at least one of the keys") || has("access a key") ||
                 (has("permissions to access the '") && has("' key")));
}

// A command this user may not run, as opposed to a key or channel it may not touch.
bool is_command_refusal(const redisReply& reply) {
  if (!is_acl_refusal(reply)) return false;
  const std::string_view text(reply.str, reply.len);
  return text.find("permissions to run the") != std::string_view::npos ||
         text.find("can't run this command") != std::string_view::npos;
}

std::vector<HandshakeStep> LockCommands::handshake_steps() const {
  std::vector<HandshakeStep> steps;
  for (const Script* script : {&release_, &extend_, &fenced_acquire_, &waiting_acquire_, &fence_raise_,
                               &permission_check_, &marked_acquire_}) {
    if (script == &marked_acquire_ && !keyspace_mark_) continue;
    steps.push_back({script->load_command, [](const redisReply& reply, ServerInfo& info) {
                       if (is_acl_refusal(reply)) deny(info.not_permitted, "SCRIPT LOAD", text_of(reply));
                     }});
  }
  const std::string token = make_token();
  const std::string key = key_prefix_ + "__redlock_probe:" + token;
  const std::string value = "probe-" + token;
  const std::string prefix = key_prefix_;
  const std::string fence_key = fence_key_;
  const std::string channel = release_channel(key_prefix_ + "__redlock_probe");
  steps.push_back({encode_script_call(permission_check_, false, {key}, {value, fence_key, channel}),
                   [prefix, fence_key](const redisReply& reply, ServerInfo& info) {
                     if (is_acl_refusal(reply)) {
                       deny(info.not_permitted, "permission check on a probe key under the prefix '" + prefix + "'",
                            text_of(reply));
                       return;
                     }
                     // NOSCRIPT after a refused SCRIPT LOAD (recorded there), or the server's state.
                     if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 3 ||
                         reply.element[0]->type != REDIS_REPLY_STRING || reply.element[1]->type != REDIS_REPLY_STRING ||
                         reply.element[2]->type != REDIS_REPLY_STRING) {
                       return;
                     }
                     const std::string lock_missing = kept_server_text(std::string_view(reply.element[0]->str, reply.element[0]->len));
                     const std::string fence_missing = kept_server_text(std::string_view(reply.element[1]->str, reply.element[1]->len));
                     if (!lock_missing.empty()) {
                       deny(info.not_permitted,
                            "the ACL denies " + lock_missing + " on keys under the prefix '" + prefix + "'", {});
                     }
                     const std::string notify_missing = kept_server_text(std::string_view(reply.element[2]->str, reply.element[2]->len));
                     if (!notify_missing.empty()) {
                       deny(info.notify_not_permitted,
                            "the ACL denies " + notify_missing + " on the release channels '" +
                                std::string(kReleaseChannelPrefix) + "*'",
                            {});
                     }
                     if (!fence_missing.empty()) {
                       deny(info.fence_not_permitted,
                            "the ACL denies " + fence_missing + " on the fencing counter '" + fence_key + "'", {});
                     }
                   }});
  std::string encoded;
  acquire(encoded, key, value, kProbeTtl);
  steps.push_back(step(std::exchange(encoded, {}), "SET NX PX on a probe key under the prefix"));
  extend(encoded, key, value, kProbeTtl, false);
  steps.push_back(step(std::exchange(encoded, {}), "the extend script (GET, PEXPIRE inside)"));
  release(encoded, key, value, false);
  steps.push_back(step(std::exchange(encoded, {}), "the release script (GET, DEL inside)"));
  if (keyspace_mark_) {
    // The keyspace mark (restart guard): created if absent, then read. What the reads say is
    // judged by MasterSet::on_ready (RestartGuard::observe_mark); a refusal leaves the mark
    // unknown, and the guard does not count the master.
    steps.push_back({mark_create(), [](const redisReply& reply, ServerInfo& info) {
                       info.mark_created = reply.type == REDIS_REPLY_STATUS;
                       if (reply.type == REDIS_REPLY_ERROR) info.mark_error = "SET NX refused: " + text_of(reply);
                     }});
    steps.push_back({mark_read(), [](const redisReply& reply, ServerInfo& info) {
                       if (reply.type == REDIS_REPLY_STRING && reply.len > 0) {
                         info.mark.assign(reply.str, reply.len);
                       } else if (info.mark_error.empty()) {
                         info.mark_error = "GET answered " + text_of(reply);
                       }
                     }});
  }
  return steps;
}

}  // namespace redlock::detail

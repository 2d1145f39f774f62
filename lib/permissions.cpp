// The permission check (docs/permissions.md): on every connect, before a master is sent a
// lock's SET, prove that this ACL user can run every command the lock paths run, those the
// scripts call inside included. Redis checks a script's inner command only when the script
// calls it, so the probe runs the real paths on a probe key under the prefix: SET NX PX with
// a short PX, the extend script, the release script (which removes the key; if it cannot,
// the PX does). Redis's own ACL check (kPermissionCheckScript) names what is missing,
// the fencing counter's commands included, without running them.
#include <algorithm>

#include "detail/client_impl.h"
#include "detail/token.h"

namespace redlock::detail {
namespace {

// Long enough for the pipelined extend and release to find the key on a loaded server;
// short, because a probe whose release is refused leaves its key for this long.
constexpr long long kProbeTtlMs = 2000;

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
void deny(std::string& into, const std::string& what, const std::string& server_text) {
  if (!server_text.empty() && into.find(server_text) != std::string::npos) return;
  if (!into.empty()) into += "; ";
  into += what;
  if (!server_text.empty()) into += ": " + server_text;
}

bool is_error(const redisReply& reply) { return reply.type == REDIS_REPLY_ERROR; }

bool is_noscript(const redisReply& reply) {
  return is_error(reply) && reply.len >= 8 && std::string_view(reply.str, 8) == "NOSCRIPT";
}

// A step of the probe that must answer `expected` (an integer 1 for the scripts, +OK for SET).
HandshakeStep expect(std::string encoded, std::string what, bool want_ok_status) {
  return {std::move(encoded), [what = std::move(what), want_ok_status](const redisReply& reply, ServerInfo& info) {
            const bool good = want_ok_status
                                  ? reply.type == REDIS_REPLY_STATUS && std::string_view(reply.str, reply.len) == "OK"
                                  : reply.type == REDIS_REPLY_INTEGER && reply.integer == 1;
            if (good) return;
            // After a refused SCRIPT LOAD every EVALSHA says NOSCRIPT: the load names the cause.
            if (is_noscript(reply) && !info.not_permitted.empty()) return;
            // A refusal explains the next steps' odd replies (no key to extend or release).
            if (!is_error(reply) && !info.not_permitted.empty()) return;
            deny(info.not_permitted, what, is_error(reply) ? text_of(reply) : "unexpected reply " + text_of(reply));
          }};
}

}  // namespace

std::vector<HandshakeStep> ClientImpl::handshake_steps() const {
  std::vector<HandshakeStep> steps;
  for (const auto* script :
       {&release_script_, &extend_script_, &fenced_acquire_script_, &fence_raise_script_, &permission_check_script_}) {
    steps.push_back({script->load_command, [](const redisReply& reply, ServerInfo& info) {
                       if (is_error(reply)) deny(info.not_permitted, "SCRIPT LOAD", text_of(reply));
                     }});
  }
  const std::string token = make_token();
  const std::string key = options_.key_prefix + "__redlock_probe:" + token;
  const std::string value = "probe-" + token;
  const std::string ttl = std::to_string(kProbeTtlMs);
  const std::string prefix = options_.key_prefix;
  const std::string fence_key = options_.fence_key;
  steps.push_back({encode_script_call(permission_check_script_, false, {key}, {value, fence_key}),
                   [prefix, fence_key](const redisReply& reply, ServerInfo& info) {
                     if (is_error(reply)) {
                       if (!is_noscript(reply) || info.not_permitted.empty()) {
                         deny(info.not_permitted, "permission check on a probe key under the prefix '" + prefix + "'",
                              text_of(reply));
                       }
                       return;
                     }
                     if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2 ||
                         reply.element[0]->type != REDIS_REPLY_STRING || reply.element[1]->type != REDIS_REPLY_STRING) {
                       deny(info.not_permitted, "permission check", "unexpected reply " + text_of(reply));
                       return;
                     }
                     const std::string lock_missing(reply.element[0]->str, reply.element[0]->len);
                     const std::string fence_missing(reply.element[1]->str, reply.element[1]->len);
                     if (!lock_missing.empty()) {
                       deny(info.not_permitted,
                            "the ACL denies " + lock_missing + " on keys under the prefix '" + prefix + "'", {});
                     }
                     if (!fence_missing.empty()) {
                       deny(info.fence_not_permitted,
                            "the ACL denies " + fence_missing + " on the fencing counter '" + fence_key + "'", {});
                     }
                   }});
  steps.push_back(expect(encode_set_nx_px(key, value, kProbeTtlMs), "SET NX PX on a probe key under the prefix", true));
  steps.push_back(expect(encode_script_call(extend_script_, false, {key}, {value, ttl}),
                         "the extend script (GET, PEXPIRE inside)", false));
  steps.push_back(
      expect(encode_script_call(release_script_, false, {key}, {value}), "the release script (GET, DEL inside)", false));
  return steps;
}

std::optional<std::string> ClientImpl::not_permitted(std::uint32_t index, bool fenced) const {
  const Connection& connection = *connections_[index];
  if (!connection.ready()) return std::nullopt;
  const auto& info = connection.server_info();
  if (!info.not_permitted.empty()) return "not permitted: " + info.not_permitted;
  if (fenced && !info.fence_not_permitted.empty()) return "not permitted (fencing): " + info.fence_not_permitted;
  return std::nullopt;
}

// Once per master and problem: again only if the problem changes (re-checked on every
// reconnect, as the ACL may have changed), and after it was fixed and came back.
void ClientImpl::warn_permissions(std::uint32_t index) {
  const auto& info = connections_[index]->server_info();
  MasterView& view = views_[index];
  const std::string problem = info.not_permitted + "|" + info.fence_not_permitted;
  if (problem == "|") {
    view.permission_warned.clear();
    return;
  }
  if (problem == view.permission_warned) return;
  view.permission_warned = problem;
  if (!info.not_permitted.empty()) {
    warn("master " + names_[index] + ": the lock user may not run the lock's commands there, so it is sent no lock " +
         "(not_permitted) until a reconnect proves otherwise: " + info.not_permitted +
         " (docs/permissions.md lists the ACL the library needs)");
  } else {
    warn("master " + names_[index] + ": the lock user may not touch the fencing counter there, so fenced acquires " +
         "are not sent to it (not_permitted): " + info.fence_not_permitted +
         " (docs/permissions.md lists the ACL the library needs)");
  }
}

}  // namespace redlock::detail

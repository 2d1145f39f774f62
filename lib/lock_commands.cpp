// SPDX-License-Identifier: Apache-2.0
// The lock's commands: typed encoders per round kind, and what a reply to each means.
#include "detail/lock_commands.h"

#include <hiredis/hiredis.h>

#include <algorithm>

namespace redlock::detail {
namespace {

bool starts_with(const redisReply& reply, std::string_view prefix) {
  return reply.len >= prefix.size() && std::string_view(reply.str, prefix.size()) == prefix;
}

std::string describe_unexpected(const redisReply& reply) {
  switch (reply.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return "unexpected reply '" + std::string(reply.str, std::min<std::size_t>(reply.len, 64)) + "'";
    case REDIS_REPLY_INTEGER:
      return "unexpected integer reply " + std::to_string(reply.integer);
    case REDIS_REPLY_NIL:
      return "unexpected nil reply";
    case REDIS_REPLY_ARRAY:
      return "unexpected array reply";
    default:
      return "unexpected reply type " + std::to_string(reply.type);
  }
}

}  // namespace

LockCommands::LockCommands(std::string key_prefix, std::string fence_key)
    : key_prefix_(std::move(key_prefix)), fence_key_(std::move(fence_key)) {}

std::string LockCommands::encode(const RoundArgs& args, bool use_eval) const {
  switch (args.kind) {
    case RoundKind::acquire:
      return args.fencing ? fenced_acquire(args.key, args.token, args.ttl, use_eval)
                          : acquire(args.key, args.token, args.ttl);
    case RoundKind::extend:
      return extend(args.key, args.token, args.ttl, use_eval);
    case RoundKind::release:
      return release(args.key, args.token, use_eval);
    case RoundKind::fence:
      return fence_raise(args.fence, use_eval);
  }
  return {};
}

std::string LockCommands::acquire(std::string_view key, std::string_view token, std::chrono::milliseconds ttl) {
  return encode_set_nx_px(key, token, ttl.count());
}

std::string LockCommands::fenced_acquire(std::string_view key, std::string_view token, std::chrono::milliseconds ttl,
                                         bool use_eval) const {
  return encode_script_call(fenced_acquire_, use_eval, {key, fence_key_}, {token, std::to_string(ttl.count())});
}

std::string LockCommands::extend(std::string_view key, std::string_view token, std::chrono::milliseconds ttl,
                                 bool use_eval) const {
  return encode_script_call(extend_, use_eval, {key}, {token, std::to_string(ttl.count())});
}

std::string LockCommands::release(std::string_view key, std::string_view token, bool use_eval) const {
  return encode_script_call(release_, use_eval, {key}, {token});
}

std::string LockCommands::fence_raise(std::uint64_t fence, bool use_eval) const {
  return encode_script_call(fence_raise_, use_eval, {fence_key_}, {std::to_string(fence)});
}

std::string LockCommands::fence_read() const { return encode_command({"GET", fence_key_}); }

bool is_noscript(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR && starts_with(*reply, "NOSCRIPT");
}

ReplyVote classify_reply(RoundKind kind, bool fencing, std::uint64_t fence, const redisReply& reply) {
  ReplyVote vote;
  if (reply.type == REDIS_REPLY_ERROR) {
    // A row with server_error must say what went wrong, even when the master said nothing.
    vote.error = reply.len > 0 ? std::string(reply.str, reply.len) : std::string("empty error reply");
    return vote;
  }
  const bool fenced_acquire = kind == RoundKind::acquire && fencing;
  if (kind == RoundKind::acquire && !fenced_acquire) {
    // SET NX PX: +OK granted, nil held.
    if (reply.type == REDIS_REPLY_STATUS && reply.len == 2 && starts_with(reply, "OK")) {
      vote.status = MasterStatus::ok;
    } else if (reply.type == REDIS_REPLY_NIL) {
      vote.status = MasterStatus::held_by_other;
    }
  } else if (fenced_acquire) {
    // kFencedAcquireScript: the counter after INCR when granted, nil when held.
    if (reply.type == REDIS_REPLY_INTEGER && reply.integer > 0) {
      vote.status = MasterStatus::ok;
      vote.counter = reply.integer;
    } else if (reply.type == REDIS_REPLY_NIL) {
      vote.status = MasterStatus::held_by_other;
    }
  } else if (kind == RoundKind::fence) {
    // kFenceRaiseScript: the counter afterwards; acknowledged when it reached the token.
    if (reply.type == REDIS_REPLY_INTEGER && reply.integer >= 0 && static_cast<std::uint64_t>(reply.integer) >= fence) {
      vote.status = MasterStatus::ok;
    }
  } else if (reply.type == REDIS_REPLY_INTEGER && reply.integer >= -1 && reply.integer <= 1) {
    // kReleaseScript, kExtendScript: -1 another owner, 0 no key, 1 done.
    static constexpr MasterStatus kByValue[] = {MasterStatus::held_by_other, MasterStatus::not_found,
                                                MasterStatus::ok};
    vote.status = kByValue[reply.integer + 1];
  }
  if (vote.status == MasterStatus::server_error) vote.error = describe_unexpected(reply);
  return vote;
}

}  // namespace redlock::detail

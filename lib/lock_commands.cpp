// SPDX-License-Identifier: Apache-2.0
// The lock's commands: typed encoders per round kind, and what a reply to each means.
#include "detail/lock_commands.h"

#include <hiredis/hiredis.h>

#include <algorithm>

#include "detail/token.h"

namespace redlock::detail {
namespace {

bool starts_with(const redisReply& reply, std::string_view prefix) {
  return reply.len >= prefix.size() && std::string_view(reply.str, prefix.size()) == prefix;
}

std::string fence_out_of_range(long long counter) {
  return "fencing counter " + std::to_string(counter) + " is beyond " + std::to_string(kMaxFence) +
         " (2^53 - 1), the largest the fencing scripts compare exactly: not counted";
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

std::string release_channel(std::string_view key) {
  std::string channel(kReleaseChannelPrefix);
  channel += key;
  return channel;
}

LockCommands::LockCommands(std::string key_prefix, std::string fence_key, bool keyspace_mark)
    : key_prefix_(std::move(key_prefix)),
      fence_key_(std::move(fence_key)),
      keyspace_mark_(keyspace_mark),
      mark_key_(key_prefix_ + std::string(kMarkKeyName)) {}

void LockCommands::append(std::string& out, const RoundArgs& args, bool use_eval, std::string_view mark) const {
  switch (args.kind) {
    case RoundKind::acquire: {
      const std::string_view* checked = keyspace_mark_ ? &mark : nullptr;
      if (args.fencing) {
        fenced_acquire(out, args.key, args.token, args.ttl, use_eval, checked);
      } else if (args.learn_pttl) {
        waiting_acquire(out, args.key, args.token, args.ttl, use_eval, checked);
      } else if (keyspace_mark_) {
        marked_acquire(out, args.key, args.token, args.ttl, use_eval, mark);
      } else {
        acquire(out, args.key, args.token, args.ttl);
      }
      return;
    }
    case RoundKind::extend:
      extend(out, args.key, args.token, args.ttl, use_eval);
      return;
    case RoundKind::release:
      release(out, args.key, args.token, use_eval);
      return;
    case RoundKind::fence:
      fence_raise(out, args.fence, use_eval);
      return;
  }
}

void LockCommands::acquire(std::string& out, std::string_view key, std::string_view token,
                           std::chrono::milliseconds ttl) {
  append_set_nx_px(out, key, token, ttl.count());
}

void LockCommands::marked_acquire(std::string& out, std::string_view key, std::string_view token,
                                  std::chrono::milliseconds ttl, bool use_eval, std::string_view mark) const {
  const DecimalText px(static_cast<long long>(ttl.count()));
  append_script_call(out, marked_acquire_, use_eval, {key, mark_key_}, {token, px.view(), mark});
}

void LockCommands::waiting_acquire(std::string& out, std::string_view key, std::string_view token,
                                   std::chrono::milliseconds ttl, bool use_eval, const std::string_view* mark) const {
  const DecimalText px(static_cast<long long>(ttl.count()));
  if (mark != nullptr) {
    append_script_call(out, waiting_acquire_, use_eval, {key, mark_key_}, {token, px.view(), *mark});
  } else {
    append_script_call(out, waiting_acquire_, use_eval, {key}, {token, px.view()});
  }
}

void LockCommands::fenced_acquire(std::string& out, std::string_view key, std::string_view token,
                                  std::chrono::milliseconds ttl, bool use_eval, const std::string_view* mark) const {
  const DecimalText px(static_cast<long long>(ttl.count()));
  if (mark != nullptr) {
    append_script_call(out, fenced_acquire_, use_eval, {key, fence_key_, mark_key_}, {token, px.view(), *mark});
  } else {
    append_script_call(out, fenced_acquire_, use_eval, {key, fence_key_}, {token, px.view()});
  }
}

std::string LockCommands::mark_create() const { return encode_command({"SET", mark_key_, make_token(), "NX"}); }

std::string LockCommands::mark_read() const { return encode_command({"GET", mark_key_}); }

void LockCommands::extend(std::string& out, std::string_view key, std::string_view token,
                          std::chrono::milliseconds ttl, bool use_eval) const {
  const DecimalText px(static_cast<long long>(ttl.count()));
  append_script_call(out, extend_, use_eval, {key}, {token, px.view()});
}

void LockCommands::release(std::string& out, std::string_view key, std::string_view token, bool use_eval) const {
  append_script_call(out, release_, use_eval, {key}, {token, CommandArg(kReleaseChannelPrefix, key)});
}

void LockCommands::fence_raise(std::string& out, std::uint64_t fence, bool use_eval) const {
  const DecimalText value(fence);
  append_script_call(out, fence_raise_, use_eval, {fence_key_}, {value.view()});
}

std::string LockCommands::fence_read() const { return encode_command({"GET", fence_key_}); }

bool is_mark_changed(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR && starts_with(*reply, kMarkChangedError);
}

bool is_noscript(const redisReply* reply) noexcept {
  return reply != nullptr && reply->type == REDIS_REPLY_ERROR && starts_with(*reply, "NOSCRIPT");
}

ReplyVote classify_reply(RoundKind kind, bool fencing, std::uint64_t fence, const redisReply& reply, bool learn_pttl) {
  ReplyVote vote;
  if (reply.type == REDIS_REPLY_ERROR) {
    // A row with server_error must say what went wrong, even when the master said nothing.
    vote.error = reply.len > 0 ? std::string(reply.str, reply.len) : std::string("empty error reply");
    if (kind == RoundKind::acquire && is_mark_changed(&reply)) {
      vote.error =
          "keyspace replaced (mark changed): wiped since this Client read its mark (FLUSHALL, FLUSHDB, SWAPDB, DEBUG "
          "RELOAD, a resync); nothing was set, not a vote (restart guard)";
    }
    return vote;
  }
  const bool fenced_acquire = kind == RoundKind::acquire && fencing;
  if (kind == RoundKind::acquire && !fenced_acquire) {
    // SET NX PX: +OK granted, nil held.
    if (reply.type == REDIS_REPLY_STATUS && reply.len == 2 && starts_with(reply, "OK")) {
      vote.status = MasterStatus::ok;
    } else if (reply.type == REDIS_REPLY_NIL) {
      vote.status = MasterStatus::held_by_other;
    } else if (learn_pttl && reply.type == REDIS_REPLY_INTEGER && reply.integer >= kPttlUnknown) {
      // kWaitingAcquireScript: held, with the key's PTTL (or -1 / kPttlUnknown).
      vote.status = MasterStatus::held_by_other;
      vote.pttl = reply.integer == -2 ? kPttlUnknown : reply.integer;
    }
  } else if (fenced_acquire) {
    // kFencedAcquireScript: the counter after INCR when granted, nil when held.
    if (reply.type == REDIS_REPLY_INTEGER && reply.integer > 0 && fence_in_range(reply.integer)) {
      vote.status = MasterStatus::ok;
      vote.counter = reply.integer;
    } else if (reply.type == REDIS_REPLY_INTEGER && reply.integer > 0) {
      vote.error = fence_out_of_range(reply.integer);
      return vote;
    } else if (reply.type == REDIS_REPLY_NIL) {
      vote.status = MasterStatus::held_by_other;
    }
  } else if (kind == RoundKind::fence) {
    // kFenceRaiseScript: the counter afterwards; acknowledged when it reached the token.
    if (reply.type == REDIS_REPLY_INTEGER && fence_in_range(reply.integer) &&
        static_cast<std::uint64_t>(reply.integer) >= fence) {
      vote.status = MasterStatus::ok;
    } else if (reply.type == REDIS_REPLY_INTEGER && reply.integer > 0 && !fence_in_range(reply.integer)) {
      vote.error = fence_out_of_range(reply.integer);
      return vote;
    }
  } else if (reply.type == REDIS_REPLY_INTEGER && reply.integer >= -1 && reply.integer <= 1) {
    // kReleaseScript, kExtendScript: -1 another owner, 0 no key, 1 done.
    static constexpr MasterStatus kByValue[] = {MasterStatus::held_by_other, MasterStatus::not_found,
                                                MasterStatus::ok};
    vote.status = kByValue[reply.integer + 1];
  } else if (kind == RoundKind::release && reply.type == REDIS_REPLY_ARRAY && reply.elements == 2 &&
             reply.element[0]->type == REDIS_REPLY_INTEGER && reply.element[0]->integer == 1 &&
             reply.element[1]->type == REDIS_REPLY_INTEGER && reply.element[1]->integer > 0) {
    // kReleaseScript: deleted, and the announcement reached this many subscribers.
    vote.status = MasterStatus::ok;
    vote.receivers = reply.element[1]->integer;
  }
  if (vote.status == MasterStatus::server_error) vote.error = describe_unexpected(reply);
  return vote;
}

}  // namespace redlock::detail

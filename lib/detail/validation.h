// SPDX-License-Identifier: Apache-2.0
// detail/validation.h — checks of configuration and per-call arguments.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redlock/options.h"

namespace redlock::detail {

// Parses every master and checks every field; throws ConfigError naming the first bad
// field and value. Returns the parsed masters in order.
std::vector<Endpoint> validate(const ClientOptions& options);

// Empty when `resource` is acceptable, else the reason (naming the value).
std::optional<std::string> check_resource(std::string_view resource);

// Empty when `key` (a Lock's, for extend and release) is no longer than a key this library
// makes (kMaxKeyPrefixSize + kMaxResourceSize), else the reason.
std::optional<std::string> check_lock_key(std::string_view key);

// Empty when `resource`'s key (key_prefix + resource) is not the fencing counter's. With a
// key_prefix validate() already rules that out; with an empty one only the name can. Nor the
// restart guard's keyspace mark (resource "__redlock_mark", kMarkKeyName).
std::optional<std::string> check_not_fence_key(const ClientOptions& options, std::string_view resource);

// Empty when `token` has the form of an owner token this library makes (Client::adopt),
// else the reason (naming the value, cut if long).
std::optional<std::string> check_token(std::string_view token);

// Empty when `ttl` is acceptable for these options (positive, above the drift allowance
// plus min_validity), else the reason.
std::optional<std::string> check_ttl(const ClientOptions& options, Milliseconds ttl);

// Empty when `options`' retry_count (-1 or more) and wait (not negative) are acceptable, else
// the reason naming the value. Its ttl is checked with check_ttl.
std::optional<std::string> check_acquire_options(const AcquireOptions& options);

}  // namespace redlock::detail

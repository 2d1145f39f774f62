// SPDX-License-Identifier: Apache-2.0
// detail/token.h — owner tokens: 128 bits from the OS CSPRNG, printable.
#pragma once

#include <string>

namespace redlock::detail {

inline constexpr std::size_t kTokenBytes = 16;  // 128 bits; the token is twice as many hex digits

// getrandom(2) on every call. No user-space pool: a pool copied by fork() would hand the
// same tokens to parent and child. Throws std::system_error if the kernel refuses.
std::string make_token();

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/token.h — owner tokens: 128 bits from the OS CSPRNG, printable.
#pragma once

#include <string>

namespace redlock::detail {

inline constexpr std::size_t kTokenBytes = 16;  // 128 bits; the token is twice as many hex digits

// getrandom(2) on every call. No user-space pool: one process made into two would hand the
// same tokens out in both, and a failed attempt's release by one would delete the other's
// key (its compare-and-delete matches). A pool in a MADV_WIPEONFORK page is safe across
// fork() (tried 2026-11-30: it saved the one getrandom per cycle), but nothing in user space
// can tell that a process was restored twice from one snapshot (a VM clone, CRIU), where the
// kernel's own generator is reseeded. Throws std::system_error if the kernel refuses.
std::string make_token();

}  // namespace redlock::detail

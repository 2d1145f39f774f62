// SPDX-License-Identifier: Apache-2.0
// detail/lock_state.h — what a Client remembers about a lock it granted: which masters
// (in which incarnation) vouch for it, and whether it is known lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "redlock/result.h"

namespace redlock {

class LockState {
 public:
  explicit LockState(std::size_t masters) : epochs(masters, 0) {}

  // Any thread.
  std::atomic<bool> lost{false};

  // Loop thread only. Per master: the incarnation (Client-local epoch of its run_id) that
  // granted the lock, 0 if it did not. `votes` counts the non-zero entries.
  std::vector<std::uint32_t> epochs;
  std::uint32_t votes = 0;
};

}  // namespace redlock

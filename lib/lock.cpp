// SPDX-License-Identifier: Apache-2.0
// redlock::Lock's member functions.
#include "redlock/lock.h"

#include "detail/lock_state.h"

namespace redlock {

bool Lock::lost() const noexcept { return state_ && state_->lost.load(std::memory_order_acquire); }

}  // namespace redlock

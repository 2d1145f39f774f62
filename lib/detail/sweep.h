// SPDX-License-Identifier: Apache-2.0
// detail/sweep.h — how the Client's bookkeeping of things that go stale (deadlines that
// passed, weak pointers that expired) stays bounded without a timer.
//
// Before an insert, the container is swept of its stale entries once it has doubled since
// the last sweep (and holds at least `least`). A sweep at a fixed size would scan a
// container of live entries whole on every insert; this way each entry is scanned an
// amortized constant number of times, and the container stays within twice its live size
// (or `least`).
#pragma once

#include <algorithm>
#include <cstddef>

namespace redlock::detail {

template <typename Container, typename Stale>
void sweep_when_doubled(Container& entries, std::size_t& sweep_at, std::size_t least, Stale stale) {
  if (entries.size() < sweep_at) return;
  std::erase_if(entries, stale);
  sweep_at = std::max(least, 2 * entries.size());
}

}  // namespace redlock::detail

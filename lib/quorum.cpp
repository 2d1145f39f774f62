// SPDX-License-Identifier: Apache-2.0
#include "detail/quorum.h"

#include <cmath>

namespace redlock::detail {

void Tally::add(MasterStatus status) noexcept {
  switch (status) {
    case MasterStatus::ok:
      ++granted;
      return;
    case MasterStatus::held_by_other:
      // A release's goal is that our token is gone: another owner's key means it is.
      if (kind == RoundKind::release) ++granted; else ++held;
      return;
    case MasterStatus::not_found:
      if (kind == RoundKind::release) ++granted; else ++missing;
      return;
    case MasterStatus::server_error:
    case MasterStatus::timeout:
    case MasterStatus::not_connected:
    case MasterStatus::not_counted:
    case MasterStatus::not_permitted:
      ++failed;
      return;
    case MasterStatus::pending:
      return;
  }
}

Verdict Tally::verdict() const noexcept {
  if (granted >= quorum) return Verdict::success;
  if (against() > size - quorum) return Verdict::failure;
  return Verdict::undecided;
}

Outcome Tally::failure_outcome() const noexcept {
  if (kind == RoundKind::fence) return Outcome::quorum_unreachable;
  const std::uint32_t owned_elsewhere = held + missing;
  if (owned_elsewhere > 0 && owned_elsewhere >= failed) {
    return kind == RoundKind::acquire ? Outcome::taken : Outcome::lost;
  }
  return Outcome::quorum_unreachable;
}

std::chrono::microseconds drift_for(std::chrono::milliseconds ttl, double factor,
                                    std::chrono::milliseconds constant) noexcept {
  // Rounded up: the allowance must never come out smaller than the formula.
  const double proportional_us = std::ceil(static_cast<double>(ttl.count()) * 1000.0 * factor);
  return std::chrono::microseconds(static_cast<long long>(proportional_us)) + constant;
}

}  // namespace redlock::detail

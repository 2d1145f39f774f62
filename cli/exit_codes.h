// SPDX-License-Identifier: Apache-2.0
// cli/exit_codes.h — the tool's exit statuses (sysexits.h) and how lock outcomes map to them.
#pragma once

#include <sysexits.h>

#include "redlock/result.h"

namespace redlock_cli {

inline constexpr int kExitOk = EX_OK;                  // 0
inline constexpr int kExitUsage = EX_USAGE;            // 64: bad arguments / configuration
inline constexpr int kExitUnavailable = EX_UNAVAILABLE;  // 69: quorum unreachable, other failures
inline constexpr int kExitSoftware = EX_SOFTWARE;      // 70: internal error
inline constexpr int kExitOsError = EX_OSERR;          // 71: fork/signal setup failed
inline constexpr int kExitTaken = EX_CANTCREAT;        // 73: the lock is held by another owner
inline constexpr int kExitLost = EX_TEMPFAIL;          // 75: the lock was lost / expired
inline constexpr int kExitNoPermission = EX_NOPERM;    // 77: the ACL user may not run the lock's commands
inline constexpr int kExitCannotExecute = 126;         // run: the command is not executable
inline constexpr int kExitNotFound = 127;              // run: the command was not found

// The exit status for a finished acquire, extend or release.
[[nodiscard]] constexpr int exit_code_for(redlock::Outcome outcome) noexcept {
  switch (outcome) {
    case redlock::Outcome::acquired:
    case redlock::Outcome::extended:
    case redlock::Outcome::released:
      return kExitOk;
    case redlock::Outcome::taken:
      return kExitTaken;
    case redlock::Outcome::lost:
      return kExitLost;
    case redlock::Outcome::invalid_argument:
      return kExitUsage;
    case redlock::Outcome::quorum_unreachable:
    case redlock::Outcome::validity_expired:
    case redlock::Outcome::cancelled:
      return kExitUnavailable;
  }
  return kExitUnavailable;
}

// The exit status for a finished operation: as above, except that a failure decided by the
// masters' permission check alone (every master that answered is not_permitted) is a
// configuration problem, not an outage.
[[nodiscard]] inline int exit_code_for(const redlock::Result& result) noexcept {
  if (!result.ok() && result.count(redlock::MasterStatus::not_permitted) > 0 &&
      result.count(redlock::MasterStatus::not_permitted) + result.count(redlock::MasterStatus::pending) ==
          result.masters.size()) {
    return kExitNoPermission;
  }
  return exit_code_for(result.outcome);
}

}  // namespace redlock_cli

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
inline constexpr int kExitIoError = EX_IOERR;          // 74: acquire could not write its token (released)
inline constexpr int kExitLost = EX_TEMPFAIL;          // 75: the lock was lost / expired
inline constexpr int kExitNoPermission = EX_NOPERM;    // 77: masters refuse the password or the ACL user
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

// A master that refused our credentials: AUTH failed (WRONGPASS; "invalid password" before
// Redis 6; a password sent to a server that has none), or it wants a password we did not send
// (NOAUTH). The library reports the first as not_connected ("handshake failed: ..."), the
// second as the rounds' server_error; only the error text tells them from an outage.
[[nodiscard]] inline bool refused_credentials(const redlock::MasterResult& master) noexcept {
  if (master.status != redlock::MasterStatus::not_connected && master.status != redlock::MasterStatus::server_error) {
    return false;
  }
  for (const char* sign : {"WRONGPASS", "NOAUTH", "invalid password", "without any password configured",
                           "no password is set"}) {
    if (master.error.find(sign) != std::string::npos) return true;
  }
  return false;
}

// A rediss:// master whose TLS authentication failed, either way: we do not trust its
// certificate (unknown CA, expired or not yet valid, another name, otherwise rejected), it
// refuses ours (or wants one we did not give), or it offers no TLS version we accept. The
// library's reasons (lib/tls/tls_session.cpp, docs/tls.md "Failure reasons") start with
// these words. Like a wrong password, none of them goes away by retrying; a master that
// never answers the handshake, or closes it, is an outage (69) as on plain TCP.
[[nodiscard]] inline bool refused_tls(const redlock::MasterResult& master) noexcept {
  if (master.status != redlock::MasterStatus::not_connected) return false;
  for (const char* sign : {"unknown CA: ", "certificate expired: ", "certificate not yet valid: ", "hostname mismatch: ",
                           "certificate rejected: ", "server requires a client certificate",
                           "server rejected our client certificate", "protocol version too low: "}) {
    if (master.error.rfind(sign, 0) == 0) return true;
  }
  return false;
}

// Masters that refused the lock user: its password (refused_credentials), its permissions
// (not_permitted), or TLS authentication (refused_tls). None goes away by retrying.
[[nodiscard]] inline std::size_t refused_by_configuration(const redlock::Result& result) noexcept {
  std::size_t refused = 0;
  for (const auto& master : result.masters) {
    if (master.status == redlock::MasterStatus::not_permitted || refused_credentials(master) || refused_tls(master)) {
      ++refused;
    }
  }
  return refused;
}

// The exit status for a finished operation: as above, except that a failure the masters'
// configuration decided is not an outage (77): either the masters that refused the password or
// the permissions leave fewer than a quorum (N/2 + 1) that could still say yes, so no retry
// and no wait can succeed until the configuration is fixed; or every master that answered
// refused. (With 5 masters: 3 refusing is 77; 2 refusing and 1 down is 69, since the one down
// may come back.)
[[nodiscard]] inline int exit_code_for(const redlock::Result& result) noexcept {
  if (!result.ok()) {
    const std::size_t size = result.masters.size();
    const std::size_t refused = refused_by_configuration(result);
    if (refused > 0 && size - refused < size / 2 + 1) return kExitNoPermission;
    if (refused > 0 && refused + result.count(redlock::MasterStatus::pending) == size) return kExitNoPermission;
  }
  return exit_code_for(result.outcome);
}

// As above, with -E/--conflict-exit-code in place of 73.
[[nodiscard]] inline int exit_code_for(const redlock::Result& result, int conflict_exit_code) noexcept {
  const int code = exit_code_for(result);
  return code == kExitTaken ? conflict_exit_code : code;
}

}  // namespace redlock_cli

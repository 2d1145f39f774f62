// SPDX-License-Identifier: Apache-2.0
// cli/commands.h — the subcommands. Each returns the process exit status (exit_codes.h).
// They may throw redlock::ConfigError (bad master URI, ttl, ...) from the Client constructor.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "args.h"
#include "output.h"
#include "redlock/client.h"

namespace redlock_cli {

int dispatch(Settings settings);

int acquire_command(const Settings& settings, const Output& out);
int release_command(const Settings& settings, const Output& out);
int extend_command(const Settings& settings, const Output& out);
int run_command(const Settings& settings, const Output& out);     // run.cpp
int status_command(const Settings& settings, const Output& out);  // status.cpp

// Gives the connections a moment to come up before the first round (they connect in the
// background): waits until a quorum is connected, or the connect timeout passes. For a fenced
// acquire also the fencing catch-up (docs/fencing.md: one command deadline, then a read and a
// raise, each within one), which the public API does not show: without it the first fenced
// attempt of a fresh process always fails with not_counted, and --retry-count 0 never works.
void warm_up(redlock::Client& client, bool fenced = false);

// An acquire is sent as its first attempt alone (first_attempt), then, if that failed for a
// reason a retry may cure, as the rest of its retries (rest_of_acquire): the library retries
// whatever failed, and masters that refuse the password or the permissions (exit 77) would
// only be asked again retry_count times. The pause between the two is the library's
// retry_delay +- retry_jitter; --wait counts from the start of the first attempt.
[[nodiscard]] redlock::AcquireOptions first_attempt(const redlock::AcquireOptions& options);
struct RestOfAcquire {
  std::chrono::milliseconds pause{0};
  redlock::AcquireOptions options;
};
// nullopt: the first attempt's result stands (success, a refusal by configuration, a
// cancel, no retries or no --wait left). Otherwise add its attempts to the rest's result.
[[nodiscard]] std::optional<RestOfAcquire> rest_of_acquire(const redlock::Result& first,
                                                           const redlock::AcquireOptions& options,
                                                           const redlock::ClientOptions& client,
                                                           std::chrono::nanoseconds elapsed);

// What the tool says about an acquire's result besides the outcome (stderr unless -q; "notes"
// in --json): a grant with masters missing (which ones and why), and what to do when the
// restart guard's not-yet-counted masters made it fail.
[[nodiscard]] std::vector<std::string> acquire_notes(const redlock::Result& result, const Settings& settings);

}  // namespace redlock_cli

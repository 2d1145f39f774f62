// SPDX-License-Identifier: Apache-2.0
// cli/output.h — what the tool prints: tokens and JSON on stdout, diagnostics on stderr.
// Everything printed through here has password-carrying command-line words masked
// (secrets.h); the library masks passwords in the texts it reports (Endpoint::redact).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "redlock/result.h"

namespace redlock_cli {

// Keys stay in the order they are set, so the output reads naturally.
using Json = nlohmann::ordered_json;

// Every JSON object the tool prints has the same keys, in this order, whatever the command
// and the outcome (cli/README.md "Output"): command, resource, key, outcome, ok, token, fence,
// ttl_ms, validity_ms, attempts, message, masters[{endpoint, status, latency_ms, error}],
// notes, exit_code; `run` adds run_keys() after them. A value that does not apply is null
// (token, fence, ttl_ms), 0, "" or [].

// A Result as JSON. `token` is used when the Result has no lock (release, failed extend).
// notes is [] and exit_code null: the caller sets them.
[[nodiscard]] Json result_json(const redlock::Result& result, std::string_view command,
                              std::string_view resource, std::string_view key, std::string_view token = {});

// A failure found before any lock operation (usage error, internal error) as JSON: outcome is
// `outcome` ("usage_error", "internal_error"), message the error. `command` may be empty
// (not known): null; for "run" the run_keys() are added too. resource and key are null (the
// caller sets them when the command line parsed).
[[nodiscard]] Json error_json(std::string_view command, std::string_view outcome, std::string_view message,
                             int exit_code);

// Adds the keys only `run` has, at their values when nothing ran: extends, lock_lost,
// lost_reason, child{pid, pgid, exit_status, signal}, forwarded_signals, lease, left_group_running,
// release, error, interrupted_by.
void add_run_keys(Json& object);

class Output {
 public:
  Output(bool json, bool quiet) : json_(json), quiet_(quiet) {}

  [[nodiscard]] bool json() const noexcept { return json_; }
  [[nodiscard]] bool quiet() const noexcept { return quiet_; }

  // "redlock: <text>" on stderr, unless --quiet.
  void note(std::string_view text) const;
  // "redlock: <headline>" and the Result's per-master table on stderr, unless --quiet.
  void failure(std::string_view headline, const redlock::Result& result) const;
  // One JSON object on one line; false if it could not be written (a full disk, a closed pipe).
  static bool emit(std::FILE* stream, const Json& object);

 private:
  bool json_;
  bool quiet_;
};

// "usage" errors always reach stderr, --quiet or not.
void print_error(std::string_view text);

// While one exists, lines for stderr are queued and written by a thread of its own, so that
// no thread that must act on time (`run`'s supervisor, which sends SIGKILL; the Client's loop
// thread, which renews the lease and prints the library's warnings) ever waits on a stderr
// nobody reads: a full pipe, a paused terminal (a review: a stuck stderr kept SIGKILL from a
// command that ignored SIGTERM, and stopped the renewals). At most kMaxQueuedBytes wait; lines
// beyond are dropped and counted, and the writer says how many once it gets through. The
// destructor waits until everything queued has been written (which may be forever, if nobody
// ever reads stderr: by then nothing runs under the lock). One at a time.
class QueuedStderr {
 public:
  QueuedStderr();
  ~QueuedStderr();
  QueuedStderr(const QueuedStderr&) = delete;
  QueuedStderr& operator=(const QueuedStderr&) = delete;
  static constexpr std::size_t kMaxQueuedBytes = 1u << 20;
};

}  // namespace redlock_cli

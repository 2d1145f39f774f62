// SPDX-License-Identifier: Apache-2.0
#include "commands.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>

#include "exit_codes.h"
#include "interrupt.h"
#include "redlock/errors.h"

namespace redlock_cli {
namespace {

// The Lock of a token printed earlier, for release and extend in a later process
// (Client::adopt): its validity is unknown here, and the masters refuse an extend when the
// key is gone or carries another token. A token not of the library's form is a usage error.
redlock::Lock adopted_lock(const redlock::Client& client, const Settings& settings) {
  try {
    return client.adopt(settings.resource, settings.token);
  } catch (const redlock::UsageError& error) {
    throw UsageError(error.what());
  }
}

// Built by appending: GCC 12 warns (-Wrestrict, a false positive) on "'" + std::string&&.
std::string quoted(const Settings& settings) {
  std::string text = "'";
  text += printable(settings.resource);
  text += "'";
  return text;
}

std::string row_text(const redlock::MasterResult& master) {
  std::string text = master.endpoint + " (" + std::string(redlock::to_string(master.status));
  if (!master.error.empty()) text += ": " + in_cli_terms(master.error);
  return text + ")";
}

// "granted by 2 of 3 masters; 1 unreachable: 127.0.0.1:7001 (not_connected: ...)": a lock held
// on the bare quorum survives one master less than the operator may think.
std::optional<std::string> partial_grant_warning(const redlock::Result& result, const Settings& settings) {
  std::vector<std::string> unreachable;
  std::vector<std::string> refused;
  std::vector<std::string> connecting;
  for (const auto& master : result.masters) {
    switch (master.status) {
      case redlock::MasterStatus::ok:
        break;
      case redlock::MasterStatus::pending:
        // Not answered yet when the quorum was reached: no news, unless the command waited for
        // a reconnect (the row then says why the connection had failed, a refused password say).
        if (!master.error.empty()) connecting.push_back(row_text(master));
        break;
      case redlock::MasterStatus::timeout:
      case redlock::MasterStatus::not_connected:
        unreachable.push_back(row_text(master));
        break;
      default:
        refused.push_back(row_text(master));
        break;
    }
  }
  if (unreachable.empty() && refused.empty() && connecting.empty()) return std::nullopt;
  const auto list = [](const std::vector<std::string>& rows) {
    std::string text;
    for (const auto& row : rows) text += (text.empty() ? "" : ", ") + row;
    return text;
  };
  std::string text = "warning: " + quoted(settings) + " granted by " +
                     std::to_string(result.count(redlock::MasterStatus::ok)) + " of " +
                     std::to_string(result.masters.size()) + " masters";
  if (!unreachable.empty()) text += "; " + std::to_string(unreachable.size()) + " unreachable: " + list(unreachable);
  if (!refused.empty()) text += "; " + std::to_string(refused.size()) + " did not grant: " + list(refused);
  if (!connecting.empty()) text += "; " + std::to_string(connecting.size()) + " waiting for a connection: " + list(connecting);
  if (const auto pending = result.count(redlock::MasterStatus::pending) - connecting.size(); pending > 0) {
    text += "; " + std::to_string(pending) + " had not answered yet";
  }
  return text;
}

// The restart guard's row text, "restarted 3 s ago; counted after 11 s (restart guard)", or
// "keyspace replaced (mark changed) 0 s ago; counted after 4 s (restart guard)", "a replica 2 s
// ago (...); counted after ..." (lib/restart_guard.cpp): the seconds until this master is
// counted, rounded up (both numbers are whole seconds rounded down), or nullopt when the row
// does not say.
std::optional<long long> seconds_until_counted(std::string_view error) {
  constexpr std::string_view kAgo = " s ago";
  constexpr std::string_view kAfter = "counted after ";
  constexpr std::string_view kTail = " s (restart guard)";
  const std::size_t ago = error.find(kAgo);
  const std::size_t after = error.rfind(kAfter);
  if (ago == std::string_view::npos || after == std::string_view::npos || after < ago || !error.ends_with(kTail)) {
    return std::nullopt;
  }
  std::size_t digits = ago;
  while (digits > 0 && error[digits - 1] >= '0' && error[digits - 1] <= '9') --digits;
  long long age = 0;
  long long wait = 0;
  const char* const age_end = error.data() + ago;
  const char* const wait_begin = error.data() + after + kAfter.size();
  const char* const wait_end = error.data() + error.size() - kTail.size();
  if (digits == ago || std::from_chars(error.data() + digits, age_end, age).ptr != age_end ||
      std::from_chars(wait_begin, wait_end, wait).ptr != wait_end) {
    return std::nullopt;
  }
  return std::max(0LL, wait - age + 1);
}

// A failed acquire that the restart guard decided: the masters that (re)started less than
// max_lock_ttl ago give no votes yet. What to do about it, with the time to wait when the
// rows say it: the quorum-th shortest wait (a master that answered counts at once, one that
// did not never).
std::optional<std::string> restart_guard_advice(const redlock::Result& result) {
  std::size_t guarded = 0;
  std::vector<long long> waits;
  constexpr long long kNever = std::numeric_limits<long long>::max();
  for (const auto& master : result.masters) {
    switch (master.status) {
      case redlock::MasterStatus::not_counted:
        if (master.error.find("restart guard") == std::string::npos) {
          waits.push_back(kNever);  // e.g. the fencing counter's catch-up: not this advice's business
          break;
        }
        ++guarded;
        waits.push_back(seconds_until_counted(master.error).value_or(kNever));
        break;
      case redlock::MasterStatus::ok:
      case redlock::MasterStatus::held_by_other:
      case redlock::MasterStatus::not_found:
      case redlock::MasterStatus::pending:
        waits.push_back(0);
        break;
      default:
        waits.push_back(kNever);
        break;
    }
  }
  if (guarded == 0) return std::nullopt;
  std::sort(waits.begin(), waits.end());
  const std::size_t quorum = result.masters.size() / 2 + 1;
  const long long wait = waits[quorum - 1];
  std::string text =
      std::to_string(guarded) + " of " + std::to_string(result.masters.size()) +
      " masters are not counted yet by the restart guard: they (re)started, were a replica, or had their "
      "keyspace replaced or unmarked (no keyspace mark: a fresh key prefix, or a wipe such as FLUSHALL) "
      "less than --max-lock-ttl ago, and may have forgotten the locks they held. ";
  text += wait != kNever && wait > 0
              ? "Wait about " + std::to_string(wait) + " s (or use --wait " + std::to_string(wait + 1) + "s), or"
              : "Wait until they have been up --max-lock-ttl, or";
  text +=
      " use durable masters (appendonly yes and appendfsync always: counted after a restart; see cli/README.md, "
      "\"Restart guard\"), or pass --no-restart-guard, only if every master persists its keys: a master that "
      "restarted empty then counts at once and can grant a lock another client still holds";
  return text;
}

}  // namespace

redlock::AcquireOptions first_attempt(const redlock::AcquireOptions& options) {
  redlock::AcquireOptions first = options;
  first.retry_count = 0;
  first.wait.reset();
  return first;
}

std::optional<RestOfAcquire> rest_of_acquire(const redlock::Result& first, const redlock::AcquireOptions& options,
                                             const redlock::ClientOptions& client, std::chrono::nanoseconds elapsed) {
  if (first.ok() || first.outcome == redlock::Outcome::cancelled ||
      first.outcome == redlock::Outcome::invalid_argument || exit_code_for(first) == kExitNoPermission) {
    return std::nullopt;
  }
  const int retries = options.retry_count.value_or(client.retry_count);
  if (retries == 0) return std::nullopt;
  RestOfAcquire rest;
  rest.options = options;
  rest.options.retry_count = retries < 0 ? -1 : retries - 1;
  // The library's pause between attempts (lib/client_impl.cpp, fail_attempt).
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const auto jitter = client.retry_jitter.count();
  rest.pause = std::max(std::chrono::milliseconds(0),
                        client.retry_delay + std::chrono::milliseconds(
                                                 std::uniform_int_distribution<long long>(-jitter, jitter)(rng)));
  if (options.wait) {
    const auto left = *options.wait - std::chrono::ceil<std::chrono::milliseconds>(elapsed) - rest.pause;
    if (left <= std::chrono::milliseconds(0)) return std::nullopt;
    rest.options.wait = left;
  }
  return rest;
}

std::vector<std::string> acquire_notes(const redlock::Result& result, const Settings& settings) {
  std::vector<std::string> notes;
  if (result.ok()) {
    if (auto warning = partial_grant_warning(result, settings)) notes.push_back(std::move(*warning));
  } else if (auto advice = restart_guard_advice(result)) {
    notes.push_back(std::move(*advice));
  }
  return notes;
}

void warm_up(redlock::Client& client, bool fenced) {
  const auto& options = client.options();
  if (!client.wait_connected(client.quorum(), options.connect_timeout)) return;
  // The others get one command deadline more. The tool exits as soon as a quorum has answered,
  // and a command held by a master still connecting (a TLS handshake takes a few ms) is lost
  // with the Client: a release would leave that master's key until its ttl. A master that is
  // down costs this once per command.
  (void)client.wait_connected(client.size(), options.command_timeout);
  if (fenced) std::this_thread::sleep_for(3 * options.command_timeout);
}

int dispatch(Settings settings) {
  const Output out(settings.json, settings.quiet);
  // The library's warnings about the masters' configuration (called on its loop thread).
  settings.client.on_warning = [quiet = settings.quiet](const std::string& warning) {
    // main() printed the tool's own (unsilenceable) warning about --tls-insecure-skip-verify.
    if (warning.rfind("TlsOptions::insecure_skip_verify", 0) == 0) return;
    if (!quiet) print_error("warning: " + in_cli_terms(warning));
  };
  switch (settings.command) {
    case CommandKind::acquire: return acquire_command(settings, out);
    case CommandKind::release: return release_command(settings, out);
    case CommandKind::extend: return extend_command(settings, out);
    case CommandKind::run: return run_command(settings, out);
    case CommandKind::status: return status_command(settings, out);
  }
  return kExitSoftware;
}

namespace {

// An acquire's product is its token: a lock whose token could not be written (a full disk, a
// closed pipe) could be neither released nor used, so it is released now and the tool fails.
int token_not_written(redlock::Client& client, const redlock::Lock& lock, const Settings& settings) {
  const int error = errno;
  const redlock::Result released = client.release(lock);
  std::string text = "could not write the token of " + quoted(settings) + " to stdout (" + std::strerror(error) + "): ";
  text += released.ok() ? "released the lock"
                        : "the release failed too (" + std::string(redlock::to_string(released.outcome)) +
                              "); the lock stays held until its ttl ends, " + std::to_string(lock.ttl.count()) +
                              " ms after the acquire";
  print_error(text);
  return kExitIoError;
}

}  // namespace

namespace {

// acquire_command with the signals already blocked; `interrupted`: the signal that ended it.
int acquire_and_print(const Settings& settings, const Output& out, const BlockedSignals& signals, int& interrupted) {
  const auto mailbox = std::make_shared<Mailbox>();
  redlock::Client client(settings.client);
  warm_up(client, settings.acquire.fencing);
  redlock::Result result = acquire_interruptibly(
      client, settings, signals, mailbox, [](const signalfd_siginfo& info) { return static_cast<int>(info.ssi_signo); },
      interrupted);
  if (interrupted == 0 && result.ok()) {  // a signal that came with the grant: not handed out
    for (const auto& info : signals.read_all()) {
      if (interrupted == 0) interrupted = static_cast<int>(info.ssi_signo);
    }
    if (interrupted != 0) result = released_at_signal(client, std::move(result));
  }
  const int code = interrupted != 0 ? 128 + interrupted : exit_code_for(result, settings.conflict_exit_code);
  auto notes = acquire_notes(result, settings);
  if (interrupted != 0) {
    notes.push_back("interrupted by " + signal_name(interrupted) + " while acquiring " + quoted(settings) + ": " +
                    result.message);
  }
  if (out.json()) {
    auto object = result_json(result, "acquire", settings.resource, settings.key);
    object["notes"] = notes;
    object["exit_code"] = code;
    if (!Output::emit(stdout, object) && result.ok()) return token_not_written(client, *result.lock, settings);
    return code;
  }
  if (interrupted != 0) {
    for (const auto& note : notes) out.note(note);
    // The token of a lock whose release failed is the caller's only way to release it: said
    // even with --quiet.
    if (out.quiet() && result.lock) print_error("token of the unreleased lock: " + result.lock->token);
    return code;
  }
  if (result.ok()) {
    // With --fencing: "TOKEN FENCE", for `read -r token fence`.
    std::string line = result.lock->token;
    if (settings.acquire.fencing) {
      line += ' ';
      line += std::to_string(result.lock->fence);
    }
    const bool written = std::printf("%s\n", line.c_str()) >= 0;
    if (std::fflush(stdout) != 0 || !written || std::ferror(stdout) != 0) {
      return token_not_written(client, *result.lock, settings);
    }
  } else if (!(settings.conflict_silent && exit_code_for(result) == kExitTaken)) {
    out.failure("could not acquire " + quoted(settings), result);
  }
  for (const auto& note : notes) out.note(note);
  return code;
}

}  // namespace

int acquire_command(const Settings& settings, const Output& out) {
  // A token written into a pipe nobody reads must fail the write (EPIPE) and be released,
  // not kill the tool with the lock held (SIGPIPE). acquire starts no other program.
  std::signal(SIGPIPE, SIG_IGN);
  if (settings.stdout_closed) {  // the token would go to the /dev/null main() put there
    print_error("stdout is closed: acquire would have nowhere to write the token of " + quoted(settings) +
                "; nothing was acquired");
    return kExitIoError;
  }
  // A signal that would end the tool while an attempt is out (Ctrl-C, timeout(1)) must not
  // leave what that attempt was granted held for its whole ttl with nobody knowing the token:
  // the signals are read, the attempt is cancelled (and released), and once the Client is gone
  // (its connections have written what was queued) the tool dies of the signal. Blocked before
  // the Client starts its loop thread, which inherits the mask; ignored ones stay ignored.
  const BlockedSignals signals(not_ignored(kStopSignals));
  int interrupted = 0;
  const int code = acquire_and_print(settings, out, signals, interrupted);
  if (interrupted != 0) die_of(interrupted);
  return code;
}

int release_command(const Settings& settings, const Output& out) {
  redlock::Client client(settings.client);
  warm_up(client);
  const redlock::Result result = client.release(adopted_lock(client, settings));
  const int code = exit_code_for(result);
  std::vector<std::string> notes;
  if (const auto deleted = result.count(redlock::MasterStatus::ok); result.ok() && deleted < client.quorum()) {
    // "released" means our token is gone from a quorum; it may have been gone already.
    notes.push_back("note: " + quoted(settings) + " held this token on only " + std::to_string(deleted) + " of " +
                    std::to_string(client.size()) + " masters (it had expired, been released, or been taken over)");
  }
  if (out.json()) {
    auto object = result_json(result, "release", settings.resource, settings.key, settings.token);
    object["notes"] = notes;
    object["exit_code"] = code;
    Output::emit(stdout, object);
    return code;
  }
  if (!result.ok()) out.failure("could not release " + quoted(settings), result);
  for (const auto& note : notes) out.note(note);
  return code;
}

int extend_command(const Settings& settings, const Output& out) {
  redlock::Client client(settings.client);
  warm_up(client);
  const redlock::Result result = client.extend(adopted_lock(client, settings));
  const int code = exit_code_for(result);
  if (out.json()) {
    auto object = result_json(result, "extend", settings.resource, settings.key, settings.token);
    object["exit_code"] = code;
    Output::emit(stdout, object);
  } else if (!result.ok()) {
    out.failure("could not extend " + quoted(settings), result);
  }
  return code;
}

}  // namespace redlock_cli

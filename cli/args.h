// SPDX-License-Identifier: Apache-2.0
// cli/args.h — the command line: CLI11 definitions, duration parsing, and the resolved
// settings (redlock::ClientOptions + per-command values) the commands run with.
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "exit_codes.h"
#include "redlock/options.h"

namespace redlock_cli {

// Bad input found by the tool itself (exit 64). The library reports its own as
// redlock::ConfigError, which is treated the same way.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class CommandKind { acquire, release, extend, run, status };

// The raw command line, as CLI11 fills it in.
struct Args {
  std::vector<std::string> masters;
  std::string masters_file;     // --masters-file
  std::string ttl;              // empty: library default (10 s)
  int retry_count = 0;          // used only when retry_count_given
  bool retry_count_given = false;
  std::string retry_delay;      // empty: library default
  std::string command_timeout;  // empty: library default
  std::string prefix = "redlock:";  // when not given: $REDLOCK_PREFIX if set, else this
  bool prefix_given = false;        // --prefix was given
  bool prefix_from_env = false;     // the prefix is $REDLOCK_PREFIX's
  std::string max_lock_ttl;     // empty: library default (ttl rounded up to seconds, + 1 s)
  bool no_restart_guard = false;
  bool json = false;
  bool quiet = false;
  int conflict_exit_code = kExitTaken;  // -E/--conflict-exit-code
  bool conflict_exit_code_given = false;
  // TLS (redlock/tls.h). Empty: not given here (then $REDLOCK_TLS_*, then the masters file).
  std::string tls_ca_file;      // --tls-ca-file
  std::string tls_ca_dir;       // --tls-ca-dir
  std::string tls_cert;         // --tls-cert
  std::string tls_key;          // --tls-key
  std::string tls_server_name;  // --tls-server-name
  std::string tls_min_version;  // --tls-min-version
  bool tls_insecure_skip_verify = false;  // --tls-insecure-skip-verify (command line only)
  bool allow_mixed_tls = false;           // --allow-mixed-tls

  CommandKind command = CommandKind::acquire;
  std::string resource;
  std::string token;                 // release, extend
  std::string wait;                  // acquire, run; empty: the client's retries
  bool fencing = false;              // acquire, run
  bool no_extend = false;            // run
  std::string kill_after;            // run; empty: ttl/10
  std::vector<std::string> program;  // run: the command and its arguments
};

// Everything a command needs, validated.
struct Settings {
  CommandKind command = CommandKind::acquire;
  redlock::ClientOptions client;
  redlock::AcquireOptions acquire;  // acquire, run
  std::string resource;
  std::string key;                  // prefix + resource
  std::string token;                // release, extend
  bool no_extend = false;
  std::optional<std::chrono::milliseconds> kill_after;  // run: --kill-after; nullopt: ttl/10
  std::string kill_after_text;                          // as typed, for messages
  std::vector<std::string> program;
  bool json = false;
  bool quiet = false;
  bool stdout_closed = false;  // started with fd 1 closed (now /dev/null): acquire has nowhere for its token
  // The exit status when the lock is held by another owner (acquire, run): 73 unless -E.
  int conflict_exit_code = kExitTaken;
  // -E was given: a conflict is expected and says so by its exit status alone; the failure
  // table is not printed for it (as flock -E; cron mails whatever a job prints).
  bool conflict_silent = false;
  // Absolute path of the masters file when the masters came from one (--masters-file or
  // REDLOCK_MASTERS_FILE): `run` passes it on to the command.
  std::string masters_file;
  // The masters were given with -m/--master (`run` hands them on as REDLOCK_MASTERS).
  bool masters_from_flags = false;
  // A -m/--master URI carries a password: it was visible in ps until the tool hid it.
  bool password_on_command_line = false;
};

// The TLS settings (client.tls, client.allow_mixed_tls) from, per setting, the first of: the
// command line (--tls-ca-file, ...), the environment (REDLOCK_TLS_CA_FILE, ...), the masters
// file (`tls-ca-file=PATH` lines, when the masters came from one; relative paths there are
// relative to the file's directory). Throws UsageError naming where a bad value came from:
// a setting while no master is rediss://, a fleet mixing rediss:// and redis:// without
// --allow-mixed-tls, a file that cannot be read, a certificate without its key, an unknown
// minimum version. `file_settings` are the masters file's setting lines (empty otherwise).
struct FileSetting;
void resolve_tls(const Args& args, const std::vector<FileSetting>& file_settings, Settings& settings);

// The library's names for the TLS settings in its messages (TlsOptions::ca_file,
// ClientOptions.allow_mixed_tls, ...) replaced by the tool's flags (--tls-ca-file, ...).
// `prefix_source`: where the key prefix came from ("--prefix" or "REDLOCK_PREFIX").
[[nodiscard]] std::string in_cli_terms(std::string_view library_text, std::string_view prefix_source = "--prefix");
// "REDLOCK_PREFIX" when the prefix came from there, else "--prefix".
[[nodiscard]] std::string_view prefix_name(const Args& args);

// The warning printed whenever --tls-insecure-skip-verify is used (even with --quiet).
inline constexpr const char* kInsecureWarning =
    "warning: --tls-insecure-skip-verify: the masters' TLS certificates are NOT checked; anyone on the network "
    "path can impersonate them and read or change every command, passwords included. For tests only";

// Parses the command line into `args` (CLI11 is used in args.cpp only), then overwrites the
// secrets in argv (hide_command_line_secrets: CLI11 has its own copies by then).
// The options are described by `redlock --help`, cli/README.md and define_interface in args.cpp.
struct ParsedCommandLine {
  std::optional<int> exit_code;            // --help or --version: printed; exit with this
  std::optional<std::string> usage_error;  // refused: the message, naming the unknown
                                           // subcommand or option (with the closest known
                                           // name when one is near) or the unexpected word;
                                           // else CLI11's own text
};
[[nodiscard]] ParsedCommandLine parse_command_line(int argc, char** argv, Args& args);

// Validates and converts. Throws UsageError naming the bad value. (Master URIs are checked by
// the library when the Client is built: redlock::ConfigError.) The masters come from the
// first of: -m/--master, --masters-file (not both), $REDLOCK_MASTERS_FILE, $REDLOCK_MASTERS.
[[nodiscard]] Settings resolve(const Args& args);

// What can be told of a command line before (or without) parsing it: whether --json was given
// and the subcommand's name ("" when none is recognisable), so that a usage error can be
// reported as JSON where that subcommand writes its result. Stops at "--".
struct CommandLineShape {
  bool json = false;
  std::string command;
};
[[nodiscard]] CommandLineShape peek_command_line(int argc, char** argv);

// The owner tokens `acquire` prints: the library's (lib/token.cpp) 16 random bytes as 32
// lowercase hex digits. Throws UsageError for anything else, naming `what` ("TOKEN"), the
// length, the first offending character and at most the first kTokenShownChars characters:
// a token is a capability on its lock, so a message (which may end up in a log) never
// repeats one whole, even a malformed one (most often a real token with something glued on).
inline constexpr std::size_t kTokenLength = 32;
inline constexpr std::size_t kTokenShownChars = 8;
void check_token(std::string_view token);

// "500ms", "10s", "1.5s", "2m", "1h"; a plain number is milliseconds. Throws UsageError
// naming `option` and the text.
[[nodiscard]] std::chrono::milliseconds parse_duration(std::string_view text, std::string_view option);

// Splits REDLOCK_MASTERS-style text: comma-separated, blanks around entries ignored; an empty
// entry is kept (as "") for the caller to refuse.
[[nodiscard]] std::vector<std::string> split_masters(std::string_view text);

// `text` with control bytes replaced by '?', for messages.
[[nodiscard]] std::string printable(std::string_view text);

}  // namespace redlock_cli

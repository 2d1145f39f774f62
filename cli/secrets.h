// SPDX-License-Identifier: Apache-2.0
// cli/secrets.h — keeping master passwords out of what the tool prints, out of `ps`, and out
// of the environment of the command `run` starts; reading masters from a private file.
//
// The masking itself is the library's (redlock::Endpoint::mask_uri, which replaces the
// password part of a URI with "***"); this file only decides which words it applies to.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock_cli {

struct Settings;  // args.h

// True when `uri` carries a password (a user-info part: "redis://[user:]password@...").
// The library's own view: Endpoint::mask_uri changes it.
[[nodiscard]] bool holds_password(std::string_view uri);

// Checks a master URI with the library's parser (Endpoint::parse). A bad one is a UsageError
// that starts with `where` (e.g. "--master", "REDLOCK_MASTERS", "masters file 'F':3") and shows
// no password: the library masks a URI's user info (up to its last '@'), and a URI without '@'
// (no password by its grammar, but most often one with "@host" missing, or cut at a ',' or a
// " #") also has what follows its first ':' masked with Endpoint::redact, unless that reads
// as a port (1 to 5 digits).
void check_master_uri(std::string_view uri, std::string_view where);

// Remembers the command-line words that may carry a password, so that every later line the
// tool prints shows them masked: the values of -m/--master (however they are written:
// "-m URI", "--master=URI", "-mURI") and any other word, or value after '=', that looks like
// a URI with a user-info part ("scheme://...@..." or "user:password@..."). Call first thing
// in main(): CLI11's own messages quote such words.
void remember_command_line(int argc, char** argv);

// `text` with the remembered words masked (also in their JSON-escaped form).
[[nodiscard]] std::string mask_secrets(std::string_view text);

// Overwrites, in place, the remembered words that carry a password, so /proc/PID/cmdline
// (what ps shows) has "***" instead. Call after the command line has been parsed (CLI11 has
// copied it). Until then, for a few milliseconds after exec, the password IS visible: a
// password belongs in a masters file or REDLOCK_MASTERS, not on the command line.
void hide_command_line_secrets(int argc, char** argv);

// The same for the owner token that release and extend take as an argument (a capability:
// whoever has it can release the lock): its first 8 hex digits stay, the rest become '*'.
void hide_token_on_command_line(int argc, char** argv, std::string_view token);

// A setting line of a masters file, "NAME=VALUE" (e.g. tls-ca-file=/etc/redlock/ca.pem):
// the TLS settings, named as their flags without the dashes (args.h, resolve_tls). Not
// secrets (paths, a name, a version); a relative path is made relative to the file's directory.
struct FileSetting {
  std::string name;   // "tls-ca-file"
  std::string value;  // as written, or the path made absolute
  std::string where;  // "masters file 'F':LINE", for messages
};
// The names a masters file accepts. --tls-insecure-skip-verify is not one: it must be seen
// on the command line of every use.
inline constexpr const char* kFileSettingNames[] = {"tls-ca-file",     "tls-ca-dir",      "tls-cert", "tls-key",
                                                    "tls-server-name", "tls-min-version", "allow-mixed-tls"};

// A masters file: one URI per line; blank lines and lines starting with '#' are skipped, and
// "URI  # comment" is allowed (a '#' after whitespace starts a comment). A line whose first
// word is NAME=VALUE (no "://") is a setting (FileSetting; VALUE is the rest of the line up to
// a comment). Refused (UsageError, exit 64) when it cannot be read, lists no masters, has a
// line that is not one valid URI or known setting (named as FILE:LINE, the URI masked), or
// holds a password while group or others have any access to it (mode & 077, as ssh refuses a
// private key): the message names the file and its mode. `origin` names where the path came
// from, for messages.
struct MastersFile {
  std::vector<std::string> masters;
  std::vector<FileSetting> settings;
  std::string absolute_path;  // what `run` passes on as REDLOCK_MASTERS_FILE
};
[[nodiscard]] MastersFile read_masters_file(const std::string& path, std::string_view origin);

// The environment for the command `run` starts: this process's, plus REDLOCK_RESOURCE,
// REDLOCK_KEY, REDLOCK_TOKEN, REDLOCK_FENCE when there is a fencing token (an inherited one is
// dropped otherwise: it belongs to another lock) and REDLOCK_PREFIX, and the run's own masters,
// so that a `redlock extend "$REDLOCK_RESOURCE" "$REDLOCK_TOKEN"` inside the command reaches
// this lock (review 45: with --prefix or -m it went to another key or another fleet):
// - from a file: REDLOCK_MASTERS_FILE, its absolute path (no secret);
// - from -m: REDLOCK_MASTERS, the URIs joined with commas, unless one carries a password
//   (then neither variable: a `redlock` inside says it has no masters); an inherited
//   REDLOCK_MASTERS_FILE, which would take precedence, is dropped;
// - from REDLOCK_MASTERS: kept, unless a URI in it carries a password.
[[nodiscard]] std::vector<std::string> command_environment(const Settings& settings, std::string_view token,
                                                           std::optional<std::uint64_t> fence);

}  // namespace redlock_cli

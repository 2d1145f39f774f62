// SPDX-License-Identifier: Apache-2.0
#include "args.h"

#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "secrets.h"

namespace redlock_cli {
namespace {

constexpr const char* kDescription =
    "redlock: hold a Redlock (a lock granted by a majority of N independent Redis masters) "
    "from the shell.";

constexpr const char* kFooter = R"(Durations: 500ms, 10s, 1.5s, 2m, 1h; a plain number is milliseconds.
Restart guard: a master that (re)started less than --max-lock-ttl ago may have forgotten
  locks, so its votes do not count yet; against freshly started masters every acquire fails
  (69) until then. --no-restart-guard turns this off (only safe with persistent masters).
Masters: -m/--master once per master; or --masters-file FILE (one URI per line, # comments);
  or else $REDLOCK_MASTERS_FILE; or else REDLOCK_MASTERS="redis://h1:6379,redis://h2:6379,...".
  URI form: redis://[user:password@]host[:port][/db]; rediss://... for a master reached over TLS.
TLS: --tls-ca-file (else the system CAs), --tls-cert/--tls-key for masters that want a client
  certificate; each also as $REDLOCK_TLS_CA_FILE, ... or tls-ca-file=PATH in the masters file.
  The chain, the name (host or --tls-server-name) and TLS >= 1.2 are verified. A TLS setting
  with no rediss:// master, or a fleet mixing rediss:// and redis:// without --allow-mixed-tls,
  is refused (64).
Passwords: the command line is visible to every user (ps); put URIs with a password in a
  masters file that only you can read (chmod 600; a file that group or others can access is
  refused when it holds a password) or in $REDLOCK_MASTERS. No output shows a password.
run: the command runs in a process group of its own. If the lock is lost, the group gets
  SIGTERM at the latest --kill-after + margin before the lock's deadline and SIGKILL at the
  margin (ttl/20, 10ms..500ms) before it; redlock exits 75 once no process of the group is
  left. The lock is released only when the whole group is gone. The command's environment
  has REDLOCK_RESOURCE, REDLOCK_KEY, REDLOCK_TOKEN (with --fencing also REDLOCK_FENCE, the
  fencing token to hand to a fenced store), and no password.
acquire --fencing prints "TOKEN FENCE" on one line: read -r token fence < <(redlock ...).
Usage errors (64) under --json are a JSON object too, where that subcommand writes its result
  (stdout; run: stderr), with "outcome":"usage_error".

Exit status (sysexits.h):
  0    success (run: the command's own exit status; 128+N if it was killed by signal N)
  64   EX_USAGE        bad arguments or configuration: unparseable duration, bad master URI,
                       no masters, unreadable or too open masters file, ...
  69   EX_UNAVAILABLE  no quorum of masters answered in time (or another failure);
                       status: fewer than a quorum of masters can vote now
  70   EX_SOFTWARE     internal error;  71 EX_OSERR: run could not start the command
  73   EX_CANTCREAT    the lock is held by another owner (acquire, run); -E N changes it
  75   EX_TEMPFAIL     the lock was lost: extend refused, or (run) lost while the command
                       ran (its process group was stopped before the lock's deadline)
  77   EX_NOPERM       masters refused the password (WRONGPASS, NOAUTH) or the lock user's
                       permissions (ACL; docs/permissions.md), or TLS authentication failed
                       (their certificate is not trusted, or they refuse ours), so many that
                       no quorum is left; decided after the first attempt, without retrying
  126  run: the command is not executable;  127: the command was not found

Examples:
  redlock -m redis://a:6379 -m redis://b:6379 -m redis://c:6379 run nightly-report -- ./report.sh
  token=$(redlock acquire deploy) && ... && redlock release deploy "$token")";

// Accepts "12", "12.5" (digits, optional fraction) followed by "", "ms", "s", "m" or "h".
// Returns false when the text does not match or the value is not a whole number of ms.
bool to_milliseconds(std::string_view text, long long& out, bool& too_large) {
  constexpr long long kMax = 366LL * 24 * 3600 * 1000;  // a year: far beyond any sane lease
  std::size_t i = 0;
  long long whole = 0;
  bool huge = false;  // more digits than a year has ms: "too large" only if the rest is valid
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    if (whole > kMax) huge = true;
    if (!huge) whole = whole * 10 + (text[i] - '0');
    ++i;
  }
  if (i == 0) return false;
  long long fraction = 0;
  long long scale = 1;
  if (i < text.size() && text[i] == '.') {
    ++i;
    const std::size_t start = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      if (scale >= 1'000'000'000) return false;  // more precision than anyone means
      fraction = fraction * 10 + (text[i] - '0');
      scale *= 10;
      ++i;
    }
    if (i == start) return false;
  }
  const std::string_view unit = text.substr(i);
  long long multiplier = 0;
  if (unit.empty() || unit == "ms") {
    multiplier = 1;
  } else if (unit == "s") {
    multiplier = 1000;
  } else if (unit == "m") {
    multiplier = 60 * 1000;
  } else if (unit == "h") {
    multiplier = 3600 * 1000;
  } else {
    return false;
  }
  if (huge || whole > kMax / multiplier) {
    too_large = true;
    return false;
  }
  if ((fraction * multiplier) % scale != 0) return false;  // e.g. 0.5ms
  out = whole * multiplier + fraction * multiplier / scale;
  if (out > kMax) {
    too_large = true;
    return false;
  }
  return true;
}

// Edit distance (insertions, deletions, substitutions), for "did you mean".
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "; did you mean 'X'?" for the closest of `known`, if it is a typo away (at most 2 edits,
// and fewer than half the word); else "".
std::string suggestion(std::string_view word, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_distance = 3;
  for (const auto& name : known) {
    const std::size_t distance = edit_distance(word, name);
    if (distance < best_distance && 2 * distance < std::max(word.size(), name.size())) {
      best = name;
      best_distance = distance;
    }
  }
  return best.empty() ? std::string() : "; did you mean '" + best + "'?";
}

constexpr const char* kSubcommands[] = {"acquire", "release", "extend", "run", "status"};

// Every long option name ("--ttl") of `app` and of its subcommands.
void collect_option_names(const CLI::App& app, std::vector<std::string>& out) {
  for (const CLI::Option* option : app.get_options()) {
    for (const auto& name : option->get_lnames()) out.push_back("--" + name);
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    collect_option_names(*sub, out);
  }
}

// The subcommands that have long option `flag` ("acquire, run"); empty if none.
std::string subcommands_with(const CLI::App& app, std::string_view flag) {
  std::string out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    for (const CLI::Option* option : sub->get_options()) {
      const auto& names = option->get_lnames();
      if (std::find(names.begin(), names.end(), flag.substr(2)) == names.end()) continue;
      if (!out.empty()) out += ", ";
      out += sub->get_name();
      break;
    }
  }
  return out;
}

// One TLS setting as given: its value and where it came from ("--tls-ca-file",
// "REDLOCK_TLS_CA_FILE", "masters file 'F':3 (tls-ca-file)"), for messages.
struct Given {
  std::string value;
  std::string origin;
};

// "--tls-ca-file" -> "REDLOCK_TLS_CA_FILE".
std::string env_name(std::string_view flag) {
  std::string out = "REDLOCK_";
  for (const char c : flag.substr(2)) out += c == '-' ? '_' : static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
  return out;
}

// The first of: the flag's value, the environment variable, the masters file's setting line.
std::optional<Given> given(const std::string& flag_value, std::string_view flag,
                           const std::vector<FileSetting>& file_settings) {
  if (!flag_value.empty()) return Given{flag_value, std::string(flag)};
  const std::string env = env_name(flag);
  if (const char* value = std::getenv(env.c_str()); value != nullptr && *value != '\0') {
    return Given{value, env};
  }
  for (const auto& setting : file_settings) {
    if (setting.name == flag.substr(2)) return Given{setting.value, setting.where + " (" + setting.name + ")"};
  }
  return std::nullopt;
}

bool parse_yes_no(const Given& given) {
  for (const char* yes : {"yes", "true", "1", "on"}) {
    if (given.value == yes) return true;
  }
  for (const char* no : {"no", "false", "0", "off"}) {
    if (given.value == no) return false;
  }
  throw UsageError(given.origin + ": expected yes or no (got '" + printable(given.value) + "')");
}

redlock::TlsVersion parse_tls_version(const Given& given) {
  std::string_view text = given.value;
  for (const std::string_view prefix : {"TLSv", "tlsv", "TLS", "tls"}) {
    if (text.substr(0, prefix.size()) == prefix) {
      text.remove_prefix(prefix.size());
      break;
    }
  }
  if (text == "1.2") return redlock::TlsVersion::tls1_2;
  if (text == "1.3") return redlock::TlsVersion::tls1_3;
  const bool older = text == "1.0" || text == "1.1" || text == "1";
  throw UsageError(given.origin + ": invalid TLS version '" + printable(given.value) + "': " +
                   (older ? "below TLS 1.2, which is never accepted; " : "") + "expected 1.2 or 1.3");
}

// The library reads the files when the Client is built; checking here names the flag (or
// variable, or masters file line) the path came from, and says why it cannot be read.
void check_readable(const Given& given, bool directory) {
  const int flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | (directory ? O_DIRECTORY : 0);
  const int fd = ::open(given.value.c_str(), flags);
  const std::string named = given.origin + " '" + printable(given.value) + "'";
  if (fd < 0) throw UsageError(named + ": cannot read it: " + std::strerror(errno));
  struct stat info {};
  const bool is_dir = ::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode);
  ::close(fd);
  if (!directory && is_dir) throw UsageError(named + " is a directory, not a file");
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? " and " : ", ";
    out += words[i];
  }
  return out;
}

}  // namespace

void resolve_tls(const Args& args, const std::vector<FileSetting>& file_settings, Settings& settings) {
  auto& client = settings.client;
  const auto ca_file = given(args.tls_ca_file, "--tls-ca-file", file_settings);
  const auto ca_dir = given(args.tls_ca_dir, "--tls-ca-dir", file_settings);
  const auto cert = given(args.tls_cert, "--tls-cert", file_settings);
  const auto key = given(args.tls_key, "--tls-key", file_settings);
  const auto server_name = given(args.tls_server_name, "--tls-server-name", file_settings);
  const auto min_version = given(args.tls_min_version, "--tls-min-version", file_settings);
  const auto allow_mixed = given(args.allow_mixed_tls ? "yes" : "", "--allow-mixed-tls", file_settings);
  const bool mixed_allowed = allow_mixed && parse_yes_no(*allow_mixed);

  std::vector<std::string> origins;
  for (const auto* setting : {&ca_file, &ca_dir, &cert, &key, &server_name, &min_version}) {
    if (*setting) origins.push_back((*setting)->origin);
  }
  if (args.tls_insecure_skip_verify) origins.emplace_back("--tls-insecure-skip-verify");
  if (mixed_allowed) origins.push_back(allow_mixed->origin);

  // What the masters' URIs say (they were checked before; a bad one never gets here).
  std::string first_tls;
  std::string first_plain;
  for (const auto& uri : client.masters) {
    const auto endpoint = redlock::Endpoint::parse(uri);
    std::string& first = endpoint.tls ? first_tls : first_plain;
    if (first.empty()) first = endpoint.display();
  }
  if (first_tls.empty() && !origins.empty()) {
    throw UsageError(joined(origins) + (origins.size() == 1 ? " is" : " are") +
                     " given, but no master is rediss:// (TLS): every master is redis:// (plain TCP), e.g. " +
                     first_plain +
                     ". Write rediss://host:port for masters that speak TLS (TLS settings with only plain masters "
                     "are refused: a forgotten 's' would send everything in clear)");
  }
  if (!first_tls.empty() && !first_plain.empty() && !mixed_allowed) {
    throw UsageError("the masters mix rediss:// (TLS: " + first_tls + ") and redis:// (plain TCP: " + first_plain +
                     "): lock tokens and passwords would cross some paths in clear. Make every master rediss://, "
                     "or accept it with --allow-mixed-tls (REDLOCK_ALLOW_MIXED_TLS=yes, or allow-mixed-tls=yes in "
                     "the masters file)");
  }
  if (cert.has_value() != key.has_value()) {
    throw UsageError(cert ? cert->origin + " '" + printable(cert->value) +
                                "' is given without --tls-key: a client certificate needs its private key (both or "
                                "neither)"
                          : key->origin + " '" + printable(key->value) +
                                "' is given without --tls-cert: a private key needs its certificate (both or "
                                "neither)");
  }
  if (ca_file) check_readable(*ca_file, false);
  if (ca_dir) check_readable(*ca_dir, true);
  if (cert) check_readable(*cert, false);
  if (key) check_readable(*key, false);

  auto& tls = client.tls;
  if (ca_file) tls.ca_file = ca_file->value;
  if (ca_dir) tls.ca_dir = ca_dir->value;
  if (cert) tls.cert_file = cert->value;
  if (key) tls.key_file = key->value;
  if (server_name) tls.server_name = server_name->value;
  if (min_version) tls.min_version = parse_tls_version(*min_version);
  tls.insecure_skip_verify = args.tls_insecure_skip_verify;
  client.allow_mixed_tls = mixed_allowed;
}

std::string_view prefix_name(const Args& args) { return args.prefix_from_env ? "REDLOCK_PREFIX" : "--prefix"; }

std::string in_cli_terms(std::string_view library_text, std::string_view prefix_source) {
  // Longest first where one name starts another.
  static constexpr std::pair<std::string_view, std::string_view> kTerms[] = {
      {"TlsOptions::cert_file and key_file", "--tls-cert and --tls-key"},
      {"TlsOptions::ca_file", "--tls-ca-file"},
      {"TlsOptions::ca_dir", "--tls-ca-dir"},
      {"TlsOptions::cert_file", "--tls-cert"},
      {"TlsOptions::key_file", "--tls-key"},
      {"TlsOptions::server_name", "--tls-server-name"},
      {"TlsOptions::min_version", "--tls-min-version"},
      {"TlsOptions::insecure_skip_verify", "--tls-insecure-skip-verify"},
      {"does not match cert_file '", "does not match --tls-cert '"},
      {"but cert_file is not", "but --tls-cert is not"},
      {"but key_file is not", "but --tls-key is not"},
      {"ClientOptions.allow_mixed_tls", "--allow-mixed-tls"},
      {"ClientOptions.max_lock_ttl (", "--max-lock-ttl ("},
      {") is below ttl (", ") is below --ttl ("},
      // Review 45: these were named by the library's field ("ClientOptions.ttl 1 ms is ...").
      {"ClientOptions.ttl ", "--ttl "},
      {"ClientOptions.retry_delay", "--retry-delay"},
      {"ClientOptions.retry_jitter", "--retry-delay's jitter (half of it)"},
      {"ClientOptions.command_timeout", "--command-timeout"},
      {"ClientOptions.max_lock_ttl", "--max-lock-ttl"},
  };
  std::string out(library_text);
  const auto replace_all = [&out](std::string_view from, std::string_view to) {
    for (auto at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size())) {
      out.replace(at, from.size(), to);
    }
  };
  for (const auto& [from, to] : kTerms) replace_all(from, to);
  // Named after where the prefix came from.
  replace_all("ClientOptions.key_prefix", prefix_source);
  replace_all("with key_prefix '", "with " + std::string(prefix_source) + " '");
  return out;
}

namespace {

std::string describe_parse_error(const CLI::App& app, const CLI::ParseError& error) {
  // (By type: CLI11 names an ExtrasError after the app, not after its class.)
  const bool extras = dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr;
  const bool required = dynamic_cast<const CLI::RequiredError*>(&error) != nullptr;
  if (!extras && !required) return error.what();
  // The words CLI11 could not place, the parsed subcommand's included.
  std::vector<std::string> left;
  for (const auto& word : app.remaining(true)) {
    if (word != "--") left.push_back(word);
  }
  const std::vector<std::string> subcommands(std::begin(kSubcommands), std::end(kSubcommands));
  const std::string expected = "expected one of acquire, release, extend, run, status";
  if (app.get_subcommands().empty()) {
    // No subcommand was recognised: the first word that is not an option was meant as one.
    for (const auto& word : left) {
      if (!word.empty() && word.front() != '-') {
        return "unknown subcommand '" + printable(word) + "'" + suggestion(word, subcommands) + "; " + expected;
      }
    }
    if (required) return "no subcommand given: " + expected;
  }
  if (!extras || left.empty()) return error.what();
  std::vector<std::string> options;
  collect_option_names(app, options);
  std::string message;
  for (const auto& word : left) {
    if (!message.empty()) message += "; ";
    if (word.size() > 1 && word.front() == '-') {
      const std::string flag = word.substr(0, word.find('='));
      // An option of a subcommand given before its name (`redlock --fencing acquire job`).
      if (const std::string owners = subcommands_with(app, flag); flag.size() > 2 && !owners.empty()) {
        message += "option '" + printable(flag) + "' belongs to " + owners +
                   ": give it after the subcommand's name (redlock " + owners.substr(0, owners.find(',')) + " " +
                   printable(flag) + " ...)";
        continue;
      }
      message += "unknown option '" + printable(flag) + "'" + suggestion(flag, options);
    } else {
      message += "unexpected argument '" + printable(word) + "'";
    }
  }
  return message;
}

}  // namespace

CommandLineShape peek_command_line(int argc, char** argv) {
  CommandLineShape shape;
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--") break;
    if (word == "--json") shape.json = true;
    if (shape.command.empty() &&
        std::find(std::begin(kSubcommands), std::end(kSubcommands), word) != std::end(kSubcommands)) {
      shape.command = std::string(word);
    }
  }
  return shape;
}

void check_token(std::string_view token) {
  if (token.empty()) throw UsageError("TOKEN is empty: give the token acquire printed");
  std::string problem;
  if (const auto bad = std::find_if(token.begin(), token.end(),
                                    [](char c) { return !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')); });
      bad != token.end()) {
    const auto at = static_cast<std::size_t>(bad - token.begin());
    const auto byte = static_cast<unsigned char>(*bad);
    const std::string shown = byte == ' '                 ? "a space (the FENCE of 'TOKEN FENCE' glued on?)"
                              : byte < 0x20 || byte >= 0x7f ? "byte " + std::to_string(byte)
                                                            : "'" + std::string(1, *bad) + "'";
    problem = "character " + std::to_string(at + 1) + " is " + shown;
  } else if (token.size() != kTokenLength) {
    problem = "it has " + std::to_string(token.size()) + " characters";
  } else {
    return;
  }
  const std::string start = printable(token.substr(0, std::min(kTokenShownChars, token.size() / 2)));
  throw UsageError("invalid TOKEN (" + std::to_string(token.size()) + " characters, starting '" + start +
                   "'): " + problem + "; a token is the " + std::to_string(kTokenLength) +
                   " lowercase hex digits acquire printed");
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    out.push_back(byte < 0x20 || byte == 0x7f ? '?' : c);
  }
  return out;
}

std::chrono::milliseconds parse_duration(std::string_view text, std::string_view option) {
  long long value = 0;
  bool too_large = false;
  if (!to_milliseconds(text, value, too_large)) {
    std::string message = "invalid duration '" + printable(text) + "' for " + std::string(option);
    message += too_large ? ": longer than a year"
                         : ": expected a whole number of milliseconds such as 500ms, 10s, 1.5s, 2m or 1h "
                           "(a plain number is milliseconds)";
    throw UsageError(message);
  }
  return std::chrono::milliseconds(value);
}

std::vector<std::string> split_masters(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view item = text.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    out.emplace_back(item);
    start = end + 1;
  }
  return out;
}

namespace {

void define_interface(CLI::App& app, Args& args) {
  app.description(kDescription);
  app.footer(kFooter);
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  app.set_version_flag("--version", std::string("redlock ") + REDLOCK_CLI_VERSION);

  app.add_option("-m,--master", args.masters,
                 "A Redis master, redis://[user:password@]host[:port][/db]. Repeat once per master "
                 "(default: $REDLOCK_MASTERS, comma-separated)")
      ->type_name("URI")
      ->allow_extra_args(false);
  app.add_option("--masters-file", args.masters_file,
                 "Read the masters from FILE, one URI per line (# comments). Refused if it holds a password "
                 "and group or others can access it (default: $REDLOCK_MASTERS_FILE)")
      ->type_name("FILE");
  app.add_option("--ttl", args.ttl, "Lease time of the lock (default 10s)")->type_name("DURATION");
  app.add_option("--retry-count", args.retry_count,
                 "Polling retries after a failed acquire attempt, 0 = one attempt only (default 3; retries "
                 "a heard release triggers are not counted)")
      ->type_name("N");
  app.add_option("--retry-delay", args.retry_delay,
                 "Pause between acquire attempts, +-50% random jitter (default 200ms +-100ms)")
      ->type_name("DURATION");
  app.add_option("--command-timeout", args.command_timeout,
                 "Deadline for each master's reply in one round (default 50ms)")
      ->type_name("DURATION");
  app.add_option("--prefix", args.prefix,
                 "Prepended to the resource name to make the Redis key (default: $REDLOCK_PREFIX if set, else "
                 "redlock:)")
      ->type_name("TEXT");
  app.add_option("--max-lock-ttl", args.max_lock_ttl,
                 "The longest ttl any holder of these locks uses: a master that restarted less than this "
                 "long ago has forgotten locks, so its votes are not counted (default: --ttl rounded up to "
                 "whole seconds, plus 1s)")
      ->type_name("DURATION");
  app.add_flag("--no-restart-guard", args.no_restart_guard,
               "Count a master's votes even right after it (re)started. Safe only when every master "
               "persists its keys (appendonly yes, appendfsync always)");
  app.add_flag("--json", args.json,
               "Machine-readable output: one JSON object (on stdout; run: on stderr, when it ends)");
  app.add_flag("-q,--quiet", args.quiet, "No diagnostics on stderr (usage errors excepted)");
  app.add_option("-E,--conflict-exit-code", args.conflict_exit_code,
                 "Exit status when the lock is held by another owner (acquire, run), 0..255 (default 73, "
                 "as flock -E; 1..255 for acquire); that case then prints nothing")
      ->type_name("N");

  app.add_option("--tls-ca-file", args.tls_ca_file,
                 "PEM CA certificates that sign the rediss:// masters' certificates; only these are trusted "
                 "(default: the system's CAs; $REDLOCK_TLS_CA_FILE)")
      ->type_name("FILE");
  app.add_option("--tls-ca-dir", args.tls_ca_dir,
                 "Directory of CA certificates in OpenSSL's hashed layout (openssl rehash); with or instead of "
                 "--tls-ca-file ($REDLOCK_TLS_CA_DIR)")
      ->type_name("DIR");
  app.add_option("--tls-cert", args.tls_cert,
                 "Client certificate (PEM, chain after the leaf) for masters with tls-auth-clients; needs "
                 "--tls-key ($REDLOCK_TLS_CERT)")
      ->type_name("FILE");
  app.add_option("--tls-key", args.tls_key,
                 "Private key of --tls-cert (PEM, unencrypted: no passphrase) ($REDLOCK_TLS_KEY)")
      ->type_name("FILE");
  app.add_option("--tls-server-name", args.tls_server_name,
                 "Name sent as SNI and checked against every master's certificate instead of the URI's host "
                 "($REDLOCK_TLS_SERVER_NAME)")
      ->type_name("NAME");
  app.add_option("--tls-min-version", args.tls_min_version,
                 "Lowest TLS version accepted: 1.2 (default) or 1.3 ($REDLOCK_TLS_MIN_VERSION)")
      ->type_name("VERSION");
  app.add_flag("--tls-insecure-skip-verify", args.tls_insecure_skip_verify,
               "DANGER, tests only: accept any certificate from anyone (no chain, name or date check); the "
               "traffic is encrypted but anyone on the path can read and change it. Warns every time");
  app.add_flag("--allow-mixed-tls", args.allow_mixed_tls,
               "Accept masters that mix rediss:// (TLS) and redis:// (plain TCP): tokens and passwords then "
               "cross the plain ones in clear ($REDLOCK_ALLOW_MIXED_TLS=yes)");

  auto* acquire = app.add_subcommand(
      "acquire", "Acquire RESOURCE and print its token; the lock stays until its ttl ends or it is released");
  acquire->add_option("RESOURCE", args.resource, "Name of the lock")->required();
  acquire->add_option("--wait", args.wait,
                      "Keep retrying until this much time has passed (default: --retry-count retries)")
      ->type_name("DURATION");
  acquire->add_flag("--fencing", args.fencing,
                    "Also hand out a fencing token (docs/fencing.md): prints \"TOKEN FENCE\" on one line");

  auto* release = app.add_subcommand("release", "Release RESOURCE held with TOKEN (from acquire)");
  release->add_option("RESOURCE", args.resource, "Name of the lock")->required();
  release->add_option("TOKEN", args.token, "The token acquire printed")->required();

  auto* extend = app.add_subcommand(
      "extend",
      "Extend RESOURCE held with TOKEN to a fresh --ttl. The caller vouches that it still holds the lock; "
      "the masters refuse if the key is gone or has another token");
  extend->add_option("RESOURCE", args.resource, "Name of the lock")->required();
  extend->add_option("TOKEN", args.token, "The token acquire printed")->required();

  auto* run = app.add_subcommand(
      "run",
      "Acquire RESOURCE, run COMMAND (given after --) in a process group of its own while extending the "
      "lease every ttl/3, release when no process of the group is left, and exit with the command's status. "
      "Every signal that would end redlock (SIGINT, SIGTERM, SIGHUP, SIGALRM, ...; cli/README.md lists them), and "
      "SIGTSTP and SIGCONT, are forwarded to the group");
  run->add_option("RESOURCE", args.resource, "Name of the lock")->required();
  run->add_option("COMMAND", args.program, "The command and its arguments, after --")->required();
  run->add_option("--wait", args.wait,
                  "Keep retrying the acquire until this much time has passed (default: --retry-count retries)")
      ->type_name("DURATION");
  run->add_flag("--fencing", args.fencing,
                "Also get a fencing token (docs/fencing.md) and pass it to the command as REDLOCK_FENCE");
  run->add_flag("--no-extend", args.no_extend,
                "Hold the lock for one ttl only; if the command is still running when the lease is about to "
                "end, its process group is stopped as after a loss and redlock exits 75");
  run->add_option("--kill-after", args.kill_after,
                  "After a loss: how long the command's process group has between SIGTERM and SIGKILL. Both come "
                  "before the lock's deadline, so at most about 2/3 of --ttl; 0 = SIGKILL at once (default ttl/10)")
      ->type_name("DURATION");

  auto* status = app.add_subcommand(
      "status", "Show each master (reachable, role, restart guard, persistence, eviction, clock) and, with "
                "RESOURCE, who holds it; exit 0 when the masters can grant a lock now, 69 when not (cli/README.md)");
  status->add_option("RESOURCE", args.resource, "Name of a lock to show the holders of");
}

}  // namespace

namespace {

void finish_parse(const CLI::App& app, Args& args) {
  args.retry_count_given = app.count("--retry-count") > 0;
  args.prefix_given = app.count("--prefix") > 0;
  // `run` sets REDLOCK_PREFIX for its command, so a redlock inside finds the run's key.
  if (const char* env_prefix = std::getenv("REDLOCK_PREFIX"); !args.prefix_given && env_prefix != nullptr) {
    args.prefix = env_prefix;
    args.prefix_from_env = true;
  }
  args.conflict_exit_code_given = app.count("--conflict-exit-code") > 0;
  const auto chosen = app.get_subcommands();
  const std::string name = chosen.empty() ? std::string("acquire") : chosen.front()->get_name();
  if (name == "release") {
    args.command = CommandKind::release;
  } else if (name == "extend") {
    args.command = CommandKind::extend;
  } else if (name == "run") {
    args.command = CommandKind::run;
  } else if (name == "status") {
    args.command = CommandKind::status;
  } else {
    args.command = CommandKind::acquire;
  }
}

// run's COMMAND must be exactly the words after a `--`. Without it CLI11 reads option-like
// words after the command as redlock's own (global options may follow the subcommand): `run
// job ./work.sh --prefix /srv/` would lock another key and run the command without its
// argument. A resource that starts with '-' comes after a first `--` (`run -- -x -- CMD`),
// and CLI11 then takes the second `--` for the command's first word: it is dropped here.
std::optional<std::string> command_not_after_double_dash(int argc, char** argv, Args& args) {
  if (args.command != CommandKind::run || args.program.empty()) return std::nullopt;
  int first = 1;
  while (first < argc && std::string_view(argv[first]) != "--") ++first;
  if (first + 2 < argc && args.program.front() == "--" && argv[first + 1] == args.resource) {
    args.program.erase(args.program.begin());
    if (args.program.empty()) return std::nullopt;  // resolve(): run needs a command
  }
  const auto words = static_cast<std::ptrdiff_t>(args.program.size());
  const bool after = argc > words + 1 && std::string_view(argv[argc - words - 1]) == "--" &&
                     std::equal(args.program.begin(), args.program.end(), argv + (argc - words));
  if (after) return std::nullopt;
  return "run: give the command after --, as in 'redlock run RESOURCE -- COMMAND [ARGS...]' (got '" +
         printable(args.program.front()) +
         "' without --: redlock's options among the command's words would be taken as redlock's own)";
}

}  // namespace

ParsedCommandLine parse_command_line(int argc, char** argv, Args& args) {
  CLI::App app;
  app.name("redlock");
  define_interface(app, args);
  ParsedCommandLine parsed;
  try {
    app.parse(argc, argv);
    finish_parse(app, args);
    if (auto error = command_not_after_double_dash(argc, argv, args)) {
      hide_command_line_secrets(argc, argv);
      parsed.usage_error = std::move(error);
      return parsed;
    }
  } catch (const CLI::ParseError& error) {
    hide_command_line_secrets(argc, argv);
    if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      parsed.exit_code = app.exit(error);  // --help, --version: printed
    } else {
      parsed.usage_error = describe_parse_error(app, error);
    }
    return parsed;
  }
  // CLI11 has its own copies now; what ps shows (/proc/PID/cmdline) is this memory.
  hide_command_line_secrets(argc, argv);
  if (args.command == CommandKind::release || args.command == CommandKind::extend) {
    hide_token_on_command_line(argc, argv, args.token);
  }
  return parsed;
}

Settings resolve(const Args& args) {
  Settings settings;
  settings.command = args.command;
  settings.json = args.json;
  settings.quiet = args.quiet;
  settings.no_extend = args.no_extend;
  settings.program = args.program;
  settings.resource = args.resource;
  settings.token = args.token;
  settings.acquire.fencing = args.fencing;
  if (args.conflict_exit_code_given) {
    if (args.conflict_exit_code < 0 || args.conflict_exit_code > 255) {
      throw UsageError("--conflict-exit-code must be an exit status, 0..255 (got " +
                       std::to_string(args.conflict_exit_code) + ")");
    }
    if (args.conflict_exit_code == 0 && args.command == CommandKind::acquire) {
      // It would make a lock held by another owner look acquired: exit 0 and no token, and
      // `token=$(redlock -E 0 acquire job) || exit` goes on as the holder (review 34).
      throw UsageError(
          "--conflict-exit-code 0 with acquire would make a lock held by another owner look acquired (exit 0, "
          "no token printed); give acquire another status, or use -E 0 with run, which then does not start the "
          "command");
    }
    settings.conflict_exit_code = args.conflict_exit_code;
    settings.conflict_silent = true;
  }

  auto& client = settings.client;
  if (!args.masters.empty() && !args.masters_file.empty()) {
    throw UsageError("give the masters either with --master or with --masters-file, not both");
  }
  const char* env_file = std::getenv("REDLOCK_MASTERS_FILE");
  std::vector<FileSetting> file_settings;
  if (!args.masters.empty()) {
    client.masters = args.masters;
    settings.masters_from_flags = true;
    settings.password_on_command_line = std::any_of(args.masters.begin(), args.masters.end(),
                                                    [](const std::string& uri) { return holds_password(uri); });
  } else if (!args.masters_file.empty() || (env_file != nullptr && *env_file != '\0')) {
    const bool from_flag = !args.masters_file.empty();
    auto file = read_masters_file(from_flag ? args.masters_file : std::string(env_file),
                                  from_flag ? "--masters-file" : "REDLOCK_MASTERS_FILE");
    client.masters = std::move(file.masters);
    file_settings = std::move(file.settings);
    settings.masters_file = std::move(file.absolute_path);
  } else if (const char* env = std::getenv("REDLOCK_MASTERS")) {
    client.masters = split_masters(env);
    if (client.masters.size() == 1 && client.masters[0].empty()) client.masters.clear();  // blank: no masters
    // An empty entry is most often a variable that was unset ("redis://m1,$M2,$M3"): dropping
    // it would make a smaller fleet with a smaller quorum, beside processes using the full one.
    for (std::size_t i = 0; i < client.masters.size(); ++i) {
      if (!client.masters[i].empty()) continue;
      throw UsageError("REDLOCK_MASTERS: entry " + std::to_string(i + 1) + " of " +
                       std::to_string(client.masters.size()) +
                       " is empty (a variable left unset?); list every master once, separated by single commas: "
                       "a shorter list is a different fleet with a smaller quorum");
    }
  }
  if (client.masters.empty()) {
    throw UsageError(
        "no masters: give --master redis://host:port once per master or --masters-file FILE, or set "
        "REDLOCK_MASTERS_FILE or REDLOCK_MASTERS");
  }
  // The Client parses them again; checking here names where a bad one came from, and masks
  // more of it than the library can (secrets.h).
  if (!args.masters.empty()) {
    for (const auto& uri : client.masters) check_master_uri(uri, "--master");
  } else if (settings.masters_file.empty()) {
    for (const auto& uri : client.masters) check_master_uri(uri, "REDLOCK_MASTERS");
  }
  resolve_tls(args, file_settings, settings);
  // The library validates all of these too (redlock::ConfigError), but names the
  // ClientOptions field; checking here names the flag the user typed.
  if (!args.ttl.empty()) {
    client.ttl = parse_duration(args.ttl, "--ttl");
    if (client.ttl.count() == 0) throw UsageError("--ttl must be positive (got '" + printable(args.ttl) + "')");
  }
  if (args.retry_count_given) {
    if (args.retry_count < 0) {
      throw UsageError("--retry-count must not be negative (got " + std::to_string(args.retry_count) + ")");
    }
    client.retry_count = args.retry_count;
  }
  if (!args.retry_delay.empty()) {
    client.retry_delay = parse_duration(args.retry_delay, "--retry-delay");
    client.retry_jitter = client.retry_delay / 2;
  }
  if (!args.command_timeout.empty()) {
    client.command_timeout = parse_duration(args.command_timeout, "--command-timeout");
    if (client.command_timeout.count() == 0) {
      throw UsageError("--command-timeout must be positive (got '" + printable(args.command_timeout) + "')");
    }
  }
  client.key_prefix = args.prefix;
  client.restart_guard = !args.no_restart_guard;
  if (!args.max_lock_ttl.empty()) {
    client.max_lock_ttl = parse_duration(args.max_lock_ttl, "--max-lock-ttl");
    // 0 is the library's "not set" (the default from the ttl): as a value typed here it is a mistake.
    if (client.max_lock_ttl.count() == 0) {
      throw UsageError("--max-lock-ttl must be positive (got '" + printable(args.max_lock_ttl) + "')");
    }
  }

  if (!args.kill_after.empty()) {
    settings.kill_after = parse_duration(args.kill_after, "--kill-after");
    settings.kill_after_text = printable(args.kill_after);
  }
  if (!args.wait.empty()) {
    settings.acquire.wait = parse_duration(args.wait, "--wait");
    // --wait alone: retry until it runs out. With --retry-count too: whichever ends first.
    if (!args.retry_count_given) settings.acquire.retry_count = -1;
  }

  if (settings.resource.empty() && settings.command != CommandKind::status) {
    throw UsageError("the resource name is empty");
  }
  if (settings.resource.size() > redlock::kMaxResourceSize) {
    throw UsageError("the resource name is " + std::to_string(settings.resource.size()) +
                     " bytes, more than the maximum " + std::to_string(redlock::kMaxResourceSize));
  }
  if (settings.command == CommandKind::release || settings.command == CommandKind::extend) {
    check_token(settings.token);
  }
  if (settings.command == CommandKind::run && settings.program.empty()) {
    throw UsageError("run needs a command: redlock run RESOURCE -- command [args...]");
  }
  settings.key = client.key_prefix + settings.resource;
  return settings;
}

}  // namespace redlock_cli

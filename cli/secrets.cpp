// SPDX-License-Identifier: Apache-2.0
#include "secrets.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "args.h"
#include "redlock/errors.h"
#include "redlock/options.h"

extern char** environ;

namespace redlock_cli {
namespace {

// A command-line word (or the part of one after "--master=", "-m" or "=") that may carry a
// password, and where it sits in argv.
struct Secret {
  int arg = 0;
  std::size_t offset = 0;
  std::string text;
  std::string masked;
};

std::vector<Secret>& secrets() {
  static std::vector<Secret> remembered;  // written once, in main() before anything else runs
  return remembered;
}

// "scheme://...@..." or "user:password@...": the shapes in which a URI carries user info.
// (A bare "name@host" is left alone: resource names and commands use '@' too.)
bool looks_like_userinfo(std::string_view word) {
  const auto at = word.rfind('@');
  if (at == std::string_view::npos) return false;
  const auto scheme = word.find("://");
  return (scheme != std::string_view::npos && scheme < at) || word.substr(0, at).find(':') != std::string_view::npos;
}

void remember(int arg, std::size_t offset, std::string_view text, bool is_master) {
  if (!is_master && !looks_like_userinfo(text)) return;
  std::string masked = redlock::Endpoint::mask_uri(text);
  if (masked == text) return;
  secrets().push_back(Secret{arg, offset, std::string(text), std::move(masked)});
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// How nlohmann::json writes `text` inside a string, without the quotes.
std::string json_escaped(std::string_view text) {
  const std::string dumped =
      nlohmann::json(std::string(text)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return dumped.substr(1, dumped.size() - 2);
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
  return text;
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

constexpr std::size_t kMaxMastersFileSize = 1 << 20;
// How long a masters file that is not a regular file (a pipe) may take to come to its end.
constexpr std::chrono::seconds kMastersFileWait{5};

// "NAME=VALUE  # comment" when the line's first word has a '=' and no "://" (a URI always
// has one); nullopt for a URI line. An unknown NAME is refused, naming the line.
std::optional<FileSetting> setting_line(std::string_view line, const std::string& where, const std::string& path) {
  const auto name_end = line.find_first_of("= \t");
  if (name_end == std::string_view::npos || name_end == 0) return std::nullopt;
  const std::string_view rest = trim(line.substr(name_end));
  const std::string_view name = line.substr(0, name_end);
  if (rest.empty() || rest.front() != '=' || name.find("://") != std::string_view::npos) return std::nullopt;
  FileSetting setting;
  setting.name = std::string(name);
  setting.where = "masters file " + where;
  std::string_view value = rest.substr(1);
  // A '#' after whitespace starts a comment, as after a URI.
  for (std::size_t i = 1; i < value.size(); ++i) {
    if (value[i] == '#' && (value[i - 1] == ' ' || value[i - 1] == '\t')) {
      value = value.substr(0, i);
      break;
    }
  }
  value = trim(value);
  if (setting.name == "tls-insecure-skip-verify") {
    throw UsageError(setting.where + ": tls-insecure-skip-verify is not accepted in a masters file: turning off "
                     "certificate checks must be seen on the command line of every use (--tls-insecure-skip-verify)");
  }
  if (std::find_if(std::begin(kFileSettingNames), std::end(kFileSettingNames),
                   [&](const char* known) { return setting.name == known; }) == std::end(kFileSettingNames)) {
    std::string known;
    for (const char* known_name : kFileSettingNames) known += (known.empty() ? "" : ", ") + std::string(known_name);
    throw UsageError(setting.where + ": unknown setting '" + printable(setting.name) + "' (known: " + known +
                     "; a master is a URI such as rediss://host:6379)");
  }
  if (value.empty()) throw UsageError(setting.where + ": " + setting.name + " has no value");
  setting.value = std::string(value);
  // Paths relative to the file: `run` hands the file to commands that may work elsewhere.
  const bool is_path = setting.name == "tls-ca-file" || setting.name == "tls-ca-dir" || setting.name == "tls-cert" ||
                       setting.name == "tls-key";
  if (is_path && setting.value.front() != '/') {
    std::error_code error;
    const auto base = std::filesystem::absolute(path, error).parent_path();
    if (!error) setting.value = (base / setting.value).lexically_normal().string();
  }
  return setting;
}

}  // namespace

void check_master_uri(std::string_view uri, std::string_view where) {
  try {
    (void)redlock::Endpoint::parse(uri);
  } catch (const redlock::ConfigError& error) {
    throw UsageError(std::string(where) + ": " + error.what());  // the library hides the password
  }
}

bool holds_password(std::string_view uri) { return redlock::Endpoint::mask_uri(uri) != uri; }

void remember_command_line(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view word = argv[i];
    if ((word == "-m" || word == "--master") && i + 1 < argc) {
      remember(i + 1, 0, argv[i + 1], true);
      ++i;
      continue;
    }
    if (word.rfind("--master=", 0) == 0) {
      remember(i, 9, word.substr(9), true);
      continue;
    }
    if (word.size() > 2 && word.rfind("-m", 0) == 0) {
      remember(i, 2, word.substr(2), true);
      continue;
    }
    remember(i, 0, word, false);
    if (const auto equals = word.find('='); equals != std::string_view::npos) {
      remember(i, equals + 1, word.substr(equals + 1), false);
    }
  }
  // Longest first: a word's masked form must not be spoiled by masking a part of it first.
  std::stable_sort(secrets().begin(), secrets().end(),
                   [](const Secret& a, const Secret& b) { return a.text.size() > b.text.size(); });
}

std::string mask_secrets(std::string_view text) {
  std::string out(text);
  for (const auto& secret : secrets()) {
    replace_all(out, secret.text, secret.masked);
    // The forms in which the tool quotes a word: printable() in messages, escaped in JSON.
    if (const auto shown = printable(secret.text); shown != secret.text) {
      replace_all(out, shown, printable(secret.masked));
    }
    if (const auto escaped = json_escaped(secret.text); escaped != secret.text) {
      replace_all(out, escaped, json_escaped(secret.masked));
    }
  }
  return out;
}

void hide_command_line_secrets(int argc, char** argv) {
  for (const auto& secret : secrets()) {
    if (secret.arg >= argc) continue;
    char* const start = argv[secret.arg] + secret.offset;
    // Same length in place: the masked form, cut if longer (a password of one or two
    // characters), padded with blanks if shorter.
    for (std::size_t i = 0; i < secret.text.size(); ++i) start[i] = i < secret.masked.size() ? secret.masked[i] : ' ';
  }
}

void hide_token_on_command_line(int argc, char** argv, std::string_view token) {
  constexpr std::size_t kShown = 8;  // as `status` shows a holder's token
  if (token.size() <= kShown) return;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == token) std::memset(argv[i] + kShown, '*', token.size() - kShown);
  }
}

MastersFile read_masters_file(const std::string& path, std::string_view origin) {
  const std::string named = "the masters file '" + printable(path) + "' (" + std::string(origin) + ")";
  // O_NONBLOCK: a named pipe nobody has opened for writing would hold the open itself forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) throw UsageError("cannot open " + named + ": " + std::strerror(errno));
  struct stat info {};
  std::string text;
  {
    const int saved = ::fstat(fd, &info) == 0 ? 0 : errno;
    if (saved == 0 && S_ISDIR(info.st_mode)) {
      ::close(fd);
      throw UsageError(named + " is a directory");
    }
    // A regular file reads to its end at once. Anything else (a named pipe, a shell's process
    // substitution, /dev/stdin) is read as it is written, until its end, for kMastersFileWait
    // at most (a review: a named pipe without a writer made the tool wait forever).
    const bool regular = saved == 0 && S_ISREG(info.st_mode);
    const auto give_up = std::chrono::steady_clock::now() + kMastersFileWait;
    bool waited_out = false;
    int read_error = 0;
    char buffer[4096];
    while (saved == 0 && text.size() <= kMaxMastersFileSize) {
      if (!regular) {
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(give_up - std::chrono::steady_clock::now());
        pollfd wanted{fd, POLLIN, 0};
        const int ready = left.count() <= 0 ? 0 : ::poll(&wanted, 1, static_cast<int>(left.count()));
        if (ready < 0 && errno == EINTR) continue;
        if (ready < 0) {
          read_error = errno;
          break;
        }
        if (ready == 0) {
          waited_out = true;
          break;
        }
      }
      const ssize_t got = ::read(fd, buffer, sizeof(buffer));
      if (got > 0) {
        text.append(buffer, static_cast<std::size_t>(got));
      } else if (got == 0) {
        break;
      } else if (errno != EINTR && errno != EAGAIN) {
        read_error = errno;
        break;
      }
    }
    ::close(fd);
    if (saved != 0 || read_error != 0) {
      throw UsageError("cannot read " + named + ": " + std::strerror(saved != 0 ? saved : read_error));
    }
    if (waited_out) {
      throw UsageError(named + " is not a regular file, and it did not come to its end within " +
                       std::to_string(kMastersFileWait.count()) + " s (a named pipe nobody writes to?)");
    }
  }
  if (text.size() > kMaxMastersFileSize) throw UsageError(named + " is larger than 1 MiB");

  MastersFile file;
  bool any_password = false;
  std::size_t line_number = 0;
  for (std::size_t start = 0; start < text.size();) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string_view line = trim(std::string_view(text).substr(start, end - start));
    start = end + 1;
    ++line_number;
    std::string where = "'";  // appended: GCC 12's -Wrestrict misfires on "'" + std::string&&
    where += printable(path);
    where += "':" + std::to_string(line_number);
    if (line.empty() || line.front() == '#') continue;
    if (auto setting = setting_line(line, where, path)) {
      for (const auto& earlier : file.settings) {
        if (earlier.name == setting->name) {
          throw UsageError(setting->where + ": " + setting->name + " is set a second time (first in " + earlier.where +
                           ")");
        }
      }
      file.settings.push_back(std::move(*setting));
      continue;
    }
    const auto blank = line.find_first_of(" \t");
    if (blank != std::string_view::npos) {
      const std::string_view rest = trim(line.substr(blank));
      if (!rest.empty() && rest.front() != '#') {
        throw UsageError("masters file " + where + ": more than one word on the line (one URI per line; '#' starts a comment)");
      }
      line = line.substr(0, blank);
    }
    check_master_uri(line, "masters file " + where);
    any_password = any_password || holds_password(line);
    file.masters.emplace_back(line);
  }
  if (file.masters.empty()) throw UsageError(named + " lists no masters");
  // As ssh does for a private key: a password in a file others can read is no secret.
  if (any_password && (info.st_mode & 077) != 0) {
    throw UsageError("permissions " + octal_mode(info.st_mode) + " for " + named +
                     " are too open: it holds a password, so group and others must have no access to it; run "
                     "chmod 600 '" + printable(path) + "'");
  }
  std::error_code error;
  const auto absolute = std::filesystem::absolute(path, error);
  file.absolute_path = error ? path : absolute.string();
  return file;
}

std::vector<std::string> command_environment(const Settings& settings, std::string_view token,
                                             std::optional<std::uint64_t> fence) {
  const auto with_password = [](const std::vector<std::string>& uris) {
    return std::any_of(uris.begin(), uris.end(), [](const std::string& uri) { return holds_password(uri); });
  };
  const bool from_file = !settings.masters_file.empty();
  const bool from_flags = settings.masters_from_flags;
  std::vector<std::string> out;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view variable = *entry;
    const auto name = variable.substr(0, variable.find('='));
    if (name == "REDLOCK_RESOURCE" || name == "REDLOCK_KEY" || name == "REDLOCK_TOKEN" || name == "REDLOCK_FENCE" ||
        name == "REDLOCK_PREFIX") {
      continue;
    }
    if (name == "REDLOCK_MASTERS_FILE" && (from_file || from_flags)) continue;
    if (name == "REDLOCK_MASTERS" && (from_flags || with_password(split_masters(variable.substr(name.size() + 1))))) {
      continue;
    }
    out.emplace_back(variable);
  }
  out.push_back("REDLOCK_RESOURCE=" + settings.resource);
  out.push_back("REDLOCK_KEY=" + settings.key);
  out.push_back("REDLOCK_TOKEN=" + std::string(token));
  out.push_back("REDLOCK_PREFIX=" + settings.client.key_prefix);
  if (fence) out.push_back("REDLOCK_FENCE=" + std::to_string(*fence));
  if (from_file) out.push_back("REDLOCK_MASTERS_FILE=" + settings.masters_file);
  if (from_flags && !with_password(settings.client.masters)) {
    std::string joined;
    for (const auto& uri : settings.client.masters) joined += (joined.empty() ? "" : ",") + uri;
    out.push_back("REDLOCK_MASTERS=" + joined);
  }
  return out;
}

}  // namespace redlock_cli

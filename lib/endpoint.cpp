// SPDX-License-Identifier: Apache-2.0
// Parsing of master URIs: redis://[user:password@]host[:port][/db], and rediss:// (TLS).
#include <charconv>
#include <string>

#include "redlock/errors.h"
#include "redlock/options.h"

namespace redlock {
namespace {

// Where a URI's authority starts: after "scheme://", or at 0.
std::size_t authority_start(std::string_view uri) {
  const auto scheme_end = uri.find("://");
  return scheme_end == std::string_view::npos ? 0 : scheme_end + 3;
}

// In a URI without '@': the offset just after the ':' that ends the host, or npos. What
// follows may be a password typed where the port goes: "redis://admin:secret" (the "@host"
// forgotten), or "redis://:secret" cut from a list at a ',' or ' #'.
std::size_t after_host_colon(std::string_view uri) {
  std::size_t from = authority_start(uri);
  bool unterminated_ipv6 = false;
  if (from < uri.size() && uri[from] == '[') {
    const auto close = uri.find(']', from);
    unterminated_ipv6 = close == std::string_view::npos;
    if (!unterminated_ipv6) from = close;
  }
  // "[::1:6379" has colons of its own: there only the last one can start a password.
  const auto colon = unterminated_ipv6 ? uri.rfind(':') : uri.find(':', from);
  if (colon == std::string_view::npos || colon < from || colon + 1 >= uri.size()) return std::string_view::npos;
  return colon + 1;
}

// Up to 5 digits (optionally after '-'): a port, maybe out of range. More may be a password.
bool port_like(std::string_view text) {
  if (!text.empty() && text.front() == '-') text.remove_prefix(1);
  return !text.empty() && text.size() <= 5 && text.find_first_not_of("0123456789") == std::string_view::npos;
}

// For display: hides what follows the host's ':' unless it reads as a port (a valid URI's
// port must show), up to '/', '?' or '#'. npos when nothing is hidden.
std::size_t unmarked_password_at(std::string_view uri) {
  const auto at = after_host_colon(uri);
  if (at == std::string_view::npos) return at;
  const std::string_view after = uri.substr(at);
  return port_like(after.substr(0, after.find_first_of("/?#"))) ? std::string_view::npos : at;
}

// The URI as it may appear in an error message: the password replaced by "***".
std::string masked(std::string_view uri) {
  const auto start = authority_start(uri);
  const auto at = uri.rfind('@');
  if (at == std::string_view::npos || at < start) {
    const auto hidden = unmarked_password_at(uri);
    if (hidden == std::string_view::npos) return std::string(uri);
    return std::string(uri.substr(0, hidden)) + "***";
  }
  // "user:password@" keeps the user; "password@" (no colon) is all password.
  const auto colon = uri.substr(start, at - start).find(':');
  const auto mask_from = colon == std::string_view::npos ? start : start + colon + 1;
  return std::string(uri.substr(0, mask_from)) + "***" + std::string(uri.substr(at));
}

// For a parse error only: every occurrence of `secret`, and every run of 4 or more characters
// that starts it, masked. What follows the host's ':' in a URI that did not parse may be a
// password, and the reason names its pieces, some without quotes ("port 202406 is out of range"), so
// this masks more than Endpoint::redact does (a garbled word in a parse error is the lesser harm).
std::string mask_every_start(std::string_view text, std::string_view secret) {
  constexpr std::size_t kShortestStart = 4;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t common = 0;
    while (common < secret.size() && i + common < text.size() && text[i + common] == secret[common]) ++common;
    if (!secret.empty() && (common == secret.size() || common >= kShortestStart)) {
      out += "***";
      i += common;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

[[noreturn]] void bad(std::string_view uri, const std::string& why) {
  // A URI that does not parse may be one whose "@host" is missing: then all that follows the
  // host's ':' may be the password, even when it starts like a port ("admin:2024/Summer!"),
  // so it is hidden unless it is nothing but a port. The reason may quote it too.
  std::string reason = why;
  std::string shown = masked(uri);
  const auto start = authority_start(uri);
  const auto at_sign = uri.rfind('@');
  if (const auto hidden = at_sign == std::string_view::npos || at_sign < start ? after_host_colon(uri)
                                                                               : std::string_view::npos;
      hidden != std::string_view::npos && !port_like(uri.substr(hidden))) {
    // The reason quotes pieces of it (the port, the db after '/'): hide each piece's start.
    for (std::size_t piece = hidden; piece < uri.size(); ++piece) {
      if (piece != hidden && std::string_view("/?#:").find(uri[piece - 1]) == std::string_view::npos) continue;
      reason = mask_every_start(reason, uri.substr(piece));
      // The piece alone, however short, where the reason quotes it ("port 'Sec' is not a number"
      // for "host:Sec/ret99x"): a start of fewer than 4 characters is not masked above.
      const auto end = uri.find_first_of("/?#:", piece);
      const std::string quoted =
          "'" + std::string(uri.substr(piece, end == std::string_view::npos ? end : end - piece)) + "'";
      for (auto at = reason.find(quoted); quoted.size() > 2 && at != std::string::npos;
           at = reason.find(quoted, at + 5)) {
        reason.replace(at, quoted.size(), "'***'");
      }
    }
    reason += " (what follows ':' is hidden: it may be a password)";
    shown = std::string(uri.substr(0, hidden)) + "***";
  }
  std::string message = "master URI '" + shown + "': " + reason;
  // what() is a C string: a NUL from the URI would cut the reason off. Nor should a message
  // carry terminal escapes. Control bytes are shown as '?'.
  for (char& c : message) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  throw ConfigError(message);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string percent_decode(std::string_view uri, std::string_view text, const char* what) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) bad(uri, std::string("truncated percent-escape in the ") + what);
    const int hi = hex_value(text[i + 1]);
    const int lo = hex_value(text[i + 2]);
    if (hi < 0 || lo < 0) bad(uri, std::string("bad percent-escape in the ") + what);
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace

Endpoint Endpoint::parse(std::string_view uri) {
  constexpr std::string_view kScheme = "redis://";
  constexpr std::string_view kTlsScheme = "rediss://";
  Endpoint ep;
  std::string_view rest;
  if (uri.substr(0, kScheme.size()) == kScheme) {
    rest = uri.substr(kScheme.size());
  } else if (uri.substr(0, kTlsScheme.size()) == kTlsScheme) {
    rest = uri.substr(kTlsScheme.size());
    ep.tls = true;
  } else {
    bad(uri, "must start with redis:// or rediss:// (TLS); unix sockets are not supported");
  }

  if (const auto query = rest.find_first_of("?#"); query != std::string_view::npos) {
    bad(uri, "query parameters are not supported");
  }
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    if (colon == std::string_view::npos) {
      // "redis://secret@host" is the password alone, as redis-cli -u reads it.
      ep.password = percent_decode(uri, userinfo, "password");
    } else {
      ep.user = percent_decode(uri, userinfo.substr(0, colon), "user");
      ep.password = percent_decode(uri, userinfo.substr(colon + 1), "password");
    }
  }

  std::string_view hostport = rest;
  std::string_view db_text;
  if (const auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    db_text = rest.substr(slash + 1);
  }

  std::string_view port_text;
  if (!hostport.empty() && hostport.front() == '[') {
    const auto close = hostport.find(']');
    if (close == std::string_view::npos) bad(uri, "unterminated '[' in IPv6 host");
    ep.host = std::string(hostport.substr(1, close - 1));
    const auto after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') bad(uri, "expected ':port' after ']'");
      port_text = after.substr(1);
      if (port_text.empty()) bad(uri, "empty port");
    }
  } else {
    const auto colon = hostport.rfind(':');
    if (colon != std::string_view::npos) {
      ep.host = std::string(hostport.substr(0, colon));
      port_text = hostport.substr(colon + 1);
      if (port_text.empty()) bad(uri, "empty port");
      if (ep.host.find(':') != std::string::npos) bad(uri, "IPv6 hosts must be in brackets, e.g. [::1]:6379");
    } else {
      ep.host = std::string(hostport);
    }
  }
  if (ep.host.empty()) bad(uri, "no host");
  for (const char c : ep.host) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) bad(uri, "the host has a space or a control byte");
  }

  if (!port_text.empty()) {
    long port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || end != port_text.data() + port_text.size()) {
      bad(uri, "port '" + std::string(port_text) + "' is not a number");
    }
    if (port < 1 || port > 65535) bad(uri, "port " + std::string(port_text) + " is out of range 1-65535");
    ep.port = static_cast<std::uint16_t>(port);
  }

  if (!db_text.empty()) {
    int db = 0;
    const auto [end, ec] = std::from_chars(db_text.data(), db_text.data() + db_text.size(), db);
    if (ec != std::errc() || end != db_text.data() + db_text.size() || db < 0) {
      bad(uri, "database '" + std::string(db_text) + "' is not a non-negative number");
    }
    ep.db = db;
  }
  return ep;
}

std::string Endpoint::display() const {
  // A TLS master shows its scheme, so that a result row or a warning says which transport
  // it was; a plain one keeps the short form every existing log and test knows.
  std::string out = tls ? "rediss://" : "";
  if (host.find(':') != std::string::npos) {
    out += '[';
    out += host;
    out += ']';
  } else {
    out += host;
  }
  // Appended piece by piece: GCC 12 -O2 reports a false -Wrestrict in ":" + std::string&&.
  out += ':';
  out += std::to_string(port);
  if (db != 0) {
    out += '/';
    out += std::to_string(db);
  }
  return out;
}

std::string Endpoint::mask_uri(std::string_view uri) { return masked(uri); }

std::string Endpoint::redact(std::string_view text) const {
  // What a server may echo is the password as an argument, or the start of one it cut short
  // (Redis truncates the arguments it quotes back). Masking more than that (a word that only
  // shares letters with the password) garbles the message and shows a reader who knows the
  // word what the password starts with, or, for a short one, what it is.
  constexpr std::size_t kShortestPrefix = 4;
  constexpr std::size_t kLongPassword = 8;  // no word of a message contains this by chance
  if (password.empty()) return std::string(text);
  const auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  // Redis writes a CR or LF of an echoed argument as a space (an error reply is one line).
  const auto echoes = [](char shown, char secret) {
    return shown == secret || (shown == ' ' && (secret == '\r' || secret == '\n'));
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t common = 0;
    while (common < password.size() && i + common < text.size() && echoes(text[i + common], password[common])) ++common;
    const std::size_t after = i + common;
    const bool starts_alone = i == 0 || !word_char(text[i - 1]);
    const bool whole =
        common == password.size() &&
        (password.size() >= kLongPassword || (starts_alone && (after == text.size() || !word_char(text[after]))));
    const bool cut_short = common >= kShortestPrefix && common < password.size() && starts_alone &&
                           (after == text.size() || text[after] == '\'' || text[after] == '"');
    if (whole || cut_short) {
      out += "***";
      i = after;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

}  // namespace redlock

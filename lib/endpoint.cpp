// Parsing of master URIs: redis://[user:password@]host[:port][/db].
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

// A URI without '@' may still carry a password where the port goes: "redis://admin:secret"
// (the "@host" forgotten), or "redis://:secret" cut from a list at a ',' or ' #'. Returns the
// offset after the ':' when what follows it (up to '/', '?' or '#') is not a port-like number
// (an optional '-' and 1 to 5 digits), else npos.
// A port that is not a number is then hidden too: naming it could print a password.
std::size_t unmarked_password_at(std::string_view uri) {
  std::size_t from = authority_start(uri);
  bool unterminated_ipv6 = false;
  if (from < uri.size() && uri[from] == '[') {
    const auto close = uri.find(']', from);
    unterminated_ipv6 = close == std::string_view::npos;
    if (!unterminated_ipv6) from = close;
  }
  // "[::1:6379" has colons of its own: there only the last one can start a password.
  const auto colon = unterminated_ipv6 ? uri.rfind(':') : uri.find(':', from);
  if (colon != std::string_view::npos && colon < from) return std::string_view::npos;
  if (colon == std::string_view::npos || colon + 1 >= uri.size()) return std::string_view::npos;
  const std::string_view after = uri.substr(colon + 1);
  std::string_view port = after.substr(0, after.find_first_of("/?#"));
  if (!port.empty() && port.front() == '-') port.remove_prefix(1);
  // Up to 5 digits: a port, maybe out of range. More could be a password of digits.
  const bool is_port =
      !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string_view::npos;
  return is_port ? std::string_view::npos : colon + 1;
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

[[noreturn]] void bad(std::string_view uri, const std::string& why) {
  // The reason may quote what masked() hides (a "port" that is a password): hide it there too.
  std::string reason = why;
  if (const auto hidden = uri.rfind('@') == std::string_view::npos ? unmarked_password_at(uri) : std::string_view::npos;
      hidden != std::string_view::npos) {
    Endpoint suspect;
    suspect.password = std::string(uri.substr(hidden));
    reason = suspect.redact(reason) + " (what follows ':' is hidden: it may be a password)";
  }
  std::string message = "master URI '" + masked(uri) + "': " + reason;
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
  if (uri.substr(0, kScheme.size()) != kScheme) {
    bad(uri, "must start with redis:// (rediss:// and unix sockets are not supported)");
  }
  std::string_view rest = uri.substr(kScheme.size());
  Endpoint ep;

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
  std::string out = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  out += ":" + std::to_string(port);
  if (db != 0) out += "/" + std::to_string(db);
  return out;
}

std::string Endpoint::mask_uri(std::string_view uri) { return masked(uri); }

std::string Endpoint::redact(std::string_view text) const {
  constexpr std::size_t kShortestPrefix = 4;
  if (password.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t common = 0;
    while (common < password.size() && i + common < text.size() && text[i + common] == password[common]) ++common;
    if (common == password.size() || common >= kShortestPrefix) {
      out += "***";
      i += common;
    } else {
      out.push_back(text[i++]);
    }
  }
  return out;
}

}  // namespace redlock

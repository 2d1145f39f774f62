// SPDX-License-Identifier: Apache-2.0
// fuzz/uri_fuzz.cpp — master URIs: Endpoint::parse, display, mask_uri and redact
// (include/redlock/options.h, lib/endpoint.cpp). Checked:
//   - never a crash (the sanitizers), and parse fails only with a ConfigError that quotes the
//     URI as mask_uri shows it (control bytes as '?') and says what is wrong;
//   - a parsed endpoint is in range (port 1-65535, db >= 0, a host) and round-trips:
//     parse("redis://" + display()) gives the same host, port and db and no credentials
//     (but for a host "[x" that only "redis://[[x]" gives);
//   - a password never shows: display() is exactly host:port[/db]; mask_uri() is exactly the
//     URI with the password replaced by "***"; the reason of a parse error is the same
//     whatever the password (but for the password's own faults, whose reasons quote
//     nothing); redact() leaves neither the password nor any 4+ character start of it in
//     any text,
//     while text without such a start comes back unchanged.
//
// Input layout: byte [0] even: the rest is one URI, as a user might type it. Odd: the rest
// is split at the first two NUL bytes into user, password and tail, and the URI is built as
// "redis://" + user + ":" + password + "@" + tail, so the password's text is known; what
// follows a third NUL is a server text to redact with the parsed password.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "redlock/errors.h"
#include "redlock/options.h"

namespace {

using redlock::ConfigError;
using redlock::Endpoint;

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

// Text as a parse error shows it: control bytes as '?'.
std::string printable(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

// Where redact() may mask at all: at the password's first 4 characters (or all of a shorter one).
std::string_view telltale(std::string_view password) {
  return password.substr(0, std::min<std::size_t>(4, password.size()));
}

// Endpoint::redact's promise: a password of 8+ characters is hidden wherever it occurs; any
// password is hidden as a server echoes it, quoted alone or cut short at the end (4+
// characters); a text without the password's start is left as it is.
void check_redact(const Endpoint& ep, std::string_view text) {
  const std::string out = ep.redact(text);
  const std::string& password = ep.password;
  if (password.empty()) {
    FUZZ_CHECK(out == text, "redact changed a text with no password to hide");
    return;
  }
  // Redis echoes a CR or LF as a space: redact matches it so.
  const std::string_view start = telltale(password);
  bool echoed = false;
  for (std::size_t i = 0; !echoed && i + start.size() <= text.size(); ++i) {
    echoed = std::equal(start.begin(), start.end(), text.begin() + static_cast<std::ptrdiff_t>(i),
                        [](char secret, char shown) {
                          return shown == secret || (shown == ' ' && (secret == '\r' || secret == '\n'));
                        });
  }
  if (!echoed) FUZZ_CHECK(out == text, "redact changed a text without the password in it");
  // A password with '*' in it can be spelled by the mask itself.
  if (contains(password, "*")) return;
  if (password.size() >= 8) FUZZ_CHECK(!contains(out, password), "redact left a long password in the text");
  // Echoes as Redis quotes them (a password that starts with the quote itself aside).
  if (password.front() == '\'') return;
  FUZZ_CHECK(ep.redact("'" + password + "'") == "'***'", "redact left a quoted echo of the password");
  if (password.size() > 4) {
    const std::string cut = password.substr(0, password.size() - 1);
    FUZZ_CHECK(ep.redact("'" + cut) == "'***", "redact left an echo of the password cut short");
  }
}

// The reason after "master URI '<masked>': ".
// The URI is quoted as mask_uri shows it, or, where what follows the host's ':' may be a
// password typed without its "@host" (more than a port), with all of that hidden.
std::string reason_of(const std::string& message, std::string_view uri) {
  const std::string opening = "master URI '";
  std::string head = opening + printable(Endpoint::mask_uri(uri)) + "': ";
  if (message.compare(0, head.size(), head) != 0) {
    // The URI itself may hold "***': " too: the first end that quotes a start of it up to a ':'.
    bool found = false;
    for (auto hidden = message.find("***': ", opening.size()); !found && hidden != std::string::npos;
         hidden = message.find("***': ", hidden + 1)) {
      const std::string shown = message.substr(opening.size(), hidden - opening.size());
      if (!shown.empty() && shown.back() == ':' && printable(uri).starts_with(shown)) {
        head = message.substr(0, hidden + 6);
        found = true;
      }
    }
    FUZZ_CHECK(found, "a parse error that does not quote the masked URI");
  }
  std::string reason = message.substr(head.size());
  FUZZ_CHECK(!reason.empty(), "a parse error without a reason");
  return reason;
}

// The reason parse gives for `uri`; empty if it parses.
std::string parse_reason(std::string_view uri) {
  try {
    (void)Endpoint::parse(uri);
  } catch (const ConfigError& error) {
    return reason_of(error.what(), uri);
  }
  return {};
}

void check_parsed(const Endpoint& ep) {
  FUZZ_CHECK(!ep.host.empty(), "parsed without a host");
  FUZZ_CHECK(ep.port >= 1, "parsed port 0");
  FUZZ_CHECK(ep.db >= 0, "parsed a negative db");
  // "host:port" or "host:port/db" (an IPv6 host in brackets), with "rediss://" before it for
  // a TLS master, as documented: made of the host and two numbers only, so no password can be
  // in it but as part of the host.
  const std::string display = ep.display();
  const std::string scheme = ep.tls ? "rediss://" : "";
  const std::string numbers = ":" + std::to_string(ep.port) + (ep.db != 0 ? "/" + std::to_string(ep.db) : "");
  FUZZ_CHECK(display == scheme + ep.host + numbers || display == scheme + "[" + ep.host + "]" + numbers,
             "display() is not [rediss://]host:port[/db]");
  // Where meaningful: parse takes "redis://[[x]" as host "[x", which no name or address
  // starts with and which display() cannot show in a form that parses (see README).
  if (ep.host.front() == '[' && !contains(ep.host, ":")) return;
  Endpoint again;
  try {
    again = Endpoint::parse(ep.tls ? display : "redis://" + display);
  } catch (const ConfigError&) {
    FUZZ_CHECK(false, "display() of a parsed endpoint does not parse");
  }
  FUZZ_CHECK(again.host == ep.host && again.port == ep.port && again.db == ep.db && again.tls == ep.tls,
             "parse(display()) differs");
  FUZZ_CHECK(again.user.empty() && again.password.empty(), "display() carries credentials");
  FUZZ_CHECK(again.display() == display, "display() is not stable");
}

void fuzz_raw(std::string_view uri) {
  Endpoint ep;
  try {
    ep = Endpoint::parse(uri);
  } catch (const ConfigError& error) {
    reason_of(error.what(), uri);
    return;
  }
  check_parsed(ep);
  check_redact(ep, uri);  // the URI holds the password by construction
}

void fuzz_built(std::string_view rest) {
  const auto first = rest.find('\0');
  if (first == std::string_view::npos) return;
  const auto second = rest.find('\0', first + 1);
  if (second == std::string_view::npos) return;
  const std::string_view user = rest.substr(0, first);
  const std::string_view password = rest.substr(first + 1, second - first - 1);
  std::string_view tail = rest.substr(second + 1);
  std::string_view text;
  if (const auto third = tail.find('\0'); third != std::string_view::npos) {
    text = tail.substr(third + 1);
    tail = tail.substr(0, third);
  }
  // Keep the password where the URI grammar puts it: the last '@' ends it, the first ':'
  // after the scheme starts it.
  if (contains(user, ":") || contains(tail, "@")) return;
  const std::string prefix = "redis://" + std::string(user) + ":";
  const std::string uri = prefix + std::string(password) + "@" + std::string(tail);
  const std::string masked = Endpoint::mask_uri(uri);
  FUZZ_CHECK(masked == prefix + "***@" + std::string(tail), "mask_uri is not the URI with its password masked");
  // The reason of a parse error must not depend on the password: the same URI with the
  // password "x" fails for the same reason. Only '?', '#' (read as a query) and a bad
  // percent-escape are the password's own fault, and those reasons quote nothing.
  const std::string plain = parse_reason(prefix + "x@" + std::string(tail));
  const std::string reason = parse_reason(uri);
  if (contains(password, "?") || contains(password, "#")) {
    FUZZ_CHECK(reason == "query parameters are not supported", "a query in the password, another reason");
  } else if (reason != plain) {
    FUZZ_CHECK(reason == "bad percent-escape in the password" || reason == "truncated percent-escape in the password",
               "a parse error that depends on the password");
  }
  if (!reason.empty()) return;
  const Endpoint ep = Endpoint::parse(uri);
  FUZZ_CHECK(ep.user.size() <= user.size() && ep.password.size() <= password.size(), "credentials grew in decoding");
  check_parsed(ep);
  check_redact(ep, uri);
  check_redact(ep, text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    fuzz_raw(rest);
  } else {
    fuzz_built(rest);
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// redlock/endpoint.h — one master's address and credentials, parsed from a URI.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace redlock {

// One master, parsed from `redis://[user:password@]host[:port][/db]`, or `rediss://...`
// (same grammar) for a master reached over TLS (ClientOptions::tls says how; redlock/tls.h).
// The host may be a name, an IPv4 address or a bracketed IPv6 address ([::1]).
// The port defaults to 6379 and the db to 0. User and password may be percent-encoded.
struct Endpoint {
  std::string host;
  std::uint16_t port = 6379;
  std::string user;      // empty: AUTH with the password only (the "default" user)
  std::string password;  // empty: no AUTH
  int db = 0;            // SELECT after connecting when not 0
  bool tls = false;      // rediss://: TLS, never plain TCP

  // Throws ConfigError naming the URI (password masked) and what is wrong with it.
  static Endpoint parse(std::string_view uri);

  // "host:port" or "host:port/db" (plain), "rediss://host:port[/db]" (TLS): what results and
  // logs show. Never the user or the password.
  [[nodiscard]] std::string display() const;

  // `text` (e.g. a server's error reply) with this endpoint's password masked as "***": every
  // occurrence of a password of 8 characters or more; a shorter one where it stands alone (no
  // letter, digit or '_' touching it); and 4 or more characters that start the password, stand
  // alone on the left and end at a quote or the end of the text (a server may echo a truncated
  // argument, as Redis does for an unknown command). A word that only shares letters with the
  // password is left as it is: masking it would show what the password starts with.
  [[nodiscard]] std::string redact(std::string_view text) const;

  // `uri` with its password replaced by "***", for messages about a URI that may not parse.
  [[nodiscard]] static std::string mask_uri(std::string_view uri);
};

}  // namespace redlock

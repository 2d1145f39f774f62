// SPDX-License-Identifier: Apache-2.0
// Tests for redlock::Endpoint::parse and Endpoint::display: the master URI grammar
// redis://[user:password@]host[:port][/db], its error messages, and that no password
// ever reaches an error message or a display name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "redlock/errors.h"
#include "redlock/options.h"

namespace {

using redlock::ConfigError;
using redlock::Endpoint;
using ::testing::HasSubstr;
using ::testing::Not;

// The what() of the ConfigError that parsing `uri` throws; records a failure (and returns
// an empty string) if it parses, or throws anything else.
std::string parse_error(std::string_view uri) {
  try {
    const Endpoint ep = Endpoint::parse(uri);
    ADD_FAILURE() << "Endpoint::parse('" << uri << "') did not throw; host='" << ep.host << "' port=" << ep.port
                  << " db=" << ep.db;
  } catch (const ConfigError& error) {
    return error.what();
  } catch (const std::exception& error) {
    ADD_FAILURE() << "Endpoint::parse('" << uri << "') threw a non-ConfigError: " << error.what();
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// Valid URIs

TEST(EndpointParse, HostAndPort) {
  const Endpoint ep = Endpoint::parse("redis://example.com:6380");
  EXPECT_EQ(ep.host, "example.com");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 0);
  EXPECT_EQ(ep.user, "");
  EXPECT_EQ(ep.password, "");
}

TEST(EndpointParse, Ipv4HostAndPort) {
  const Endpoint ep = Endpoint::parse("redis://127.0.0.1:7000");
  EXPECT_EQ(ep.host, "127.0.0.1");
  EXPECT_EQ(ep.port, 7000);
}

TEST(EndpointParse, PortDefaultsTo6379) {
  const Endpoint ep = Endpoint::parse("redis://cache.internal");
  EXPECT_EQ(ep.host, "cache.internal");
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(ep.db, 0);
}

TEST(EndpointParse, PortBounds) {
  EXPECT_EQ(Endpoint::parse("redis://h:1").port, 1);
  EXPECT_EQ(Endpoint::parse("redis://h:65535").port, 65535);
}

TEST(EndpointParse, Database) {
  const Endpoint ep = Endpoint::parse("redis://h:6380/3");
  EXPECT_EQ(ep.host, "h");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 3);

  const Endpoint no_port = Endpoint::parse("redis://h/12");
  EXPECT_EQ(no_port.host, "h");
  EXPECT_EQ(no_port.port, 6379);
  EXPECT_EQ(no_port.db, 12);

  EXPECT_EQ(Endpoint::parse("redis://h:6380/0").db, 0);
}

TEST(EndpointParse, UserAndPassword) {
  const Endpoint ep = Endpoint::parse("redis://alice:s3cret@db.example:6390/2");
  EXPECT_EQ(ep.user, "alice");
  EXPECT_EQ(ep.password, "s3cret");
  EXPECT_EQ(ep.host, "db.example");
  EXPECT_EQ(ep.port, 6390);
  EXPECT_EQ(ep.db, 2);
}

TEST(EndpointParse, EmptyUserWithPassword) {
  const Endpoint ep = Endpoint::parse("redis://:s3cret@h:6380");
  EXPECT_EQ(ep.user, "");
  EXPECT_EQ(ep.password, "s3cret");
  EXPECT_EQ(ep.host, "h");
  EXPECT_EQ(ep.port, 6380);
}

TEST(EndpointParse, PasswordOnly) {
  // "redis://secret@host" is the password alone (as redis-cli -u reads it), user empty.
  const Endpoint ep = Endpoint::parse("redis://secret@h");
  EXPECT_EQ(ep.user, "");
  EXPECT_EQ(ep.password, "secret");
  EXPECT_EQ(ep.host, "h");
  EXPECT_EQ(ep.port, 6379);

  const Endpoint with_port = Endpoint::parse("redis://secret@h:7001/4");
  EXPECT_EQ(with_port.user, "");
  EXPECT_EQ(with_port.password, "secret");
  EXPECT_EQ(with_port.host, "h");
  EXPECT_EQ(with_port.port, 7001);
  EXPECT_EQ(with_port.db, 4);
}

TEST(EndpointParse, PercentEncodedPassword) {
  const Endpoint ep = Endpoint::parse("redis://bob:p%40ss@h:6380");
  EXPECT_EQ(ep.user, "bob");
  EXPECT_EQ(ep.password, "p@ss");
  EXPECT_EQ(ep.host, "h");
  EXPECT_EQ(ep.port, 6380);

  // Upper- and lowercase hex, several escapes, ':' and '/' encoded.
  const Endpoint many = Endpoint::parse("redis://u%2Dx:%3a%2F%2f%41z@h");
  EXPECT_EQ(many.user, "u-x");
  EXPECT_EQ(many.password, "://Az");

  // Password-only form is decoded too.
  EXPECT_EQ(Endpoint::parse("redis://p%40ss@h").password, "p@ss");
}

TEST(EndpointParse, PasswordContainingAtSign) {
  // The last '@' ends the userinfo, so an unencoded '@' in the password still parses.
  const Endpoint ep = Endpoint::parse("redis://u:p@ss@h:6380");
  EXPECT_EQ(ep.user, "u");
  EXPECT_EQ(ep.password, "p@ss");
  EXPECT_EQ(ep.host, "h");
  EXPECT_EQ(ep.port, 6380);
}

TEST(EndpointParse, Ipv6) {
  const Endpoint ep = Endpoint::parse("redis://[::1]:6380");
  EXPECT_EQ(ep.host, "::1");
  EXPECT_EQ(ep.port, 6380);

  const Endpoint default_port = Endpoint::parse("redis://[fe80::1:2]");
  EXPECT_EQ(default_port.host, "fe80::1:2");
  EXPECT_EQ(default_port.port, 6379);

  const Endpoint full = Endpoint::parse("redis://u:pw@[2001:db8::7]:7000/5");
  EXPECT_EQ(full.user, "u");
  EXPECT_EQ(full.password, "pw");
  EXPECT_EQ(full.host, "2001:db8::7");
  EXPECT_EQ(full.port, 7000);
  EXPECT_EQ(full.db, 5);
}

TEST(EndpointParse, RedissIsTlsWithTheSameGrammar) {
  const Endpoint plain = Endpoint::parse("redis://h:6380");
  EXPECT_FALSE(plain.tls);
  const Endpoint ep = Endpoint::parse("rediss://alice:pw@[::1]:6380/3");
  EXPECT_TRUE(ep.tls);
  EXPECT_EQ(ep.host, "::1");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.user, "alice");
  EXPECT_EQ(ep.password, "pw");
  EXPECT_EQ(ep.db, 3);
  EXPECT_EQ(Endpoint::parse("rediss://h").port, 6379);
}

// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// Errors: ConfigError whose what() names the bad value

TEST(EndpointParseError, MissingScheme) {
  const std::string message = parse_error("localhost:6379");
  EXPECT_THAT(message, HasSubstr("localhost:6379"));
  EXPECT_THAT(message, HasSubstr("redis://"));

  EXPECT_THAT(parse_error("http://h:6379"), HasSubstr("http://h:6379"));
  EXPECT_THAT(parse_error("redis+tls://h:6379"), HasSubstr("redis+tls://h:6379"));
  EXPECT_THAT(parse_error(""), HasSubstr("redis://"));
}

TEST(EndpointParseError, PortZero) {
  const std::string message = parse_error("redis://h:0");
  EXPECT_THAT(message, HasSubstr("redis://h:0"));
  EXPECT_THAT(message, HasSubstr("port 0"));
}

TEST(EndpointParseError, PortTooLarge) {
  const std::string message = parse_error("redis://h:65536");
  EXPECT_THAT(message, HasSubstr("65536"));
  EXPECT_THAT(message, HasSubstr("port"));
  // More digits than a port has may be a password of digits: hidden.
  EXPECT_THAT(parse_error("redis://h:99999999999999999999"), HasSubstr("redis://h:***"));
  EXPECT_THAT(parse_error("redis://h:99999999999999999999"), Not(HasSubstr("9999")));
}

TEST(EndpointParseError, NegativePort) { EXPECT_THAT(parse_error("redis://h:-1"), HasSubstr("-1")); }

// A "port" that is not a number may be a password typed without "@host": the message says
// the port is bad but does not quote it.
TEST(EndpointParseError, PortNotANumber) {
  const std::string message = parse_error("redis://h:abc");
  EXPECT_THAT(message, HasSubstr("port '***' is not a number"));
  EXPECT_THAT(message, HasSubstr("hidden: it may be a password"));
  EXPECT_THAT(message, Not(HasSubstr("abc")));
  EXPECT_THAT(parse_error("redis://h:63a9"), HasSubstr("redis://h:***"));
  EXPECT_THAT(parse_error("redis://h: 6379"), HasSubstr("port"));
}

TEST(EndpointParseError, EmptyPort) {
  EXPECT_THAT(parse_error("redis://h:"), HasSubstr("empty port"));
  EXPECT_THAT(parse_error("redis://h:/1"), HasSubstr("empty port"));
  EXPECT_THAT(parse_error("redis://[::1]:"), HasSubstr("empty port"));
}

// Without a port the bad database is named. After "host:port" without '@' it is not: that
// may be a password of digits and more ("admin:2024/Summer!", the "@host" forgotten).
TEST(EndpointParseError, BadDatabase) {
  const std::string negative = parse_error("redis://h/-1");
  EXPECT_THAT(negative, HasSubstr("'-1'"));
  EXPECT_THAT(negative, HasSubstr("database"));
  const std::string letters = parse_error("redis://u:pw@h:6379/abc");
  EXPECT_THAT(letters, HasSubstr("'abc'"));
  EXPECT_THAT(letters, HasSubstr("database"));
  EXPECT_THAT(parse_error("redis://h/1x"), HasSubstr("'1x'"));
  const std::string after_port = parse_error("redis://h:6379/abc");
  EXPECT_THAT(after_port, HasSubstr("database '***'"));
  EXPECT_THAT(after_port, HasSubstr("hidden: it may be a password"));
  // A password of digits and more, the "@host" forgotten, whose digits read as a port out of
  // range: the reason names the port without quotes, and must not show it either.
  for (const std::string uri :
       {"redis://admin:202406/Summer!", "redis://admin:123456/0", "redis://admin:70000/Summer"}) {
    const std::string message = parse_error(uri);
    const std::string digits = uri.substr(14, 5);
    EXPECT_THAT(message, Not(HasSubstr(digits))) << uri;
    EXPECT_THAT(message, HasSubstr("hidden: it may be a password")) << uri;
  }
  // A piece of fewer than 4 characters before a '/': quoted alone in the reason (a review).
  for (const std::string uri : {"redis://host:Sec/ret99x", "redis://host:ab/Cdefgh12", "redis://host:P1/Q2/x"}) {
    const std::string message = parse_error(uri);
    const std::string piece = uri.substr(13, uri.find('/', 13) - 13);
    EXPECT_THAT(message, Not(HasSubstr("'" + piece + "'"))) << message;
    EXPECT_THAT(message, HasSubstr("hidden: it may be a password")) << uri;
  }
}

TEST(EndpointParseError, NoHost) {
  EXPECT_THAT(parse_error("redis://"), HasSubstr("no host"));
  EXPECT_THAT(parse_error("redis://:6379"), HasSubstr("no host"));
  EXPECT_THAT(parse_error("redis:///0"), HasSubstr("no host"));
  EXPECT_THAT(parse_error("redis://[]:6379"), HasSubstr("no host"));
}

TEST(EndpointParseError, UnterminatedBracket) {
  const std::string message = parse_error("redis://[::1:6379");
  EXPECT_THAT(message, HasSubstr("'['"));
  EXPECT_THAT(message, HasSubstr("[::1:6379"));
}

TEST(EndpointParseError, GarbageAfterBracket) {
  EXPECT_THAT(parse_error("redis://[::1]6379"), HasSubstr("[::1]6379"));
}

TEST(EndpointParseError, UnbracketedIpv6) {
  EXPECT_THAT(parse_error("redis://::1:6379"), HasSubstr("brackets"));
}

TEST(EndpointParseError, QueryString) {
  const std::string message = parse_error("redis://h:6379?timeout=1");
  EXPECT_THAT(message, HasSubstr("query"));  // what follows the port is hidden: it may be a password
  EXPECT_THAT(parse_error("redis://h:6379/0#frag"), HasSubstr("query"));
}

TEST(EndpointParseError, BadPercentEscape) {
  EXPECT_THAT(parse_error("redis://u:p%zzq@h"), HasSubstr("percent-escape"));
  EXPECT_THAT(parse_error("redis://u:p%4@h"), HasSubstr("percent-escape"));  // truncated
  EXPECT_THAT(parse_error("redis://u:p%@h"), HasSubstr("percent-escape"));
  EXPECT_THAT(parse_error("redis://u%g1:p@h"), HasSubstr("user"));
}

// Found by fuzz/uri_fuzz.cpp: what() is a C string, so a NUL byte in the URI cut the message
// short before its reason ("master URI 'redis://h:1" and nothing more). Control bytes are
// shown as '?', so the message says what is wrong and cannot carry terminal escapes.
TEST(EndpointParseError, ControlBytesInTheUriDoNotHideTheReason) {
  using namespace std::string_literals;
  // (A "port" that is not a number is hidden as a possible password; the reason still shows.)
  const std::string nul = parse_error("redis://h:1\0"s);
  EXPECT_THAT(nul, HasSubstr("port '***' is not a number"));
  EXPECT_THAT(parse_error("redis://hx/1\0"s), HasSubstr("database '1?'"));
  EXPECT_THAT(parse_error("redis://h\0x:1"s), HasSubstr("'redis://h?x:1': the host has a space or a control byte"));
  EXPECT_THAT(parse_error("redis://h x:1"), HasSubstr("the host has a space"));
  const std::string escape = parse_error("redis://h:\x1b[31m");
  EXPECT_THAT(escape, HasSubstr("is not a number"));
  EXPECT_THAT(escape, Not(HasSubstr("\x1b")));
}

// ---------------------------------------------------------------------------------------
// No password in error messages

struct RedactionCase {
  std::string uri;
  std::string secret;  // text that must not appear in what()
  std::string names;   // what the message must still mention
};

void expect_redacted(const std::vector<RedactionCase>& cases) {
  for (const auto& c : cases) {
    SCOPED_TRACE("uri: " + c.uri);
    const std::string message = parse_error(c.uri);
    ASSERT_FALSE(message.empty());
    EXPECT_THAT(message, Not(HasSubstr(c.secret)));
    EXPECT_THAT(message, HasSubstr("***"));
    EXPECT_THAT(message, HasSubstr(c.names));
  }
}

TEST(EndpointRedaction, UserPasswordNeverInMessage) {
  const std::string pw = "Hunter2Secret";
  expect_redacted({
      {"http://u:" + pw + "@h:6379", pw, "redis://"},
      {"redis://u:" + pw + "@h:0", pw, "port 0"},
      {"redis://u:" + pw + "@h:65536", pw, "65536"},
      {"redis://u:" + pw + "@h:abc", pw, "'abc'"},
      {"redis://u:" + pw + "@h:", pw, "empty port"},
      {"redis://u:" + pw + "@h/-1", pw, "'-1'"},
      {"redis://u:" + pw + "@h/abc", pw, "'abc'"},
      {"redis://u:" + pw + "@:6379", pw, "no host"},
      {"redis://u:" + pw + "@[::1", pw, "'['"},
      {"redis://u:" + pw + "@[::1]:0", pw, "port 0"},
      {"redis://u:" + pw + "@h?db=1", pw, "query"},
      {"redis://:" + pw + "@h:0", pw, "port 0"},
      // The password itself is malformed: neither it nor its valid prefix may leak.
      {"redis://u:" + pw + "%zz@h", pw, "percent-escape"},
      {"redis://u:" + pw + "%4@h", pw, "percent-escape"},
      // Percent-encoded password: neither the encoded nor the decoded form may leak.
      {"redis://u:Hunter%402@h:0", "Hunter%402", "port 0"},
      {"redis://u:Hunter%402@h:0", "Hunter@2", "port 0"},
      // An unencoded '@' in the password.
      {"redis://u:Hun@ter2@h:0", "Hun@ter2", "port 0"},
  });
}

TEST(EndpointRedaction, PasswordOnlyNeverInMessage) {
  const std::string pw = "Hunter2Secret";
  expect_redacted({
      {"redis://" + pw + "@h:0", pw, "port 0"},
      {"redis://" + pw + "@h:65536", pw, "65536"},
      {"redis://" + pw + "@h:abc", pw, "'abc'"},
      {"redis://" + pw + "@h:", pw, "empty port"},
      {"redis://" + pw + "@h/-1", pw, "'-1'"},
      {"redis://" + pw + "@:6379", pw, "no host"},
      {"redis://" + pw + "@", pw, "no host"},
      {"redis://" + pw + "@[::1", pw, "'['"},
      {"redis://" + pw + "@h?x=1", pw, "query"},
      {"redis://" + pw + "%zz@h", pw, "percent-escape"},
      {"http://" + pw + "@h", pw, "redis://"},
      {"rediss://" + pw + "@h:0", pw, "port 0"},
  });
}

// ---------------------------------------------------------------------------------------
// display()

TEST(EndpointDisplay, HostPortAndDb) {
  EXPECT_EQ(Endpoint::parse("redis://h").display(), "h:6379");
  EXPECT_EQ(Endpoint::parse("redis://h:6380").display(), "h:6380");
  EXPECT_EQ(Endpoint::parse("redis://h:6380/0").display(), "h:6380");
  EXPECT_EQ(Endpoint::parse("redis://h:6380/7").display(), "h:6380/7");
}

TEST(EndpointDisplay, BracketsIpv6) {
  EXPECT_EQ(Endpoint::parse("redis://[::1]:6380").display(), "[::1]:6380");
  EXPECT_EQ(Endpoint::parse("redis://[2001:db8::7]/2").display(), "[2001:db8::7]:6379/2");
  EXPECT_EQ(Endpoint::parse("redis://127.0.0.1:6380").display(), "127.0.0.1:6380");
}

TEST(EndpointDisplay, TlsShowsItsScheme) {
  EXPECT_EQ(Endpoint::parse("rediss://h:6380").display(), "rediss://h:6380");
  EXPECT_EQ(Endpoint::parse("rediss://u:Hunter2Secret@[::1]/2").display(), "rediss://[::1]:6379/2");
}

TEST(EndpointDisplay, NeverShowsPasswordOrUser) {
  const std::string pw = "Hunter2Secret";
  const std::vector<std::string> uris = {"redis://alice:" + pw + "@h:6380/1", "redis://" + pw + "@h:6380/1",
                                         "redis://:" + pw + "@[::1]:6380/1", "redis://alice:Hunter2%53ecret@h:6380/1"};
  for (const std::string& uri : uris) {
    SCOPED_TRACE(uri);
    const Endpoint ep = Endpoint::parse(uri);
    EXPECT_EQ(ep.password, pw);
    const std::string shown = ep.display();
    EXPECT_THAT(shown, Not(HasSubstr(pw)));
    EXPECT_THAT(shown, Not(HasSubstr("alice")));
    EXPECT_THAT(shown, Not(HasSubstr("@")));
    EXPECT_THAT(shown, HasSubstr(":6380/1"));
  }
}

}  // namespace

namespace {

TEST(EndpointRedact, MasksThePasswordAndEveryStartOfItFourCharactersOrLonger) {
  const redlock::Endpoint ep = redlock::Endpoint::parse("redis://app:hunter2secret@db:6379");
  EXPECT_EQ(ep.redact("with args beginning with: 'hunter2secret' "), "with args beginning with: '***' ");
  EXPECT_EQ(ep.redact("echoed 'hunt' and 'hunter2se'"), "echoed '***' and '***'");
  EXPECT_EQ(ep.redact("hun and hunter2secrethunter2secret"), "hun and ******");
  EXPECT_EQ(ep.redact("nothing secret here"), "nothing secret here");
  EXPECT_EQ(ep.redact(""), "");
  const redlock::Endpoint no_password = redlock::Endpoint::parse("redis://db:6379");
  EXPECT_EQ(no_password.redact("hunter2secret"), "hunter2secret");
  const redlock::Endpoint short_password = redlock::Endpoint::parse("redis://:pw@db:6379");
  EXPECT_EQ(short_password.redact("ERR 'pw' and 'p'"), "ERR '***' and 'p'");
}

// Masking a word that merely shares letters with the password garbles the message and shows
// what the password starts with (or, for a short one, what it is): only the password itself,
// standing alone, and a start of it cut off at a quote or the end (an echo Redis truncated)
// are masked.
TEST(EndpointRedact, WordsThatOnlyShareLettersWithThePasswordAreLeftAlone) {
  const redlock::Endpoint perm = redlock::Endpoint::parse("redis://app:permX-1234@db:6379");
  const std::string message = "not permitted: NOPERM this user has no permissions; permission check";
  EXPECT_EQ(perm.redact(message), message);
  EXPECT_EQ(perm.redact("args: 'permX-1234' 'permX-1"), "args: '***' '***");
  EXPECT_EQ(perm.redact("args: 'permX-12' "), "args: '***' ");
  EXPECT_EQ(perm.redact("the password permX-1234."), "the password ***.");
  const redlock::Endpoint x = redlock::Endpoint::parse("redis://:x@db:6379");
  EXPECT_EQ(x.redact("under the prefix 'redlock:' x"), "under the prefix 'redlock:' ***");
  EXPECT_EQ(x.redact("args: 'x' "), "args: '***' ");
  // Redis echoes a CR or LF of an argument as a space.
  const redlock::Endpoint newline = redlock::Endpoint::parse("redis://u:Summer%0A2024abc@db:6379");
  EXPECT_EQ(newline.redact("args: 'u' 'Summer 2024abc' "), "args: 'u' '***' ");
}

TEST(EndpointRedact, MaskUriHidesThePasswordOfAUriThatDoesNotParse) {
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://user:s3cr3t@host:notaport"), "redis://user:***@host:notaport");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://s3cr3t@host"), "redis://***@host");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://host:6379"), "redis://host:6379");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://host:6379/2"), "redis://host:6379/2");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://[::1]:6379"), "redis://[::1]:6379");
  // No '@': a password typed where the port goes ('@host' forgotten, or the URI cut at a
  // ',' or ' #' by whoever split a list) is still hidden.
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://admin:s3cr3t"), "redis://admin:***");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://:s3cr3t"), "redis://:***");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://admin:s3cr3t/0"), "redis://admin:***");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://host:123456"), "redis://host:***");
  EXPECT_EQ(redlock::Endpoint::mask_uri("redis://[admin:s3cr3t"), "redis://[admin:***");
}

// The error for such a URI quotes the "port" in its reason too: hidden there as well.
TEST(EndpointRedact, ParseErrorOfAUriWithoutAnAtShowsNoPassword) {
  // A password of up to 5 digits reads as a port; what follows it as a db or query.
  for (const char* uri : {"redis://admin:s3cr3tpw", "redis://:s3cr3tpw", "redis://admin:s3cr3tpw/0",
                          "redis://h:s3cr3tpw:1", "redis://admin:2024/s3cr3tpw", "redis://:1#s3cr3tpw",
                          "redis://:1?s3cr3tpw"}) {
    try {
      (void)redlock::Endpoint::parse(uri);
      ADD_FAILURE() << "parsed: " << redlock::Endpoint::mask_uri(uri);
    } catch (const redlock::ConfigError& error) {
      const std::string what = error.what();
      EXPECT_EQ(what.find("s3cr"), std::string::npos) << what;
      EXPECT_NE(what.find("***"), std::string::npos) << what;
    }
  }
}

}  // namespace

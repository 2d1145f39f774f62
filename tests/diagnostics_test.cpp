// SPDX-License-Identifier: Apache-2.0
// Warnings are bounded: at most Diagnostics::kWarningsPerWindow in a kWarningWindow, and the
// reader is told when some were not shown and how many (detail/diagnostics.h).
#include "detail/diagnostics.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "test_util.h"

namespace redlock::testing {
namespace {

using detail::Diagnostics;

std::uint64_t fake_now_ns = 0;
std::uint64_t fake_now() { return fake_now_ns; }

std::string joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& line : lines) all += line + "\n";
  return all;
}

// Every master's password is masked, whatever the order of the masters: one password inside
// another, masked first, left the rest of the longer one to be shown (a review: 'Q7x-***-vault').
TEST(DiagnosticsTest, APasswordInsideAnotherDoesNotUncoverTheRestOfIt) {
  const std::string echo = "ERR unknown command 'AUTH', with args beginning with: 'Q7x-Summer2024-vault' ";
  for (const bool short_first : {true, false}) {
    std::vector<Endpoint> endpoints = {Endpoint::parse("redis://:Summer2024@a:6379"),
                                       Endpoint::parse("redis://:Q7x-Summer2024-vault@b:6379")};
    if (!short_first) std::swap(endpoints[0], endpoints[1]);
    const Diagnostics diagnostics(endpoints, {});
    const std::string shown = diagnostics.shown(echo);
    EXPECT_EQ(shown.find("vault"), std::string::npos) << shown;
    EXPECT_EQ(shown.find("Q7x"), std::string::npos) << shown;
    EXPECT_NE(shown.find("'***'"), std::string::npos) << shown;
  }
}

TEST(DiagnosticsTest, WarningsBeyondTheLimitAreCountedAndTheCountIsShownLater) {
  std::vector<std::string> seen;
  const Endpoint endpoint = Endpoint::parse("redis://:hunter2secret@127.0.0.1:6390");
  const Diagnostics diagnostics(
      {endpoint}, [&](const std::string& text) { seen.push_back(text); }, &fake_now);
  fake_now_ns = 1'000'000'000;
  constexpr std::uint32_t kLimit = Diagnostics::kWarningsPerWindow;
  const std::uint64_t window_ns = detail::to_ns(Diagnostics::kWarningWindow);

  for (std::uint32_t i = 0; i < 3 * kLimit; ++i) {
    diagnostics.warn("flap " + std::to_string(i) + " hunter2secret");
    fake_now_ns += 1'000'000;  // 1 ms apart
  }
  ASSERT_EQ(seen.size(), kLimit) << joined(seen);
  for (std::uint32_t i = 0; i < kLimit; ++i) {
    EXPECT_EQ(seen[i].rfind("flap " + std::to_string(i), 0), 0u) << seen[i];
    EXPECT_EQ(seen[i].find("hunter2secret"), std::string::npos) << "a password shown: " << seen[i];
  }
  EXPECT_NE(seen.back().find("counted, not shown"), std::string::npos) << seen.back();
  EXPECT_EQ(seen[kLimit - 2].find("not shown"), std::string::npos) << seen[kLimit - 2];

  // Still inside the window (it began at the first warning): counted.
  fake_now_ns = 1'000'000'000 + window_ns - 1;
  diagnostics.warn("late in the window");
  ASSERT_EQ(seen.size(), kLimit) << joined(seen);

  // The window is over: shown, with how many were not.
  fake_now_ns = 1'000'000'000 + window_ns;
  diagnostics.warn("next window");
  ASSERT_EQ(seen.size(), kLimit + 1) << joined(seen);
  const std::string expected_count = "(" + std::to_string(2 * kLimit + 1) + " warnings were not shown";
  EXPECT_EQ(seen.back().rfind(expected_count, 0), 0u) << seen.back();
  EXPECT_NE(seen.back().find("next window"), std::string::npos) << seen.back();

  // The count was given once; the new window has room for the rest of its limit.
  for (std::uint32_t i = 1; i < kLimit; ++i) diagnostics.warn("again " + std::to_string(i));
  ASSERT_EQ(seen.size(), 2 * kLimit) << joined(seen);
  EXPECT_EQ(seen[kLimit + 1].rfind("again 1", 0), 0u) << seen[kLimit + 1];
  diagnostics.warn("over again");
  EXPECT_EQ(seen.size(), 2 * kLimit) << joined(seen);
}

// The limit is per source: a flapping master used up a budget shared by the whole Client, and
// another master's evicting policy was never shown (review). A warning held back returns false,
// so its caller warns about the problem again later.
TEST(DiagnosticsTest, OneSourceUsingUpItsLimitDoesNotSilenceAnother) {
  std::vector<std::string> seen;
  const Diagnostics diagnostics(
      {}, [&](const std::string& text) { seen.push_back(text); }, &fake_now);
  fake_now_ns = 5'000'000'000;
  for (std::uint32_t i = 0; i < Diagnostics::kWarningsPerWindow; ++i) {
    EXPECT_TRUE(diagnostics.warn("flap " + std::to_string(i), "a:1"));
  }
  EXPECT_FALSE(diagnostics.warn("flap again", "a:1"));
  EXPECT_TRUE(diagnostics.warn("evicting policy", "b:2")) << joined(seen);
  EXPECT_TRUE(diagnostics.warn("insecure TLS")) << joined(seen);
  ASSERT_EQ(seen.size(), Diagnostics::kWarningsPerWindow + 2) << joined(seen);
  EXPECT_EQ(seen[Diagnostics::kWarningsPerWindow], "evicting policy");
  EXPECT_NE(seen[Diagnostics::kWarningsPerWindow - 1].find("warnings about a:1 in under"), std::string::npos)
      << seen[Diagnostics::kWarningsPerWindow - 1];
  fake_now_ns += detail::to_ns(Diagnostics::kWarningWindow);
  EXPECT_TRUE(diagnostics.warn("later", "a:1"));
  EXPECT_EQ(seen.back().rfind("(1 warning about a:1 was not shown", 0), 0u) << seen.back();
}

// The warnings a Client gave (on_warning, on its loop thread), read from the test's thread.
class WarningLog {
 public:
  std::function<void(const std::string&)> hook() {
    return [this](const std::string& text) {
      const std::lock_guard lock(mutex_);
      lines_.push_back(text);
    };
  }
  std::vector<std::string> lines() const {
    const std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

// Sets `master`'s maxmemory-policy to another evicting one `flaps` times, each followed by
// `kill` (a CLIENT KILL of the Client's connection) and by an acquire that master voted in,
// which shows the new connection's handshake has read the policy.
void flap_eviction_policy(Client& client, const RedisServer& master, std::size_t index,
                          const std::vector<std::string>& kill, std::uint32_t flaps) {
  for (std::uint32_t i = 0; i < flaps; ++i) {
    master.command({"CONFIG", "SET", "maxmemory-policy", i % 2 == 0 ? "allkeys-lru" : "allkeys-lfu"});
    master.command(kill);
    const std::string resource = "flap-" + std::to_string(i);
    ASSERT_TRUE(eventually([&] {
      const Result r = client.acquire(resource);
      if (r.lock) client.release(*r.lock);
      return r.masters[index].status == MasterStatus::ok;
    })) << "flap "
        << i;
  }
}

// A master whose eviction policy changes at every reconnect (as a flapping or hostile one's
// may) warned once per reconnect, without end. Now the Client shows at most the limit.
TEST(DiagnosticsTest, AMasterFlappingItsPolicyDoesNotWarnWithoutEnd) {
  RedisServerGroup masters(3);
  auto options = options_for(masters);
  WarningLog log;
  options.on_warning = log.hook();
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  // Every flap changed the policy: the limit + 5 warnings were due, the limit's worth shown.
  flap_eviction_policy(client, masters[1], 1, {"CLIENT", "KILL", "TYPE", "normal"},
                       Diagnostics::kWarningsPerWindow + 5);
  const auto flapped = log.lines();
  ASSERT_EQ(flapped.size(), Diagnostics::kWarningsPerWindow) << joined(flapped);
  EXPECT_NE(flapped.front().find("allkeys-lru"), std::string::npos) << flapped.front();
  EXPECT_NE(flapped.back().find("counted, not shown"), std::string::npos) << flapped.back();
  // Another master's evicting policy is still shown.
  masters[2].command({"CONFIG", "SET", "maxmemory-policy", "volatile-lru"});
  masters[2].command({"CLIENT", "KILL", "TYPE", "normal"});
  ASSERT_TRUE(eventually([&] { return log.lines().size() > Diagnostics::kWarningsPerWindow; }))
      << "no warning about master 2's evicting policy";
  const std::string last = log.lines().back();
  EXPECT_NE(last.find("volatile-lru"), std::string::npos) << last;
  EXPECT_NE(last.find(masters[2].uri().substr(8)), std::string::npos) << last;
}

// Per kind too: a master whose notification permissions flapped 10 times used up its budget,
// and its evicting policy, set next, was never shown while its connection stayed up (review).
// Here the eviction policy flaps first, then the user loses release notifications there.
TEST(DiagnosticsTest, OneKindOfWarningUsingUpItsLimitDoesNotSilenceAnotherOnTheSameMaster) {
  RedisServerGroup masters(3);
  masters[1].command({"ACL", "SETUSER", "flapper", "on", ">pw-flapper", "~*", "&*", "+@all"});
  std::vector<std::string> uris = masters.uris();
  uris[1] = with_auth(uris[1], "flapper:pw-flapper");
  auto options = options_for(uris);
  WarningLog log;
  options.on_warning = log.hook();
  Client client(options);
  ASSERT_TRUE(client.wait_connected(3, 5s));
  flap_eviction_policy(client, masters[1], 1, {"CLIENT", "KILL", "USER", "flapper"},
                       Diagnostics::kWarningsPerWindow + 2);
  ASSERT_EQ(log.lines().size(), Diagnostics::kWarningsPerWindow) << joined(log.lines());
  masters[1].command({"ACL", "SETUSER", "flapper", "resetchannels"});
  masters[1].command({"CLIENT", "KILL", "USER", "flapper"});
  ASSERT_TRUE(eventually([&] { return log.lines().size() > Diagnostics::kWarningsPerWindow; }))
      << "no warning about master 1's notifications after its eviction warnings used their budget";
  const std::string last = log.lines().back();
  EXPECT_NE(last.find("publish or subscribe"), std::string::npos) << last;
}

}  // namespace
}  // namespace redlock::testing

// Least privilege: masters where the lock user is an ACL user with only what the library
// needs (docs/permissions.md). A master where that user lacks something the lock paths
// run, inside the scripts included, must never be sent a lock's SET: it is not_permitted,
// not counted, and its row names what is missing. The others decide the outcome.
#include <gtest/gtest.h>

#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include "test_util.h"

namespace redlock::testing {
namespace {

constexpr const char* kUser = "locker";
constexpr const char* kPassword = "pw-Xq83z-s3cret";

// The documented ACL (README.md "Permissions", docs/permissions.md), minus `without`:
// one rule removed (e.g. "+get"), or a key pattern replaced.
std::vector<std::string> documented_acl(const std::string& without = {}, const std::string& keys = "~redlock:*") {
  std::vector<std::string> rules = {"ACL",   "SETUSER", kUser,    "reset",       "on",      std::string(">") + kPassword,
                                    keys,    "~redlock-fence-counter", "resetchannels", "-@all",
                                    "+set",  "+get",    "+del",   "+pexpire",    "+incr",   "+eval",
                                    "+evalsha", "+script|load", "+info", "+config|get"};
  std::erase(rules, without);
  return rules;
}

std::string as_user(const std::string& uri) {
  return "redis://" + std::string(kUser) + ":" + kPassword + "@" + uri.substr(std::string("redis://").size());
}

struct Masters {
  explicit Masters(std::size_t n) : group(n) {}
  // Master i gets `rules` for the lock user.
  void set_user(std::size_t i, const std::vector<std::string>& rules) {
    const Reply reply = group[i].command(rules);
    ASSERT_EQ(reply.type, Reply::Type::status) << reply.str;
  }
  std::vector<std::string> uris() const {
    std::vector<std::string> out;
    for (const auto& uri : group.uris()) out.push_back(as_user(uri));
    return out;
  }
  RedisServerGroup group;
};

struct Warnings {
  std::mutex mutex;
  std::vector<std::string> seen;
  std::size_t count_with(const std::string& text) {
    const std::lock_guard<std::mutex> hold(mutex);
    std::size_t n = 0;
    for (const auto& w : seen) n += w.find(text) != std::string::npos ? 1u : 0u;
    return n;
  }
  std::string all() {
    const std::lock_guard<std::mutex> hold(mutex);
    std::string out;
    for (const auto& w : seen) out += w + "\n";
    return out;
  }
};

ClientOptions lock_user_options(const Masters& masters, Warnings& warnings) {
  auto options = options_for(masters.uris());
  options.on_warning = [&warnings](const std::string& warning) {
    const std::lock_guard<std::mutex> hold(warnings.mutex);
    warnings.seen.push_back(warning);
  };
  return options;
}

// Three masters: 0 and 1 with the documented ACL, 2 with `rules`. A plain (or fenced)
// acquire is granted by 0 and 1; master 2 never holds the lock's key; extend and release work.
// `named`: what the restricted row and the warning must name.
void two_good_one_restricted(const std::vector<std::string>& rules, bool fencing, const std::string& named) {
  Masters masters(3);
  masters.set_user(0, documented_acl());
  masters.set_user(1, documented_acl());
  masters.set_user(2, rules);
  Warnings warnings;
  Client client(lock_user_options(masters, warnings));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  AcquireOptions acquire;
  acquire.fencing = fencing;
  Result held;
  // A fenced acquire waits for the fencing counters' catch-up on the good masters.
  ASSERT_TRUE(eventually([&] {
    held = client.acquire("ledger", acquire);
    return held.ok();
  }, 10s)) << format_result(held);
  EXPECT_EQ(held.masters[2].status, MasterStatus::not_permitted) << format_result(held);
  EXPECT_NE(held.masters[2].error.find(named), std::string::npos) << format_result(held);
  EXPECT_EQ(held.count(MasterStatus::ok), 2u) << format_result(held);
  // The restricted master was never sent the SET (or the fenced script): no key, now or later.
  EXPECT_EQ(masters.group[2].command({"EXISTS", held.lock->key}).integer, 0) << format_result(held);
  EXPECT_EQ(holding(masters.group, held.lock->key, held.lock->token), 2u);
  const Result extended = client.extend(*held.lock);
  EXPECT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  const Result released = client.release(*held.lock);
  EXPECT_EQ(released.outcome, Outcome::released) << format_result(released);
  EXPECT_TRUE(eventually([&] { return with_key(masters.group, held.lock->key) == 0; }))
      << "a key of this lock stayed behind";
  EXPECT_EQ(format_result(held).find(kPassword), std::string::npos);
  EXPECT_EQ(warnings.all().find(kPassword), std::string::npos);
  // Warned once about this master, however many rounds it sat out.
  const std::string name = "master " + held.masters[2].endpoint;
  EXPECT_EQ(warnings.count_with(name), 1u) << warnings.all();
  EXPECT_NE(warnings.all().find(named), std::string::npos) << warnings.all();
  EXPECT_EQ(warnings.count_with("master " + held.masters[0].endpoint), 0u) << warnings.all();
}

TEST(AclTest, WithoutGetTheRestrictedMasterIsNeverSentTheSet) { two_good_one_restricted(documented_acl("+get"), false, "GET"); }
TEST(AclTest, WithoutDelTheRestrictedMasterIsNeverSentTheSet) { two_good_one_restricted(documented_acl("+del"), false, "DEL"); }
TEST(AclTest, WithoutPexpireTheRestrictedMasterIsNeverSentTheSet) {
  two_good_one_restricted(documented_acl("+pexpire"), false, "PEXPIRE");
}
TEST(AclTest, WithoutEvalshaTheRestrictedMasterIsNeverSentTheSet) {
  two_good_one_restricted(documented_acl("+evalsha"), false, "'evalsha'");
}
TEST(AclTest, WithoutScriptLoadTheRestrictedMasterIsNeverSentTheSet) {
  two_good_one_restricted(documented_acl("+script|load"), false, "'script|load'");
}
TEST(AclTest, WithoutIncrTheRestrictedMasterIsNeverSentAFencedAcquire) {
  two_good_one_restricted(documented_acl("+incr"), true, "INCR");
}
TEST(AclTest, KeyPatternNotCoveringThePrefixIsNeverSentTheSet) {
  two_good_one_restricted(documented_acl({}, "~other:*"), false, "no permissions to access one of the keys");
}

// The issue's user: SET and the script commands, but not what the scripts call inside.
TEST(AclTest, TheIssuesUserStrandsNoLock) {
  Masters masters(3);
  for (std::size_t i = 0; i < 3; ++i) {
    masters.set_user(i, {"ACL", "SETUSER", kUser, "reset", "on", std::string(">") + kPassword, "~redlock:*", "+set",
                         "+eval", "+evalsha", "+script", "+ping", "+info", "+hello", "+auth"});
  }
  Warnings warnings;
  Client client(lock_user_options(masters, warnings));
  ASSERT_TRUE(client.wait_connected(3, 5s));
  const Result result = client.acquire("ledger");
  EXPECT_FALSE(result.ok()) << "granted a lock no master can release:\n" << format_result(result);
  if (result.lock) client.release(*result.lock);
  EXPECT_EQ(with_key(masters.group, "redlock:ledger"), 0u) << format_result(result);
}

}  // namespace
}  // namespace redlock::testing

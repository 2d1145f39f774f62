// SPDX-License-Identifier: Apache-2.0
// Tests for redlock::Result and its helpers (include/redlock/result.h): to_string of every
// Outcome and MasterStatus, ok()/operator bool/count(), and format_result.
#include "redlock/result.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <set>
#include <string>

namespace {

using namespace std::chrono_literals;
using redlock::format_result;
using redlock::Lock;
using redlock::MasterResult;
using redlock::MasterStatus;
using redlock::Outcome;
using redlock::Result;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::array kOutcomes = {Outcome::acquired,         Outcome::extended,  Outcome::released,
                                  Outcome::taken,            Outcome::lost,      Outcome::quorum_unreachable,
                                  Outcome::validity_expired, Outcome::cancelled, Outcome::invalid_argument};
constexpr std::array kStatuses = {MasterStatus::ok,           MasterStatus::held_by_other, MasterStatus::not_found,
                                  MasterStatus::server_error, MasterStatus::timeout,       MasterStatus::not_connected,
                                  MasterStatus::not_counted,  MasterStatus::not_permitted, MasterStatus::pending};

// ---------------------------------------------------------------------------------------
// to_string

TEST(ToString, EveryOutcomeDistinctAndKnown) {
  std::set<std::string> names;
  for (const Outcome outcome : kOutcomes) {
    const std::string text(redlock::to_string(outcome));
    EXPECT_FALSE(text.empty());
    EXPECT_NE(text, "unknown") << "outcome " << static_cast<int>(outcome);
    names.insert(text);
  }
  EXPECT_EQ(names.size(), kOutcomes.size());
  // The enumerators are contiguous from 0, so kOutcomes covers them all.
  EXPECT_EQ(static_cast<std::size_t>(Outcome::invalid_argument) + 1, kOutcomes.size());
  EXPECT_EQ(redlock::to_string(static_cast<Outcome>(kOutcomes.size())), "unknown");
}

TEST(ToString, OutcomeNamesMatchEnumerators) {
  EXPECT_EQ(redlock::to_string(Outcome::acquired), "acquired");
  EXPECT_EQ(redlock::to_string(Outcome::taken), "taken");
  EXPECT_EQ(redlock::to_string(Outcome::quorum_unreachable), "quorum_unreachable");
  EXPECT_EQ(redlock::to_string(Outcome::invalid_argument), "invalid_argument");
}

TEST(ToString, EveryMasterStatusDistinctAndKnown) {
  std::set<std::string> names;
  for (const MasterStatus status : kStatuses) {
    const std::string text(redlock::to_string(status));
    EXPECT_FALSE(text.empty());
    EXPECT_NE(text, "unknown") << "status " << static_cast<int>(status);
    names.insert(text);
  }
  EXPECT_EQ(names.size(), kStatuses.size());
  EXPECT_EQ(static_cast<std::size_t>(MasterStatus::pending) + 1, kStatuses.size());
  EXPECT_EQ(redlock::to_string(static_cast<MasterStatus>(kStatuses.size())), "unknown");
}

TEST(ToString, MasterStatusNamesMatchEnumerators) {
  EXPECT_EQ(redlock::to_string(MasterStatus::ok), "ok");
  EXPECT_EQ(redlock::to_string(MasterStatus::held_by_other), "held_by_other");
  EXPECT_EQ(redlock::to_string(MasterStatus::not_connected), "not_connected");
  EXPECT_EQ(redlock::to_string(MasterStatus::pending), "pending");
}

// ---------------------------------------------------------------------------------------
// ok(), operator bool, count()

TEST(ResultOk, OnlySuccessOutcomesAreOk) {
  for (const Outcome outcome : kOutcomes) {
    Result result;
    result.outcome = outcome;
    const bool expected =
        outcome == Outcome::acquired || outcome == Outcome::extended || outcome == Outcome::released;
    EXPECT_EQ(result.ok(), expected) << redlock::to_string(outcome);
    EXPECT_EQ(static_cast<bool>(result), expected) << redlock::to_string(outcome);
  }
}

TEST(ResultOk, DefaultIsNotOk) {
  const Result result;
  EXPECT_FALSE(result.ok());
  EXPECT_FALSE(result);
  EXPECT_EQ(result.outcome, Outcome::cancelled);
  EXPECT_TRUE(result.masters.empty());
  EXPECT_FALSE(result.lock.has_value());
}

TEST(ResultCount, CountsEachStatus) {
  Result result;
  const std::array<MasterStatus, 7> statuses = {MasterStatus::ok,      MasterStatus::ok,
                                                MasterStatus::timeout, MasterStatus::held_by_other,
                                                MasterStatus::ok,      MasterStatus::timeout,
                                                MasterStatus::pending};
  for (std::size_t i = 0; i < statuses.size(); ++i) {
    MasterResult master;
    master.endpoint = "h:" + std::to_string(7000 + i);
    master.status = statuses[i];
    result.masters.push_back(master);
  }
  EXPECT_EQ(result.count(MasterStatus::ok), 3u);
  EXPECT_EQ(result.count(MasterStatus::timeout), 2u);
  EXPECT_EQ(result.count(MasterStatus::held_by_other), 1u);
  EXPECT_EQ(result.count(MasterStatus::pending), 1u);
  EXPECT_EQ(result.count(MasterStatus::not_found), 0u);
  EXPECT_EQ(result.count(MasterStatus::server_error), 0u);
  std::size_t total = 0;
  for (const MasterStatus status : kStatuses) total += result.count(status);
  EXPECT_EQ(total, result.masters.size());
  EXPECT_EQ(Result{}.count(MasterStatus::ok), 0u);
}

// ---------------------------------------------------------------------------------------
// format_result

Result sample_failure() {
  Result result;
  result.outcome = Outcome::quorum_unreachable;
  result.attempts = 4;
  result.message = "only 1 of 3 masters granted";
  result.masters = {
      MasterResult{"10.0.0.1:6379", MasterStatus::ok, "", 1'250us},
      MasterResult{"[::1]:6380/2", MasterStatus::server_error, "READONLY You can't write against a read only replica.",
                   900us},
      MasterResult{"cache-c.example:7001", MasterStatus::not_connected, "connection refused", 0us},
  };
  return result;
}

TEST(FormatResult, ContainsOutcomeEndpointsStatusesAndErrors) {
  const std::string text = format_result(sample_failure());
  EXPECT_THAT(text, HasSubstr("quorum_unreachable"));
  EXPECT_THAT(text, HasSubstr("4 attempts"));
  EXPECT_THAT(text, HasSubstr("only 1 of 3 masters granted"));
  EXPECT_THAT(text, HasSubstr("10.0.0.1:6379"));
  EXPECT_THAT(text, HasSubstr("[::1]:6380/2"));
  EXPECT_THAT(text, HasSubstr("cache-c.example:7001"));
  EXPECT_THAT(text, HasSubstr("ok"));
  EXPECT_THAT(text, HasSubstr("server_error"));
  EXPECT_THAT(text, HasSubstr("not_connected"));
  EXPECT_THAT(text, HasSubstr("READONLY You can't write against a read only replica."));
  EXPECT_THAT(text, HasSubstr("connection refused"));
  EXPECT_THAT(text, HasSubstr("1.250 ms"));
}

TEST(FormatResult, OneLinePerMasterInOrder) {
  const Result result = sample_failure();
  const std::string text = format_result(result);
  // Outcome line, header line, then one row per master.
  EXPECT_EQ(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')), 2 + result.masters.size());
  std::size_t previous = 0;
  for (const auto& master : result.masters) {
    const std::size_t at = text.find(master.endpoint);
    ASSERT_NE(at, std::string::npos) << master.endpoint;
    EXPECT_GT(at, previous) << master.endpoint << " out of order";
    previous = at;
    // The row holds the endpoint, its status and its error on one line.
    const std::size_t eol = text.find('\n', at);
    const std::string row = text.substr(at, eol - at);
    EXPECT_THAT(row, HasSubstr(std::string(redlock::to_string(master.status))));
    EXPECT_THAT(row, HasSubstr(master.error));
  }
}

TEST(FormatResult, SuccessShowsValidity) {
  Result result;
  result.outcome = Outcome::acquired;
  result.attempts = 1;
  result.validity = 9'876'543us;
  result.lock = Lock{};
  result.masters = {MasterResult{"h:1", MasterStatus::ok, "", 300us}, MasterResult{"h:2", MasterStatus::pending, "", 0us}};
  const std::string text = format_result(result);
  EXPECT_THAT(text, HasSubstr("acquired"));
  EXPECT_THAT(text, HasSubstr("1 attempt"));
  EXPECT_THAT(text, Not(HasSubstr("1 attempts")));
  EXPECT_THAT(text, HasSubstr("9876.543 ms"));
  EXPECT_THAT(text, HasSubstr("h:1"));
  EXPECT_THAT(text, HasSubstr("h:2"));
  EXPECT_THAT(text, HasSubstr("pending"));
}

TEST(FormatResult, EveryOutcomeAndStatusIsNamed) {
  for (const Outcome outcome : kOutcomes) {
    Result result;
    result.outcome = outcome;
    for (std::size_t i = 0; i < kStatuses.size(); ++i) {
      result.masters.push_back(MasterResult{"m" + std::to_string(i) + ":6379", kStatuses[i], "err-" + std::to_string(i), 1us});
    }
    const std::string text = format_result(result);
    EXPECT_THAT(text, HasSubstr(std::string(redlock::to_string(outcome))));
    for (std::size_t i = 0; i < kStatuses.size(); ++i) {
      EXPECT_THAT(text, HasSubstr("m" + std::to_string(i) + ":6379"));
      EXPECT_THAT(text, HasSubstr(std::string(redlock::to_string(kStatuses[i]))));
      EXPECT_THAT(text, HasSubstr("err-" + std::to_string(i)));
    }
  }
}

TEST(FormatResult, LongErrorTextIsKeptWhole) {
  Result result;
  result.outcome = Outcome::quorum_unreachable;
  const std::string long_error = "ERR " + std::string(600, 'x') + " END";
  result.masters = {MasterResult{"h:1", MasterStatus::server_error, long_error, 10us},
                    MasterResult{"h:2", MasterStatus::timeout, "", 0us}};
  const std::string text = format_result(result);
  EXPECT_THAT(text, HasSubstr(long_error));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_EQ(text.find("h:2"), text.rfind('\n', text.find("h:2")) + 3);  // h:2 starts its own row
}

}  // namespace

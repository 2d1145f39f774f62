// SPDX-License-Identifier: Apache-2.0
// Validity arithmetic with an injected clock: validity = ttl - elapsed - drift, exactly,
// and a grant whose validity would not be positive is refused and released.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "detail/boottime_clock.h"
#include "test_util.h"

namespace redlock::testing {
namespace {

// The first reading is the start of the round; every later reading is `elapsed` after it.
class ScriptedClock final : public Clock {
 public:
  explicit ScriptedClock(std::chrono::microseconds elapsed) : elapsed_(elapsed) {}
  time_point now() const override {
    return reads_.fetch_add(1) == 0 ? start_ : start_ + elapsed_;
  }
  time_point start() const { return start_; }
  int reads() const { return reads_.load(); }

 private:
  const time_point start_ = std::chrono::steady_clock::now() + std::chrono::hours(24);
  const std::chrono::microseconds elapsed_;
  mutable std::atomic<int> reads_{0};
};

// The steady clock, read `late` further on by one thread: as if that thread, a blocking
// call's caller, woke `late` after the loop thread decided.
class LateCallerClock final : public Clock {
 public:
  LateCallerClock(std::thread::id caller, std::chrono::milliseconds late) : caller_(caller), late_(late) {}
  time_point now() const override {
    const auto now = std::chrono::steady_clock::now();
    return std::this_thread::get_id() == caller_ ? now + late_ : now;
  }

 private:
  const std::thread::id caller_;
  const std::chrono::milliseconds late_;
};

class ValidityTest : public ::testing::Test {
 protected:
  ValidityTest() : masters_(3) {}
  RedisServerGroup masters_;
};

TEST_F(ValidityTest, GrantedValidityIsTtlMinusElapsedMinusDrift) {
  auto clock = std::make_shared<ScriptedClock>(300ms);
  auto options = options_for(masters_);
  options.ttl = 1000ms;
  options.drift_factor = 0.01;  // drift = 1000 ms * 0.01 + 2 ms = 12 ms
  options.drift_constant = 2ms;
  options.clock = clock;
  Client client(options);
  const Result result = client.acquire("exact");
  ASSERT_EQ(result.outcome, Outcome::acquired) << format_result(result);
  EXPECT_EQ(result.validity, std::chrono::microseconds(1000'000 - 300'000 - 12'000));
  EXPECT_EQ(result.lock->started, clock->start());
  EXPECT_EQ(result.lock->deadline, clock->start() + 1000ms - 12ms);
}

TEST_F(ValidityTest, FractionalDriftIsRoundedUpNeverDown) {
  auto clock = std::make_shared<ScriptedClock>(100ms);
  auto options = options_for(masters_);
  options.ttl = 1234ms;  // drift = 12.34 ms + 2 ms
  options.clock = clock;
  Client client(options);
  const Result result = client.acquire("fraction");
  ASSERT_TRUE(result) << format_result(result);
  EXPECT_EQ(client.drift(1234ms), std::chrono::microseconds(14'340));
  EXPECT_EQ(result.validity, std::chrono::microseconds(1'234'000 - 100'000 - 14'340));
}

TEST_F(ValidityTest, AGrantWithNoValidityLeftIsRefusedAndReleased) {
  auto clock = std::make_shared<ScriptedClock>(59400ms);  // 60000 - 59400 - 602 = -2 ms
  auto options = options_for(masters_);
  options.ttl = 60000ms;  // expiry cannot pass for a release while the test waits
  options.max_lock_ttl = 60000ms;
  options.clock = clock;
  Client client(options);
  const Result result = client.acquire("too-slow");
  EXPECT_EQ(result.outcome, Outcome::validity_expired) << format_result(result);
  EXPECT_FALSE(result.lock.has_value());
  EXPECT_NE(result.message.find("validity"), std::string::npos);
  // The quorum did grant in Redis; the refused grant must be released, not left to expire.
  EXPECT_TRUE(eventually([&] { return with_key(masters_, "redlock:too-slow") == 0; }, 10s));
}

TEST_F(ValidityTest, ValidityExactlyAtTheMinimumIsRefused) {
  auto clock = std::make_shared<ScriptedClock>(488ms);  // 1000 - 488 - 12 = 500 ms
  auto options = options_for(masters_);
  options.ttl = 1000ms;
  options.min_validity = 500ms;
  options.clock = clock;
  Client client(options);
  const Result result = client.acquire("edge");
  EXPECT_EQ(result.outcome, Outcome::validity_expired) << format_result(result);
}

TEST_F(ValidityTest, ExtendRecomputesValidityFromItsOwnStart) {
  auto options = options_for(masters_);
  options.ttl = 1000ms;
  Client plain(options);
  const Result held = plain.acquire("renew");
  ASSERT_TRUE(held);

  // A second client on a scripted clock extends the same lock: the extend's own start is
  // the clock's first reading, its decision 200 ms later.
  auto clock = std::make_shared<ScriptedClock>(200ms);
  options.clock = clock;
  Client scripted(options);
  Lock lock = *held.lock;
  // Not expired at the extend's start on this clock, and earlier than what the extend
  // computes (an extend's deadline is the later of the two: it never shortens).
  lock.deadline = clock->start() + 1ms;
  const Result extended = scripted.extend(lock, 5000ms);
  ASSERT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  EXPECT_EQ(extended.validity, std::chrono::microseconds(5'000'000 - 200'000 - 52'000));
}

// A blocking call hands its Result from the loop thread to the caller's, which may wake long
// after the decision: the validity it reports is what is left when it returns, so that the
// time the caller's thread took to wake is never counted as held time.
TEST_F(ValidityTest, ABlockingCallReportsTheValidityLeftWhenItReturns) {
  auto options = options_for(masters_);
  options.ttl = 1000ms;
  options.drift_factor = 0.01;  // drift 12 ms
  options.drift_constant = 2ms;
  options.clock = std::make_shared<LateCallerClock>(std::this_thread::get_id(), 400ms);
  Client client(options);
  const Result acquired = client.acquire("late-wake");
  ASSERT_EQ(acquired.outcome, Outcome::acquired) << format_result(acquired);
  EXPECT_LE(acquired.validity, 1000ms - 12ms - 400ms);
  EXPECT_GT(acquired.validity, 0ms);
  const Result extended = client.extend(*acquired.lock);
  ASSERT_EQ(extended.outcome, Outcome::extended) << format_result(extended);
  EXPECT_LE(extended.validity, 1000ms - 12ms - 400ms);
  EXPECT_GT(extended.validity, 0ms);
  EXPECT_TRUE(client.release(*extended.lock));

  // Woken after the deadline: nothing is left to report.
  options.clock = std::make_shared<LateCallerClock>(std::this_thread::get_id(), 2000ms);
  Client later(options);
  const Result gone = later.acquire("late-wake-gone");
  ASSERT_EQ(gone.outcome, Outcome::acquired) << format_result(gone);
  EXPECT_EQ(gone.validity, 0ms);
  EXPECT_EQ(later.remaining(*gone.lock), 0ms);
  EXPECT_TRUE(later.release(*gone.lock));
}

// The default validity clock is steady_clock's time base while the machine does not sleep:
// Lock instants compare with steady_clock::now() then (client.h, clock.h).
TEST(SteadyClockTest, ReadsSteadyClockTimeUntilTheMachineSleeps) {
  const SteadyClock clock;
  for (int i = 0; i < 1000; ++i) {
    const auto before = std::chrono::steady_clock::now();
    const auto read = clock.now();
    const auto after = std::chrono::steady_clock::now();
    ASSERT_GE(read, before - 1ms);
    ASSERT_LE(read, after + 1ms);
  }
}

// A suspend played on the kernel clocks a BoottimeClock reads: CLOCK_MONOTONIC stops for the
// time slept (Linux stops it during a suspend to RAM or disk), CLOCK_BOOTTIME does not.
class SleepingKernel {
 public:
  std::chrono::nanoseconds read(clockid_t id) const {
    const auto now = detail::BoottimeClock::read_kernel_clock(id);
    return id == CLOCK_MONOTONIC ? now - std::chrono::nanoseconds(slept_ns.load()) : now;
  }
  std::atomic<long long> slept_ns{0};
};

// A machine that slept past a lock's ttl: the masters counted the time and granted the lock to
// another Client; the holder's validity must count it too. On CLOCK_MONOTONIC (steady_clock,
// the default clock before) the holder read 983 ms left of a 1 s lock, 1.2 s after its
// grant, while the other Client held it.
TEST_F(ValidityTest, AHolderWhoseMachineSleptPastTheTtlHasNoValidityLeft) {
  auto kernel = std::make_shared<SleepingKernel>();
  auto options = options_for(masters_);
  options.ttl = 1000ms;
  options.clock = std::make_shared<detail::BoottimeClock>([kernel](clockid_t id) { return kernel->read(id); });
  Client sleeper(options);
  const Result held = sleeper.acquire("slept");
  ASSERT_EQ(held.outcome, Outcome::acquired) << format_result(held);
  EXPECT_GT(sleeper.remaining(*held.lock), 900ms);

  // The sleep: nothing of the sleeper runs (no lease, no call), its CLOCK_MONOTONIC stands still.
  std::this_thread::sleep_for(1200ms);
  kernel->slept_ns = std::chrono::nanoseconds(1200ms).count();

  options.clock = nullptr;
  Client other(options);
  const Result taken = other.acquire("slept");
  ASSERT_EQ(taken.outcome, Outcome::acquired) << format_result(taken);
  EXPECT_EQ(sleeper.remaining(*held.lock), 0ms)
      << "the sleeper still reads validity while another Client holds the lock";
  EXPECT_GE(sleeper.now(), held.lock->deadline);
  EXPECT_TRUE(other.release(*taken.lock));
}

}  // namespace
}  // namespace redlock::testing

// SPDX-License-Identifier: Apache-2.0
// redlock::chaos::ClockControl — drives the LD_PRELOAD clock shim (chaos/clock_shim) that
// moves one redis-server's wall clock: jump it forward, or make it run fast (or slow).
//
// The shim rewrites gettimeofday(), time() and clock_gettime(CLOCK_REALTIME[_COARSE]) in
// the process it is preloaded into; CLOCK_MONOTONIC is untouched. Redis expires keys by
// the wall clock, so a forward jump or a fast clock expires keys early on that server only.
//
// Usage (one ClockControl per server whose clock should move):
//
//   redlock::chaos::ClockControl clock(out_dir + "/clock-2");
//   support::RedisServerOptions options;
//   options.environment = clock.server_environment();   // LD_PRELOAD + REDLOCK_CLOCK_FILE
//   support::RedisServer server(options);
//   clock.jump(30s);         // server's wall clock is now 30 s ahead
//   clock.set_rate(10.0);    // ... and from now on runs 10x as fast
//   clock.reset_rate();      // back to 1x; the offset gained so far stays
//   clock.reset();           // back to the real clock (a backward jump by offset())
//
// Changes take effect at the server's next clock read: no signal, no restart. The file
// outlives restart() of the server, so a restarted server comes back with the same clock.
//
// Threading: one thread at a time per ClockControl (the harness's fault thread). The
// processes reading the file never block on it.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

struct redlock_clock_file;  // chaos/clock_shim/clock_file.h

namespace redlock::chaos {

// Absolute path of the built shim (libredlock_clock_shim.so), compiled in at build time.
std::string clock_shim_path();

class ClockControl {
 public:
  // Creates (or resets) the control file at `path` — made absolute against the current
  // directory, since redis changes its own — with the identity clock: offset 0, rate 1.
  // The shim maps the file when the server starts, so create the ClockControl first.
  // Throws std::system_error if the file cannot be created or mapped.
  explicit ClockControl(std::string path);
  // Unmaps and removes the file. A server that still maps it keeps its last clock; one
  // started or restarted afterwards runs on the real clock.
  ~ClockControl();

  ClockControl(const ClockControl&) = delete;
  ClockControl& operator=(const ClockControl&) = delete;
  ClockControl(ClockControl&&) = delete;
  ClockControl& operator=(ClockControl&&) = delete;

  const std::string& path() const noexcept { return path_; }
  // "REDLOCK_CLOCK_FILE=<path>"
  std::string env_entry() const;
  // {"LD_PRELOAD=<clock_shim_path()>", env_entry()}: what RedisServerOptions::environment
  // needs for a server driven by this control.
  std::vector<std::string> server_environment() const;

  // The fake clock jumps by `forward` now (negative: backward); the rate is unchanged.
  void jump(std::chrono::nanoseconds forward);
  // From now on the fake clock advances `rate` fake seconds per real second, continuing
  // from where it is (no jump). Throws std::invalid_argument unless 0 < rate < infinity.
  void set_rate(double rate);
  // set_rate(1.0): the offset reached so far stays.
  void reset_rate();
  // Back to the real clock: offset 0, rate 1.
  void reset();

  double rate() const noexcept { return rate_; }
  // Fake minus real clock, now.
  std::chrono::nanoseconds offset() const;

 private:
  void publish();

  std::string path_;
  redlock_clock_file* file_ = nullptr;
  // The writer's copy of what the file holds (this object is the only writer).
  std::int64_t anchor_real_ns_ = 0;
  std::int64_t anchor_fake_ns_ = 0;
  double rate_ = 1.0;
};

}  // namespace redlock::chaos

// SPDX-License-Identifier: Apache-2.0
// chaos/config.h — what one redlock_chaos run does: the command line, parsed and checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "redlock/options.h"

namespace redlock::chaos {

inline constexpr int kMaxWorkers = 16;
inline constexpr std::size_t kMaxMasters = 9;
inline constexpr const char* kResource = "chaos";

struct Config {
  // quorum | single | lease | failover | get-then-del | getset-timestamp | setnx-expire
  std::string strategy = "quorum";
  // none | minority-freeze | majority-freeze | minority-restart | majority-restart | paused-holder |
  // minority-partition | bridge-partition | slow-minority | clock-faults | clock-jump-k3
  std::string scenario = "none";
  std::uint64_t seed = 1;
  double duration_s = 10;
  long grants = 0;  // stop early once this many grants were made (0: no limit)
  std::string out;
  std::size_t n = 5;
  int workers = 3;
  bool fencing = false;
  bool restart_guard = true;
  bool aof = false;  // masters keep an append-only file, fsync always: a restart remembers keys
  Milliseconds ttl{0};   // 0: the strategy's default
  Milliseconds hold{0};  // 0: the strategy's default (lease: each grant holds [hold, 2 hold))
  Milliseconds skew{0};  // getset-timestamp: client 0's clock runs this far ahead
  std::vector<std::string> expects;
  long min_grants = 1;
  // Quorum strategy: a grant is used only if at least this many masters hold its token when
  // read back right after it (0: every grant is used). Scenarios whose claim is about a
  // holder that locked more than a quorum (clock-faults) need it: contention alone makes
  // grants on exactly a quorum, which one early-expiring master may break (DESIGN.md).
  std::size_t min_holders = 0;
  bool timeline = true;  // write timeline.svg
  // Library strategies: the masters listen with TLS only (a throw-away CA and server
  // certificate made at run start), the clients use rediss:// URIs and trust that CA.
  bool tls = false;

  // The library strategies (quorum, single, lease) run redlock::Client; the others use hiredis.
  [[nodiscard]] bool library() const { return strategy == "quorum" || strategy == "single" || strategy == "lease"; }
};

// Parses argv; prints usage and exits with status 2 on a bad option or value, naming it.
[[nodiscard]] Config parse_args(int argc, char** argv);

// Prints `message` and the usage to stderr and exits with status 2.
[[noreturn]] void usage(const std::string& message);

}  // namespace redlock::chaos

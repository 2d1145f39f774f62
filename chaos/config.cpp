// SPDX-License-Identifier: Apache-2.0
#include "config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace redlock::chaos {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kStrategies{"quorum",       "single",           "lease",            "failover",
                                           "get-then-del", "getset-timestamp", "setnx-expire"};
const std::vector<std::string> kScenarios{"none",          "minority-freeze",    "majority-freeze",  "minority-restart",
                                          "majority-restart", "paused-holder",  "minority-partition",
                                          "bridge-partition", "slow-minority",  "clock-faults",
                                          "clock-jump-k3"};

bool one_of(const std::string& value, const std::vector<std::string>& allowed) {
  return std::find(allowed.begin(), allowed.end(), value) != allowed.end();
}

template <class T, class Parse>
T number(const std::string& option, const std::string& text, Parse parse) {
  try {
    std::size_t used = 0;
    const T value = parse(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing characters");
    return value;
  } catch (const std::exception&) {
    usage(option + " needs a number, got '" + text + "'");
  }
}

long integer(const std::string& option, const std::string& text) {
  return number<long>(option, text, [](const std::string& s, std::size_t* used) { return std::stol(s, used); });
}

}  // namespace

void usage(const std::string& message) {
  std::fprintf(stderr,
               "%s\nusage: redlock_chaos [--strategy quorum|single|lease|failover|get-then-del|getset-timestamp|\n"
               "                         setnx-expire]\n"
               "  [--scenario none|minority-freeze|majority-freeze|minority-restart|majority-restart|paused-holder|\n"
               "              minority-partition|bridge-partition|slow-minority|clock-faults|clock-jump-k3]\n"
               "  [--seed S] [--duration SECONDS] [--grants N] [--out DIR] [--n MASTERS] [--workers W]\n"
               "  [--fencing] [--no-restart-guard] [--aof] [--ttl MS] [--hold MS] [--skew MS] [--min-grants N]\n"
               "  [--min-holders K] [--tls]\n"
               "  [--no-timeline]\n"
               "  [--expect clean|violation:KIND|no-violation:KIND|late-write-rejected|late-write-accepted|\n"
               "            stall:MS|loss-signalled]...\n"
               "KIND: mutual_exclusion, oracle, fencing, unsignalled_overrun, late_loss_signal\n",
               message.c_str());
  std::exit(2);
}

Config parse_args(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + a);
      return argv[++i];
    };
    if (a == "--strategy") c.strategy = value();
    else if (a == "--scenario") c.scenario = value();
    else if (a == "--seed") c.seed = static_cast<std::uint64_t>(integer(a, value()));
    else if (a == "--duration") {
      c.duration_s = number<double>(a, value(), [](const std::string& s, std::size_t* used) {
        return std::stod(s, used);
      });
    } else if (a == "--grants") c.grants = integer(a, value());
    else if (a == "--out") c.out = value();
    else if (a == "--n") c.n = static_cast<std::size_t>(integer(a, value()));
    else if (a == "--workers") c.workers = static_cast<int>(integer(a, value()));
    else if (a == "--fencing") c.fencing = true;
    else if (a == "--no-restart-guard") c.restart_guard = false;
    else if (a == "--aof") c.aof = true;
    else if (a == "--ttl") c.ttl = Milliseconds(integer(a, value()));
    else if (a == "--hold") c.hold = Milliseconds(integer(a, value()));
    else if (a == "--skew") c.skew = Milliseconds(integer(a, value()));
    else if (a == "--expect") c.expects.push_back(value());
    else if (a == "--min-grants") c.min_grants = integer(a, value());
    else if (a == "--min-holders") c.min_holders = static_cast<std::size_t>(integer(a, value()));
    else if (a == "--no-timeline") c.timeline = false;
    else if (a == "--tls") c.tls = true;
    else if (a == "--help" || a == "-h") usage("");
    else usage("unknown option '" + a + "'");
  }
  if (!one_of(c.strategy, kStrategies)) usage("bad --strategy '" + c.strategy + "'");
  if (!one_of(c.scenario, kScenarios)) usage("bad --scenario '" + c.scenario + "'");
  if (c.workers < 2 || c.workers > kMaxWorkers) usage("--workers must be 2..16, got " + std::to_string(c.workers));
  if (c.duration_s <= 0 || c.duration_s > 3600) usage("--duration must be in (0, 3600], got " + std::to_string(c.duration_s));
  if (c.grants < 0) usage("--grants must be >= 0, got " + std::to_string(c.grants));
  if (c.strategy == "single") c.n = 1;
  if (c.library() && (c.n < 1 || c.n > kMaxMasters)) usage("--n must be 1..9, got " + std::to_string(c.n));
  if (!c.library()) {
    if (c.fencing) usage("--fencing needs the library (quorum, single or lease), not --strategy " + c.strategy);
    if (c.scenario != "none") {
      usage("--strategy " + c.strategy + " brings its own fault; use --scenario none, not " + c.scenario);
    }
  }
  if (c.min_holders > 0 && (c.strategy != "quorum" || c.min_holders > c.n)) {
    usage("--min-holders must be 0..--n (" + std::to_string(c.n) + ") with --strategy quorum, got " +
          std::to_string(static_cast<long>(c.min_holders)) + " with " + c.strategy);
  }
  if (c.tls && !c.library()) usage("--tls needs the library (quorum, single or lease), not --strategy " + c.strategy);
  // The read-back connections of --min-holders are plain hiredis (0.14: no TLS).
  if (c.tls && c.min_holders > 0) usage("--tls cannot be combined with --min-holders (its read-back is plain TCP)");
  if (c.scenario == "clock-jump-k3" && c.n != 5) usage("--scenario clock-jump-k3 needs --n 5, got " + std::to_string(c.n));
  if (c.ttl.count() == 0) {
    if (c.strategy == "failover") c.ttl = 2500ms;
    else if (c.strategy == "get-then-del") c.ttl = 100ms;
    else if (c.strategy == "getset-timestamp" || c.strategy == "setnx-expire") c.ttl = 200ms;
    else if (c.strategy == "lease") c.ttl = 300ms;
    else c.ttl = 1000ms;
  }
  if (c.hold.count() == 0) {
    if (c.strategy == "get-then-del") c.hold = c.ttl - 10ms;
    else if (c.strategy == "getset-timestamp") c.hold = c.ttl * 3 / 4;
    else if (c.strategy == "failover") c.hold = 10ms;
    else if (c.strategy == "lease") c.hold = 1000ms;
    else c.hold = 20ms;
  }
  if (c.ttl.count() < 10 || c.ttl.count() > 600'000) usage("--ttl must be 10..600000 ms, got " + std::to_string(c.ttl.count()));
  // A lease outlives its ttl by renewing; every other strategy holds within one ttl.
  if (c.strategy == "lease") {
    if (c.hold.count() < 0 || c.hold.count() > 60'000) usage("--hold must be 0..60000 ms, got " + std::to_string(c.hold.count()));
  } else if (c.hold.count() < 0 || c.hold >= c.ttl) {
    usage("--hold must be >= 0 and below the ttl (" + std::to_string(c.ttl.count()) + " ms), got " +
          std::to_string(c.hold.count()));
  }
  if (c.skew.count() == 0 && c.strategy == "getset-timestamp") c.skew = c.ttl / 2;
  if (c.out.empty()) c.out = "/tmp/redlock-chaos-" + std::to_string(::getpid());
  return c;
}

}  // namespace redlock::chaos

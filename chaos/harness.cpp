// redlock_chaos — runs one strategy under one fault scenario, records a history, checks it.
//
// The parent starts its own redis-servers on 127.0.0.1 (lock masters, a replica for the
// failover strategy, and one server for the fenced store), forks W client processes, and
// injects faults from a seeded RNG while they run. Each client loops: acquire -> enter the
// oracle -> hold -> write to the store (fenced when --fencing) -> leave -> release, writing
// every step to its own JSON-lines history. At the end the parent merges the histories,
// runs the checker, prints a table and writes report.json. Exit status: 0 when every
// --expect holds, 1 when one does not, 2 on a setup error.
//
// Forked clients talk to Redis by address only (the library, FencedStore or hiredis) and
// leave by _exit(): they never touch the parent's RedisServer objects.
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "checker.h"
#include "history.h"
#include "redlock/redlock.h"
#include "support/fenced_store.h"
#include "support/redis_server.h"

namespace redlock::chaos {
namespace {

using namespace std::chrono_literals;
using support::RedisServer;
using support::RedisServerOptions;
using support::Reply;

constexpr int kMaxWorkers = 16;
constexpr const char* kResource = "chaos";

struct Config {
  std::string strategy = "quorum";  // quorum | single | failover | get-then-del
  std::string scenario = "none";    // none | minority-freeze | minority-restart | paused-holder
  std::uint64_t seed = 1;
  double duration_s = 10;
  long grants = 0;  // stop early once this many grants were made (0: no limit)
  std::string out;
  std::size_t n = 5;
  int workers = 3;
  bool fencing = false;
  bool restart_guard = true;
  Milliseconds ttl{0};   // 0: the strategy's default
  Milliseconds hold{0};  // 0: the strategy's default
  std::vector<std::string> expects;
  long min_grants = 1;
};

struct Slot {
  std::atomic<int> pid{0};
  std::atomic<int> inside{0};
  std::atomic<std::int64_t> entered_ns{0};
};

// Lives in MAP_SHARED memory: every process sees the same atomics.
struct Shared {
  std::atomic<bool> stop{false};
  std::atomic<long> grants{0};
  std::atomic<long> failures{0};
  std::atomic<long> live_conflicts{0};
  std::atomic<int> inside{0};        // the oracle: how many holders are inside now
  std::atomic<int> inside_last{-1};  // who entered last
  std::atomic<int> master_port{0};   // failover / get-then-del: where clients go
  std::atomic<bool> long_hold{false};    // failover: a grant made now holds long
  std::atomic<bool> gate_closed{false};  // failover: clients do not try to acquire
  std::atomic<int> holding{0};           // failover: grants not yet released
  Slot slots[kMaxWorkers];
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");
static_assert(std::atomic<int>::is_always_lock_free, "shared-memory atomics must be lock-free");

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "%s\nusage: redlock_chaos [--strategy quorum|single|failover|get-then-del]\n"
               "  [--scenario none|minority-freeze|minority-restart|paused-holder] [--seed S]\n"
               "  [--duration SECONDS] [--grants N] [--out DIR] [--n MASTERS] [--workers W] [--fencing]\n"
               "  [--no-restart-guard] [--ttl MS] [--hold MS] [--min-grants N]\n"
               "  [--expect clean|violation:KIND|no-violation:KIND|late-write-rejected|late-write-accepted]...\n"
               "KIND: mutual_exclusion, oracle, fencing\n",
               message);
  std::exit(2);
}

Config parse_args(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--strategy") c.strategy = value();
    else if (a == "--scenario") c.scenario = value();
    else if (a == "--seed") c.seed = std::stoull(value());
    else if (a == "--duration") c.duration_s = std::stod(value());
    else if (a == "--grants") c.grants = std::stol(value());
    else if (a == "--out") c.out = value();
    else if (a == "--n") c.n = std::stoul(value());
    else if (a == "--workers") c.workers = std::stoi(value());
    else if (a == "--fencing") c.fencing = true;
    else if (a == "--no-restart-guard") c.restart_guard = false;
    else if (a == "--ttl") c.ttl = Milliseconds(std::stol(value()));
    else if (a == "--hold") c.hold = Milliseconds(std::stol(value()));
    else if (a == "--expect") c.expects.push_back(value());
    else if (a == "--min-grants") c.min_grants = std::stol(value());
    else if (a == "--help" || a == "-h") usage("");
    else usage(("unknown option " + a).c_str());
  }
  const std::vector<std::string> strategies{"quorum", "single", "failover", "get-then-del"};
  const std::vector<std::string> scenarios{"none", "minority-freeze", "minority-restart", "paused-holder"};
  if (std::find(strategies.begin(), strategies.end(), c.strategy) == strategies.end()) usage("bad --strategy");
  if (std::find(scenarios.begin(), scenarios.end(), c.scenario) == scenarios.end()) usage("bad --scenario");
  if (c.workers < 2 || c.workers > kMaxWorkers) usage("--workers must be 2..16");
  if (c.duration_s <= 0 || c.duration_s > 3600) usage("--duration must be in (0, 3600]");
  if (c.strategy == "single") c.n = 1;
  if (c.strategy == "quorum" && (c.n < 1 || c.n > 9)) usage("--n must be 1..9");
  if (c.strategy == "failover" || c.strategy == "get-then-del") {
    if (c.fencing) usage("--fencing needs the library (quorum or single)");
    if (c.scenario != "none") usage("failover and get-then-del bring their own fault; use --scenario none");
  }
  if (c.ttl.count() == 0) {
    c.ttl = c.strategy == "failover" ? 2500ms : c.strategy == "get-then-del" ? 100ms : 1000ms;
  }
  if (c.hold.count() == 0) {
    c.hold = c.strategy == "get-then-del" ? c.ttl - 10ms : c.strategy == "failover" ? 10ms : 20ms;
  }
  if (c.out.empty()) c.out = "/tmp/redlock-chaos-" + std::to_string(::getpid());
  return c;
}

std::string hex_token(std::mt19937_64& rng) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64, rng(), rng());
  return buf;
}

// ---- the oracle: a harness-owned resource only one holder may be inside ----

class Oracle {
 public:
  Oracle(Shared& shared, int me, HistoryWriter& history) : shared_(shared), me_(me), history_(history) {}

  void enter(const Event& base) {
    const int before = shared_.inside.fetch_add(1);
    const int last = shared_.inside_last.exchange(me_);
    Slot& slot = shared_.slots[me_];
    slot.entered_ns.store(monotonic_ns());
    slot.inside.store(1);
    Event e = base;
    e.type = EventType::enter;
    e.t_ns = monotonic_ns();
    history_.write(e);
    if (before > 0) {
      shared_.live_conflicts.fetch_add(1);
      e.type = EventType::oracle_conflict;
      e.detail = "entered while " + std::to_string(before) + " other holder(s) inside (last to enter: process " +
                 std::to_string(last) + ")";
      history_.write(e);
    }
  }

  void leave(const Event& base) {
    Event e = base;
    e.type = EventType::leave;
    e.t_ns = monotonic_ns();
    history_.write(e);
    shared_.slots[me_].inside.store(0);
    shared_.inside.fetch_sub(1);
  }

 private:
  Shared& shared_;
  int me_;
  HistoryWriter& history_;
};

void hold_for(Milliseconds hold) { std::this_thread::sleep_for(hold); }

// Writes to the store; the write event carries the lease's deadline so the checker can tell
// late writes.
void store_write(const support::FencedStore& store, HistoryWriter& history, const Event& base, int me) {
  Event e = base;
  e.invoke_ns = monotonic_ns();
  bool accepted = false;
  try {
    accepted = store.write(base.fence, "process " + std::to_string(me) + " token " + base.token);
  } catch (const std::exception& ex) {
    e.detail = std::string("store error: ") + ex.what();
  }
  e.t_ns = monotonic_ns();
  e.type = accepted ? EventType::write_accepted : EventType::write_rejected;
  history.write(e);
}

// ---- client processes ----

struct WorkerContext {
  const Config& config;
  Shared& shared;
  int me;
  std::string history_path;
  std::vector<std::string> masters;  // library strategies
  std::uint16_t store_port;
};

// quorum / single: the library, through its public API only.
void library_worker(const WorkerContext& w) {
  HistoryWriter history(w.history_path);
  ClientOptions options;
  options.masters = w.masters;
  options.ttl = w.config.ttl;
  options.command_timeout = 100ms;
  options.retry_delay = 5ms;
  options.retry_jitter = 4ms;
  options.reconnect_min = 20ms;
  options.reconnect_max = 200ms;
  options.restart_guard = w.config.restart_guard;
  options.on_warning = [](const std::string&) {};
  Client client(options);
  client.wait_connected(w.masters.size(), 2000ms);
  const support::FencedStore store("127.0.0.1", w.store_port, "chaos");
  Oracle oracle(w.shared, w.me, history);
  AcquireOptions acquire;
  acquire.fencing = w.config.fencing;
  acquire.retry_count = -1;
  acquire.wait = 300ms;  // come back now and then to look at the stop flag
  while (!w.shared.stop.load()) {
    Event base;
    base.process = w.me;
    base.resource = kResource;
    base.type = EventType::acquire_invoke;
    base.t_ns = monotonic_ns();
    history.write(base);
    const Result result = client.acquire(kResource, acquire);
    if (!result) {
      base.type = EventType::acquire_fail;
      base.t_ns = monotonic_ns();
      base.detail = std::string(to_string(result.outcome));
      history.write(base);
      w.shared.failures.fetch_add(1);
      continue;
    }
    const Lock& lock = *result.lock;
    base.type = EventType::acquire_ok;
    base.t_ns = monotonic_ns();
    base.token = lock.token;
    base.fence = lock.fence;
    base.deadline_ns = to_ns(lock.deadline);
    base.started_ns = to_ns(lock.started);
    history.write(base);
    w.shared.grants.fetch_add(1);
    base.started_ns = 0;
    oracle.enter(base);
    hold_for(w.config.hold);
    store_write(store, history, base, w.me);
    oracle.leave(base);
    base.type = EventType::release;
    base.t_ns = monotonic_ns();
    base.deadline_ns = 0;
    const Result released = client.release(lock);
    base.detail = std::string(to_string(released.outcome));
    history.write(base);
  }
}

struct RedisContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Context = std::unique_ptr<redisContext, RedisContextDeleter>;
using ReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

Context connect_to(int port) {
  const timeval timeout{0, 300'000};
  Context c(redisConnectWithTimeout("127.0.0.1", port, timeout));
  if (!c || c->err) return nullptr;
  redisSetTimeout(c.get(), timeout);
  return c;
}

ReplyPtr run(redisContext* c, const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<std::size_t> lengths;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lengths.push_back(a.size());
  }
  return ReplyPtr(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), args.data(), lengths.data())));
}

constexpr const char* kCompareAndDelete =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

// failover / get-then-del: plain SET NX PX on one master, with hiredis.
//  failover:     release is a correct compare-and-delete; the master is the one in
//                shared.master_port, which the parent moves to the promoted replica.
//  get-then-del: release is GET, a pause, then DEL — not atomic (broken on purpose).
void single_master_worker(const WorkerContext& w) {
  HistoryWriter history(w.history_path);
  const bool failover = w.config.strategy == "failover";
  const support::FencedStore store("127.0.0.1", w.store_port, "chaos");
  Oracle oracle(w.shared, w.me, history);
  std::mt19937_64 rng(w.config.seed * 1000003u + static_cast<std::uint64_t>(w.me));
  const std::string key = std::string("redlock:") + kResource;
  const auto ttl_ms = std::to_string(w.config.ttl.count());
  const auto drift = std::chrono::duration_cast<std::chrono::nanoseconds>(w.config.ttl) / 100 + 2ms;
  while (!w.shared.stop.load()) {
    const int port = w.shared.master_port.load();
    Context c = connect_to(port);
    if (!c) {
      std::this_thread::sleep_for(5ms);
      continue;
    }
    while (!w.shared.stop.load() && w.shared.master_port.load() == port) {
      // Counted as busy BEFORE looking at the gate: once the parent closed the gate and saw
      // `holding` at 0, no client can still be on its way to a SET.
      w.shared.holding.fetch_add(1);
      if (w.shared.gate_closed.load()) {
        w.shared.holding.fetch_sub(1);
        std::this_thread::sleep_for(1ms);
        continue;
      }
      struct Busy {  // undoes the increment above on every way out of this iteration
        std::atomic<int>& holding;
        ~Busy() { holding.fetch_sub(1); }
      } busy{w.shared.holding};
      Event base;
      base.process = w.me;
      base.resource = kResource;
      base.token = hex_token(rng);
      base.type = EventType::acquire_invoke;
      base.t_ns = monotonic_ns();
      base.detail = "master 127.0.0.1:" + std::to_string(port);
      history.write(base);
      const std::int64_t started = base.t_ns;
      ReplyPtr set = run(c.get(), {"SET", key, base.token, "NX", "PX", ttl_ms});
      if (!set) {  // connection broken (master killed): reconnect to the current master
        base.type = EventType::acquire_fail;
        base.t_ns = monotonic_ns();
        base.detail = "I/O error on master 127.0.0.1:" + std::to_string(port);
        history.write(base);
        break;
      }
      if (set->type != REDIS_REPLY_STATUS) {
        base.type = EventType::acquire_fail;
        base.t_ns = monotonic_ns();
        base.detail = set->type == REDIS_REPLY_ERROR ? std::string(set->str, set->len) : "taken";
        history.write(base);
        w.shared.failures.fetch_add(1);
        std::this_thread::sleep_for(1ms);
        continue;
      }
      const bool long_hold = w.shared.long_hold.load();
      std::string acked;
      if (failover) {
        ReplyPtr wait = run(c.get(), {"WAIT", "1", "50"});
        acked = wait && wait->type == REDIS_REPLY_INTEGER ? std::to_string(wait->integer) : "?";
      }
      base.type = EventType::acquire_ok;
      base.t_ns = monotonic_ns();
      base.deadline_ns = started + std::chrono::duration_cast<std::chrono::nanoseconds>(w.config.ttl - drift).count();
      base.started_ns = started;
      if (failover) base.detail += ", WAIT 1 acked by " + acked + " replica(s)";
      history.write(base);
      w.shared.grants.fetch_add(1);
      base.started_ns = 0;
      base.detail.clear();
      oracle.enter(base);
      hold_for(failover && long_hold ? 1500ms : w.config.hold);
      store_write(store, history, base, w.me);
      oracle.leave(base);
      base.type = EventType::release;
      base.t_ns = monotonic_ns();
      base.deadline_ns = 0;
      if (failover) {
        ReplyPtr del = run(c.get(), {"EVAL", kCompareAndDelete, "1", key, base.token});
        base.detail = del && del->type == REDIS_REPLY_INTEGER ? "deleted " + std::to_string(del->integer)
                                                              : "release failed";
      } else {
        ReplyPtr get = run(c.get(), {"GET", key});
        const bool mine = get && get->type == REDIS_REPLY_STRING && std::string(get->str, get->len) == base.token;
        if (mine) {
          std::this_thread::sleep_for(30ms);  // the gap between GET and DEL that breaks it
          ReplyPtr del = run(c.get(), {"DEL", key});
          base.detail = "GET matched, DEL " + std::string(del && del->type == REDIS_REPLY_INTEGER
                                                              ? std::to_string(del->integer)
                                                              : "failed");
        } else {
          base.detail = "GET did not match";
        }
      }
      history.write(base);
    }
  }
}

[[noreturn]] void run_worker(const WorkerContext& w) {
  int code = 0;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the harness
  try {
    if (w.config.strategy == "quorum" || w.config.strategy == "single") {
      library_worker(w);
    } else {
      single_master_worker(w);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "client %d: %s\n", w.me, e.what());
    code = 20;
  } catch (...) {
    code = 21;
  }
  std::fflush(stderr);
  ::_exit(code);
}

// ---- the parent: faults, progress, stop ----

class Run {
 public:
  Run(const Config& config, Shared& shared, HistoryWriter& faults)
      : config_(config), shared_(shared), faults_(faults), rng_(config.seed),
        start_(std::chrono::steady_clock::now()),
        end_(start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(config.duration_s))) {}

  [[nodiscard]] bool over() const {
    return std::chrono::steady_clock::now() >= end_ || (config_.grants > 0 && shared_.grants.load() >= config_.grants);
  }

  // Sleeps up to `d` (less if the run is over), printing progress once a second.
  void sleep(std::chrono::steady_clock::duration d) {
    const auto until = std::min(std::chrono::steady_clock::now() + d, end_);
    while (std::chrono::steady_clock::now() < until && !over()) {
      progress();
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          until - std::chrono::steady_clock::now(), 20ms));
    }
    progress();
  }
  // Sleeps exactly `d` even if the run is over (to finish a fault cleanly).
  void sleep_exactly(std::chrono::steady_clock::duration d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
      progress();
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          until - std::chrono::steady_clock::now(), 20ms));
    }
  }

  std::int64_t fault_start(const std::string& what) {
    Event e;
    e.type = EventType::fault_start;
    e.t_ns = monotonic_ns();
    e.fault_id = ++fault_ids_;
    e.detail = what;
    faults_.write(e);
    return e.fault_id;
  }
  void fault_end(std::int64_t id) {
    Event e;
    e.type = EventType::fault_end;
    e.t_ns = monotonic_ns();
    e.fault_id = id;
    faults_.write(e);
  }

  std::mt19937_64& rng() { return rng_; }
  long uniform(long lo, long hi) { return std::uniform_int_distribution<long>(lo, hi)(rng_); }
  [[nodiscard]] std::int64_t faults() const { return fault_ids_; }

  void progress() {
    const auto now = std::chrono::steady_clock::now();
    if (now < next_progress_) return;
    next_progress_ = now + 1s;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::printf("[%5.1fs] grants %ld, failed acquires %ld, faults %" PRId64 ", live oracle conflicts %ld\n", elapsed,
                shared_.grants.load(), shared_.failures.load(), fault_ids_, shared_.live_conflicts.load());
    std::fflush(stdout);
  }

 private:
  const Config& config_;
  Shared& shared_;
  HistoryWriter& faults_;
  std::mt19937_64 rng_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point end_;
  std::chrono::steady_clock::time_point next_progress_{};
  std::int64_t fault_ids_ = 0;
};

std::string master_name(const RedisServer& s) { return "master 127.0.0.1:" + std::to_string(s.port()); }

// Freeze (SIGSTOP) a random minority of the masters for 100-400 ms, then a pause.
void minority_freezes(Run& run, std::vector<std::unique_ptr<RedisServer>>& masters) {
  const std::size_t minority = (masters.size() - 1) / 2;
  if (minority == 0) {
    run.sleep(std::chrono::hours(1));
    return;
  }
  std::vector<std::size_t> order(masters.size());
  while (!run.over()) {
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), run.rng());
    const auto k = static_cast<std::size_t>(run.uniform(1, static_cast<long>(minority)));
    std::vector<std::int64_t> ids;
    for (std::size_t i = 0; i < k; ++i) {
      masters[order[i]]->freeze();
      ids.push_back(run.fault_start("SIGSTOP " + master_name(*masters[order[i]])));
    }
    run.sleep_exactly(std::chrono::milliseconds(run.uniform(100, 400)));
    for (std::size_t i = 0; i < k; ++i) {
      masters[order[i]]->thaw();
      run.fault_end(ids[i]);
    }
    run.sleep(std::chrono::milliseconds(run.uniform(100, 300)));
  }
}

// SIGKILL one master and restart it without persistence (it forgets every key), a different
// one each time, spaced so that at most a minority is within its restart-guard window.
void minority_restarts(Run& run, std::vector<std::unique_ptr<RedisServer>>& masters, Milliseconds guard_window) {
  const std::size_t minority = (masters.size() - 1) / 2;
  if (minority == 0) {
    run.sleep(std::chrono::hours(1));
    return;
  }
  const auto spacing = guard_window / static_cast<long>(minority) + 200ms;
  run.sleep(500ms);
  std::size_t last = masters.size();
  while (!run.over()) {
    std::size_t pick = static_cast<std::size_t>(run.uniform(0, static_cast<long>(masters.size()) - 1));
    if (pick == last) pick = (pick + 1) % masters.size();
    last = pick;
    const std::int64_t id = run.fault_start("SIGKILL+restart (no persistence) " + master_name(*masters[pick]));
    masters[pick]->kill();
    run.sleep_exactly(std::chrono::milliseconds(run.uniform(20, 200)));
    masters[pick]->restart();
    run.fault_end(id);
    run.sleep(spacing);
  }
}

// SIGSTOP a client process that has just entered (so it is paused while holding), for
// longer than its validity, then SIGCONT it.
void paused_holders(Run& run, Shared& shared, const std::vector<pid_t>& clients, Milliseconds pause) {
  run.sleep(500ms);
  while (!run.over()) {
    int victim = -1;
    while (victim < 0 && !run.over()) {
      const std::int64_t now = monotonic_ns();
      for (std::size_t i = 0; i < clients.size(); ++i) {
        const Slot& slot = shared.slots[i];
        if (slot.inside.load() == 1 && now - slot.entered_ns.load() < 5'000'000) victim = static_cast<int>(i);
      }
      if (victim < 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    if (victim < 0) break;
    const pid_t pid = clients[static_cast<std::size_t>(victim)];
    ::kill(pid, SIGSTOP);
    const std::int64_t id = run.fault_start("SIGSTOP client " + std::to_string(victim) + " (pid " +
                                            std::to_string(pid) + ") while holding, for " +
                                            std::to_string(pause.count()) + " ms");
    run.sleep_exactly(pause);
    ::kill(pid, SIGCONT);
    run.fault_end(id);
    run.sleep(std::chrono::milliseconds(run.uniform(300, 600)));
  }
}

bool link_up(const RedisServer& replica) {
  try {
    const Reply r = replica.command({"INFO", "replication"});
    return r.str.find("master_link_status:up") != std::string::npos;
  } catch (const std::exception&) {
    return false;
  }
}

// Seed 002, deterministically. The replica's link drops (REPLICAOF NO ONE after it caught
// up: WAIT 1 on the master), a client acquires on the master (its WAIT 1 returns 0), the
// master is SIGKILLed and the clients move to the replica, which never saw that SET: the next
// SET NX there succeeds while the first holder still holds. The old master comes back as the
// new replica and the roles swap.
// (A CLIENT PAUSE of the replica is not enough: the master's replication stream waits in the
// replica's socket and is applied when the pause ends, so the grant sometimes survives.)
void failovers(Run& run, Shared& shared, RedisServer* master, RedisServer* replica) {
  while (!run.over()) {
    const auto link_deadline = std::chrono::steady_clock::now() + 5s;
    while (!link_up(*replica) && std::chrono::steady_clock::now() < link_deadline) run.sleep_exactly(20ms);
    run.sleep(300ms);  // ordinary grants with replication working
    if (run.over()) break;
    // Close the gate and let the current holder release, so that the next grant is made
    // on the master after the replica stopped following it.
    shared.gate_closed.store(true);
    const auto drain_deadline = std::chrono::steady_clock::now() + 3s;
    while (shared.holding.load() > 0 && std::chrono::steady_clock::now() < drain_deadline) run.sleep_exactly(1ms);
    run.sleep_exactly(5ms);  // a client that passed the gate just before it closed has answered by now
    while (shared.holding.load() > 0 && std::chrono::steady_clock::now() < drain_deadline) run.sleep_exactly(1ms);
    // The releases so far must have reached the replica, or it would keep a released key
    // (e.g. from a full sync still in progress) and refuse everyone after the failover.
    if (master->command({"WAIT", "1", "1000"}).integer < 1) {
      shared.gate_closed.store(false);
      continue;
    }
    const std::int64_t unlink = run.fault_start("replication link dropped: REPLICAOF NO ONE on replica 127.0.0.1:" +
                                                std::to_string(replica->port()));
    replica->command({"REPLICAOF", "NO", "ONE"});
    shared.long_hold.store(true);
    const long grants = shared.grants.load();
    shared.gate_closed.store(false);
    const auto grant_deadline = std::chrono::steady_clock::now() + 1s;
    while (shared.grants.load() == grants && std::chrono::steady_clock::now() < grant_deadline) run.sleep_exactly(1ms);
    // The holder read long_hold before it entered; later grants (after the failover) are short.
    const auto enter_deadline = std::chrono::steady_clock::now() + 100ms;
    while (shared.inside.load() == 0 && std::chrono::steady_clock::now() < enter_deadline) run.sleep_exactly(1ms);
    shared.long_hold.store(false);
    const std::int64_t kill = run.fault_start("SIGKILL " + master_name(*master) + ", clients moved to 127.0.0.1:" +
                                              std::to_string(replica->port()));
    master->kill();
    shared.master_port.store(replica->port());
    run.sleep_exactly(1000ms);  // the clients find the new master and acquire there
    run.fault_end(unlink);
    master->restart();
    master->command({"REPLICAOF", "127.0.0.1", std::to_string(replica->port())});
    run.fault_end(kill);
    std::swap(master, replica);
  }
}

bool check_expectations(const Config& config, const CheckReport& report) {
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::printf("EXPECTATION FAILED: %s\n", what.c_str());
    ok = false;
  };
  if (static_cast<long>(report.grants) < config.min_grants) {
    fail("at least " + std::to_string(config.min_grants) + " grants (got " + std::to_string(report.grants) + ")");
  }
  auto kind_of = [&](const std::string& name) -> ViolationKind {
    for (const auto k : {ViolationKind::mutual_exclusion, ViolationKind::oracle, ViolationKind::fencing}) {
      if (to_string(k) == name) return k;
    }
    usage(("unknown violation kind " + name).c_str());
  };
  for (const std::string& e : config.expects) {
    if (e == "clean") {
      if (report.total_violations() != 0) fail("no violations (got " + std::to_string(report.total_violations()) + ")");
    } else if (e.rfind("violation:", 0) == 0) {
      if (report.count(kind_of(e.substr(10))) == 0) fail("at least one " + e.substr(10) + " violation");
    } else if (e.rfind("no-violation:", 0) == 0) {
      if (report.count(kind_of(e.substr(13))) != 0) fail("no " + e.substr(13) + " violation");
    } else if (e == "late-write-rejected") {
      if (report.late_writes_rejected == 0) fail("a late write rejected by the store");
    } else if (e == "late-write-accepted") {
      if (report.late_writes_accepted == 0) fail("a late write accepted by the store");
    } else {
      usage(("unknown --expect " + e).c_str());
    }
  }
  return ok;
}

int run_main(const Config& config) {
  std::filesystem::create_directories(config.out);
  std::printf("redlock_chaos: strategy %s, scenario %s, seed %" PRIu64 ", duration %.1f s, %d clients, fencing %s, "
              "ttl %lld ms, out %s\n",
              config.strategy.c_str(), config.scenario.c_str(), config.seed, config.duration_s, config.workers,
              config.fencing ? "on" : "off", static_cast<long long>(config.ttl.count()), config.out.c_str());
  std::fflush(stdout);

  RedisServerOptions server_options;
  server_options.extra_args = {"--repl-diskless-sync-delay", "0"};
  const bool library = config.strategy == "quorum" || config.strategy == "single";
  const std::size_t n_servers = library ? config.n : 2;  // failover/get-then-del: master (+ replica)
  std::vector<std::unique_ptr<RedisServer>> servers;
  for (std::size_t i = 0; i < n_servers; ++i) servers.push_back(std::make_unique<RedisServer>(server_options));
  const RedisServer store_server(server_options);
  if (config.strategy == "failover") {
    servers[1]->command({"REPLICAOF", "127.0.0.1", std::to_string(servers[0]->port())});
  }
  std::vector<std::string> uris;
  for (const auto& s : servers) uris.push_back(s->uri());

  void* memory = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* shared = new (memory) Shared;
  shared->master_port.store(servers[0]->port());

  HistoryWriter faults(config.out + "/faults.jsonl");
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> clients;
  for (int i = 0; i < config.workers; ++i) {
    const WorkerContext context{config, *shared, i, config.out + "/client-" + std::to_string(i) + ".jsonl",
                                library ? uris : std::vector<std::string>{}, store_server.port()};
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) run_worker(context);
    shared->slots[i].pid.store(pid);
    clients.push_back(pid);
  }

  Run run(config, *shared, faults);
  try {
    if (config.strategy == "failover") {
      failovers(run, *shared, servers[0].get(), servers[1].get());
    } else if (config.scenario == "minority-freeze") {
      minority_freezes(run, servers);
    } else if (config.scenario == "minority-restart") {
      // The guard window: max_lock_ttl (ttl rounded up to seconds + 1 s), plus up to a second
      // because the library reads the uptime in whole seconds.
      const auto max_lock_ttl = std::chrono::ceil<std::chrono::seconds>(config.ttl) + 1s;
      minority_restarts(run, servers, std::chrono::duration_cast<Milliseconds>(max_lock_ttl + 1s));
    } else if (config.scenario == "paused-holder") {
      paused_holders(run, *shared, clients, config.ttl + 500ms);
    } else {
      run.sleep(std::chrono::hours(1));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fault loop: %s\n", e.what());
  }
  for (auto& s : servers) s->thaw();
  shared->stop.store(true);

  // Stop the clients: they look at the stop flag at least every ~300 ms plus one hold.
  bool clients_ok = true;
  const auto stop_deadline = std::chrono::steady_clock::now() + 10s;
  for (const pid_t pid : clients) {
    ::kill(pid, SIGCONT);
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < stop_deadline) {
      std::this_thread::sleep_for(10ms);
    }
    if (done == 0) {
      std::fprintf(stderr, "client pid %d did not stop; SIGKILL\n", pid);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      clients_ok = false;
    } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "client pid %d failed (status %d)\n", pid, status);
      clients_ok = false;
    }
  }

  std::vector<std::vector<Event>> parts{read_history(config.out + "/faults.jsonl")};
  for (int i = 0; i < config.workers; ++i) {
    parts.push_back(read_history(config.out + "/client-" + std::to_string(i) + ".jsonl"));
  }
  const CheckReport report = check_history(merge_histories(parts));
  std::printf("\n%s", report.table().c_str());

  nlohmann::json j = report.to_json();
  j["strategy"] = config.strategy;
  j["scenario"] = config.scenario;
  j["seed"] = config.seed;
  j["fencing"] = config.fencing;
  j["restart_guard"] = config.restart_guard;
  j["masters"] = library ? config.n : 1;
  j["clients"] = config.workers;
  j["ttl_ms"] = config.ttl.count();
  j["clients_exited_cleanly"] = clients_ok;
  const bool ok = check_expectations(config, report) && clients_ok;
  j["expectations"] = config.expects;
  j["expectations_met"] = ok;
  std::ofstream(config.out + "/report.json") << j.dump(2) << '\n';
  std::printf("report: %s/report.json\nresult: %s\n", config.out.c_str(), ok ? "PASS" : "FAIL");

  shared->~Shared();
  ::munmap(memory, sizeof(Shared));
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace redlock::chaos

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  const redlock::chaos::Config config = redlock::chaos::parse_args(argc, argv);
  try {
    return redlock::chaos::run_main(config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redlock_chaos: %s\n", e.what());
    return 2;
  }
}

// SPDX-License-Identifier: Apache-2.0
#include "workers.h"

#include <signal.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <stop_token>
#include <thread>

#include "history.h"
#include "redlock/redlock.h"
#include "support/fenced_store.h"
#include "support/hiredis_handle.h"

namespace redlock::chaos {
namespace {

using namespace std::chrono_literals;
using support::RedisReplyPtr;
using RedisConnection = support::RedisContextPtr;

// Plain hiredis for the strategies the library does not implement (failover, the seeds'
// broken locks): blocking, one connection, 300 ms timeouts. nullptr when it failed.
RedisConnection connect_to(int port) {
  const timeval timeout = support::to_timeval(300ms);
  RedisConnection c(redisConnectWithTimeout("127.0.0.1", port, timeout));
  if (!c || c->err) return nullptr;
  redisSetTimeout(c.get(), timeout);
  return c;
}

// nullptr on an I/O error (the connection is then unusable).
RedisReplyPtr run_command(redisContext* c, const std::vector<std::string>& argv) {
  return support::command_argv(*c, argv);
}

std::string reply_text(const redisReply* r) {
  return r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_ERROR)
             ? std::string(r->str, r->len)
             : std::string();
}

std::string hex_token(std::mt19937_64& rng) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016" PRIx64 "%016" PRIx64, rng(), rng());
  return buf;
}

std::int64_t ns_of(std::chrono::nanoseconds d) { return d.count(); }

// The harness-owned resource only one holder may be inside.
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

// One client process's plumbing, common to every strategy.
struct WorkerProcess {
  const WorkerContext& w;
  HistoryWriter history;
  support::FencedStore store;
  Oracle oracle;

  explicit WorkerProcess(const WorkerContext& context)
      : w(context), history(context.history_path), store("127.0.0.1", context.store_port, "chaos"),
        oracle(context.shared, context.me, history) {}

  Event event(EventType type) const {
    Event e;
    e.process = w.me;
    e.resource = kResource;
    e.type = type;
    e.t_ns = monotonic_ns();
    return e;
  }

  void record(Event& e, EventType type, std::string detail = {}) {
    e.type = type;
    e.t_ns = monotonic_ns();
    if (!detail.empty()) e.detail = std::move(detail);
    history.write(e);
  }

  // Records a release as invoked at `invoked_ns` (the checker ends the grant there, not when
  // the release returned: the next grant may come before that), with its outcome.
  void released(Event& e, std::int64_t invoked_ns, std::string outcome) {
    e.type = EventType::release;
    e.t_ns = invoked_ns;
    e.deadline_ns = 0;
    e.detail = std::move(outcome);
    history.write(e);
  }

  // `granted_ns`: when the acquire returned the grant (0: now); the grant's window starts
  // there. `progress`: whether the run counts it (--grants, the scenarios' waits for one): not
  // a grant below --min-holders.
  void granted(Event& base, std::int64_t started_ns, std::int64_t deadline_ns, std::int64_t granted_ns = 0,
               bool progress = true) {
    base.deadline_ns = deadline_ns;
    base.started_ns = started_ns;
    base.type = EventType::acquire_ok;
    base.t_ns = granted_ns != 0 ? granted_ns : monotonic_ns();
    history.write(base);
    if (progress) w.shared.grants.fetch_add(1);
    base.started_ns = 0;
    base.detail.clear();
  }

  void failed(Event& base, std::string why) {
    record(base, EventType::acquire_fail, std::move(why));
    w.shared.failures.fetch_add(1);
    base.detail.clear();
  }

  // How long the grant just made is held: long while the parent asks for it (read once, at
  // the grant, so the parent can tell which grant holds long).
  Milliseconds hold_time() const {
    return w.shared.long_hold.load() ? Milliseconds(w.shared.long_hold_ms.load()) : w.config.hold;
  }

  // The holder's critical section: enter the oracle, hold, write to the store, leave.
  void use(const Event& base, Milliseconds hold) {
    oracle.enter(base);
    std::this_thread::sleep_for(hold);
    write_store(base);
    oracle.leave(base);
  }

  // The write event carries the lease's deadline so the checker can tell late writes.
  void write_store(const Event& base) {
    Event e = base;
    e.invoke_ns = monotonic_ns();
    bool accepted = false;
    try {
      accepted = store.write(base.fence, "process " + std::to_string(w.me) + " token " + base.token);
    } catch (const std::exception& ex) {
      e.detail = std::string(kStoreErrorPrefix) + ex.what();
    }
    e.t_ns = monotonic_ns();
    e.type = accepted ? EventType::write_accepted : EventType::write_rejected;
    history.write(e);
  }
};

// ---- lease: the grant is kept as a redlock::Lease and held for longer than its ttl ----

// How often the holder looks at its lease while it works: a renewal is recorded when it is
// seen, with its round's start (the checker needs both: chaos/README.md "Leases"). The loss
// signal itself wakes the holder at once (stop_token).
constexpr auto kLeasePoll = 2ms;

// Keeps `lock` as a lease, enters the oracle and works for `hold` or until the lease's
// stop_token fires (then it leaves at once, without its store write), records every deadline
// it sees move, and releases. The loss signal is recorded by on_lost itself, on the Client's
// loop thread (HistoryWriter::write is one write(2) of a whole line: safe from two threads).
void hold_leased(WorkerProcess& me, Client& client, const Lock& lock, const Event& base, Milliseconds hold) {
  LeaseOptions options;
  options.on_lost = [&history = me.history, base](LossReason reason, const Lock& at_loss) {
    Event e = base;
    e.type = EventType::lease_lost;
    e.t_ns = monotonic_ns();
    e.deadline_ns = to_ns(at_loss.deadline);
    e.started_ns = to_ns(at_loss.started);
    e.detail = std::string(to_string(reason));
    history.write(e);
  };
  Lease lease = client.keep(lock, options);
  Event e = base;
  const Lock kept = lease.lock();
  std::int64_t seen = to_ns(kept.deadline);
  e.deadline_ns = seen;
  e.started_ns = to_ns(kept.started);
  me.record(e, EventType::lease_start);
  e.started_ns = 0;
  const auto observe = [&] {
    const Lock now = lease.lock();
    if (const std::int64_t deadline = to_ns(now.deadline); deadline != seen && !lease.lost()) {
      seen = deadline;
      Event renewed = base;
      renewed.deadline_ns = deadline;
      renewed.started_ns = to_ns(now.started);
      me.record(renewed, EventType::lease_renewed);
    }
  };
  const std::stop_token stop = lease.stop_token();
  std::mutex mutex;
  std::condition_variable_any wake;
  me.oracle.enter(base);
  const auto until = std::chrono::steady_clock::now() + hold;
  // The longest this thread went without looking (asked for 2 ms): when a loss comes late, it
  // tells a starved process (this thread late too) from a late loop thread.
  auto last_look = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration longest_gap{};
  while (!stop.stop_requested()) {
    const auto now = std::chrono::steady_clock::now();
    longest_gap = std::max(longest_gap, now - last_look);
    last_look = now;
    if (now >= until || me.w.shared.stop.load()) break;  // the run's end cuts a long hold short
    std::unique_lock guard(mutex);
    wake.wait_for(guard, stop, std::min<std::chrono::steady_clock::duration>(kLeasePoll, until - now),
                  [] { return false; });
    guard.unlock();
    observe();
  }
  const bool stopped = stop.stop_requested();
  if (!stopped) {
    Event write = base;
    write.deadline_ns = to_ns(lease.deadline());  // late writes are judged by the deadline of the moment
    me.write_store(write);
  }
  me.oracle.leave(base);
  const std::int64_t release_ns = monotonic_ns();
  const Result released = lease.release();
  const std::optional<LossReason> loss = lease.loss();
  me.released(e, release_ns,
              std::string(to_string(released.outcome)) +
                  (loss ? ", lease lost (" + std::string(to_string(*loss)) + ")" + (stopped ? ", work stopped" : "")
                        : std::string()) +
                  ", longest look gap " +
                  std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(longest_gap).count()) + " ms");
}

// ---- quorum / single / lease: the library, through its public API only ----

void library_worker(const WorkerContext& w) {
  WorkerProcess me(w);
  ClientOptions options;
  options.masters = w.masters;
  options.ttl = w.config.ttl;
  // A lease retries a failed renewal every command_timeout until deadline - loss_margin
  // (lease.h: by default max(2 command_timeout, ttl / 10), at most half the time after the
  // first renewal): at ttl 300 ms, 50 ms leaves room for two attempts per period.
  const bool leased = w.config.strategy == "lease";
  options.command_timeout = leased ? std::min<Milliseconds>(100ms, w.config.ttl / 6) : 100ms;
  options.retry_delay = 5ms;
  options.retry_jitter = 4ms;
  options.reconnect_min = 20ms;
  options.reconnect_max = 200ms;
  options.stall_timeout = 1000ms;  // a partitioned connection is replaced soon after it heals
  options.restart_guard = w.config.restart_guard;
  // No extends here, so no lock outlives its ttl: the guard need only wait that long (the
  // default adds a second, which every run would wait out at its start).
  options.max_lock_ttl = w.config.ttl;
  options.source_address = client_address(w.me);
  // --tls: only the run's own CA is trusted; the masters' certificate names IP 127.0.0.1.
  options.tls.ca_file = w.tls_ca_file;
  options.on_warning = [](const std::string&) {};
  redlock::Client client(options);
  client.wait_connected(w.masters.size(), 2000ms);
  // --min-holders: plain connections that read the lock key back from every master.
  std::vector<std::pair<std::uint16_t, RedisConnection>> direct;
  if (w.config.min_holders > 0) {
    for (const auto& uri : w.masters) {
      const std::uint16_t port = Endpoint::parse(uri).port;
      direct.emplace_back(port, connect_to(port));
    }
  }
  const auto holders = [&](const Lock& lock) {
    std::size_t count = 0;
    for (auto& [port, connection] : direct) {
      if (!connection) connection = connect_to(port);
      if (!connection) continue;
      const RedisReplyPtr reply = run_command(connection.get(), {"GET", lock.key});
      if (!reply) connection.reset();
      if (reply && reply->type == REDIS_REPLY_STRING && reply_text(reply.get()) == lock.token) ++count;
    }
    return count;
  };
  std::mt19937_64 rng(w.config.seed * 1000003u + static_cast<std::uint64_t>(w.me));
  AcquireOptions acquire;
  acquire.fencing = w.config.fencing;
  acquire.retry_count = -1;
  acquire.wait = 300ms;  // come back now and then to look at the stop flag
  while (!w.shared.stop.load()) {
    Event base = me.event(EventType::acquire_invoke);
    me.history.write(base);
    const Result result = client.acquire(kResource, acquire);
    const std::int64_t returned_ns = monotonic_ns();  // the grant's window starts here
    if (!result) {
      me.failed(base, std::string(to_string(result.outcome)));
      continue;
    }
    const Lock& lock = *result.lock;
    if (w.config.min_holders > 0) {
      // Read back after the grant: what a fault can take away later only lowers it, and a
      // SET still in flight only raises it, so a grant used here had this many holders.
      // Recorded all the same: such a grant promises nothing to later ones, but it must not
      // overlap an earlier grant held on enough masters (the checker holds it to that side).
      if (const std::size_t held_by = holders(lock); held_by < w.config.min_holders) {
        base.token = lock.token;
        base.fence = lock.fence;
        base.detail = std::string(kBelowMinHoldersPrefix) + "held by " + std::to_string(held_by) + " of " +
                      std::to_string(direct.size()) + " masters; released unused";
        me.granted(base, to_ns(lock.started), to_ns(lock.deadline), returned_ns, false);
        const std::int64_t release_ns = monotonic_ns();
        const Result released = client.release(lock);
        me.released(base, release_ns, std::string(to_string(released.outcome)));
        continue;
      }
    }
    base.token = lock.token;
    base.fence = lock.fence;
    me.granted(base, to_ns(lock.started), to_ns(lock.deadline), returned_ns);
    if (leased) {
      // [hold, 2 hold] unless the parent asked for a long grant.
      Milliseconds hold = me.hold_time();
      if (hold == w.config.hold) hold += Milliseconds(static_cast<long>(rng() % static_cast<std::uint64_t>(hold.count() + 1)));
      hold_leased(me, client, lock, base, hold);
      continue;
    }
    // A holder checks its validity before it works: a worker woken this late (a loaded
    // machine) would enter the oracle on a lock whose keys may be gone, and a correct library
    // would be charged with the overlap. It releases it unused (the checker counts it).
    if (monotonic_ns() < to_ns(lock.deadline)) me.use(base, me.hold_time());
    const std::int64_t release_ns = monotonic_ns();
    const Result released = client.release(lock);
    me.released(base, release_ns, std::string(to_string(released.outcome)));
  }
}

// ---- hiredis strategies ----

constexpr const char* kCompareAndDelete =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

std::string lock_key() { return std::string("redlock:") + kResource; }

// The validity a single-master client may claim: ttl minus the library's drift allowance
// (with the library's default drift options).
std::int64_t lease_deadline(const Config& config, std::int64_t started_ns) {
  const auto drift = redlock::drift_allowance(ClientOptions{}, config.ttl);
  return started_ns + ns_of(std::chrono::duration_cast<std::chrono::nanoseconds>(config.ttl - drift));
}

// failover:     SET NX PX on the master in shared.master_port (which the parent moves to the
//               promoted replica), compare-and-delete release. Seed 002.
// get-then-del: SET NX PX, release is GET, a pause, then DEL — not atomic (broken on purpose).
void single_master_worker(const WorkerContext& w) {
  WorkerProcess me(w);
  const bool failover = w.config.strategy == "failover";
  std::mt19937_64 rng(w.config.seed * 1000003u + static_cast<std::uint64_t>(w.me));
  const std::string key = lock_key();
  const auto ttl_ms = std::to_string(w.config.ttl.count());
  while (!w.shared.stop.load()) {
    const int port = w.shared.master_port.load();
    RedisConnection c = connect_to(port);
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
      Event base = me.event(EventType::acquire_invoke);
      base.token = hex_token(rng);
      base.detail = "master 127.0.0.1:" + std::to_string(port);
      me.history.write(base);
      const std::int64_t started = base.t_ns;
      RedisReplyPtr set = run_command(c.get(), {"SET", key, base.token, "NX", "PX", ttl_ms});
      if (!set) {  // connection broken (master killed): reconnect to the current master
        me.record(base, EventType::acquire_fail, "I/O error on master 127.0.0.1:" + std::to_string(port));
        break;
      }
      if (set->type != REDIS_REPLY_STATUS) {
        me.failed(base, set->type == REDIS_REPLY_ERROR ? reply_text(set.get()) : "taken");
        std::this_thread::sleep_for(1ms);
        continue;
      }
      const Milliseconds hold = me.hold_time();
      std::string acked;
      if (failover) {
        RedisReplyPtr wait = run_command(c.get(), {"WAIT", "1", "50"});
        acked = wait && wait->type == REDIS_REPLY_INTEGER ? std::to_string(wait->integer) : "?";
      }
      if (failover) base.detail += ", WAIT 1 acked by " + acked + " replica(s)";
      me.granted(base, started, lease_deadline(w.config, started));
      me.use(base, hold);
      const std::int64_t release_ns = monotonic_ns();
      std::string outcome;
      if (failover) {
        RedisReplyPtr del = run_command(c.get(), {"EVAL", kCompareAndDelete, "1", key, base.token});
        outcome = del && del->type == REDIS_REPLY_INTEGER ? "deleted " + std::to_string(del->integer) : "release failed";
      } else {
        RedisReplyPtr get = run_command(c.get(), {"GET", key});
        if (get && get->type == REDIS_REPLY_STRING && reply_text(get.get()) == base.token) {
          std::this_thread::sleep_for(30ms);  // the gap between GET and DEL that breaks it
          RedisReplyPtr del = run_command(c.get(), {"DEL", key});
          outcome = "GET matched, DEL " +
                    (del && del->type == REDIS_REPLY_INTEGER ? std::to_string(del->integer) : std::string("failed"));
        } else {
          outcome = "GET did not match";
        }
      }
      me.released(base, release_ns, outcome);
    }
  }
}

// Connects `c` to the current master unless it is connected; false (after a 5 ms pause) if
// that failed.
bool reconnect(RedisConnection& c, const WorkerContext& w) {
  if (c) return true;
  c = connect_to(w.shared.master_port.load());
  if (!c) std::this_thread::sleep_for(5ms);
  return c != nullptr;
}

// The wall clock as this client sees it, in ms: client 0's runs `skew` ahead.
std::int64_t client_wall_ms(const WorkerContext& w) {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  const std::int64_t ms = static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
  return w.me == 0 ? ms + w.config.skew.count() : ms;
}

// The old SETNX-documentation lock (broken): the value is the holder's expiry on ITS clock.
// SETNX key expiry; if taken, GET it, and if that expiry has passed on MY clock, GETSET a new
// one and own the lock if the old value is still the expired one. Release: DEL if my own
// expiry has not passed. A client whose clock runs ahead (client 0, --skew) takes a lock its
// holder still has.
void getset_timestamp_worker(const WorkerContext& w) {
  WorkerProcess me(w);
  std::mt19937_64 rng(w.config.seed * 1000003u + static_cast<std::uint64_t>(w.me));
  const std::string key = lock_key();
  RedisConnection c;
  while (!w.shared.stop.load()) {
    if (!reconnect(c, w)) continue;
    Event base = me.event(EventType::acquire_invoke);
    const std::int64_t started = base.t_ns;
    const std::int64_t now = client_wall_ms(w);
    const std::int64_t expiry = now + w.config.ttl.count() + 1;
    base.token = std::to_string(expiry) + "@" + std::to_string(w.me);
    me.history.write(base);
    RedisReplyPtr set = run_command(c.get(), {"SETNX", key, base.token});
    if (!set) {
      c.reset();
      continue;
    }
    bool mine = set->type == REDIS_REPLY_INTEGER && set->integer == 1;
    std::string how = "SETNX";
    if (!mine) {
      RedisReplyPtr current = run_command(c.get(), {"GET", key});
      const std::string held = reply_text(current.get());
      if (!held.empty() && std::stoll(held) < now) {  // expired on my clock: take it over
        RedisReplyPtr old = run_command(c.get(), {"GETSET", key, base.token});
        mine = old && reply_text(old.get()) == held;
        how = "GETSET over expiry " + held + " (my clock " + std::to_string(now) + ")";
      }
    }
    if (!mine) {
      me.failed(base, "taken");
      std::this_thread::sleep_for(1ms);
      continue;
    }
    // The holder believes it holds for ttl from its start (its own clock's rate is right).
    me.granted(base, started, started + ns_of(w.config.ttl));
    me.use(base, me.hold_time());
    const std::int64_t release_ns = monotonic_ns();
    std::string outcome = "expired, not deleted";
    if (client_wall_ms(w) < expiry) {
      RedisReplyPtr del = run_command(c.get(), {"DEL", key});
      outcome = "DEL " + (del && del->type == REDIS_REPLY_INTEGER ? std::to_string(del->integer) : std::string("failed"));
    }
    me.released(base, release_ns, outcome);
    // Give the others a turn: a releaser that tries again at once wins nearly every race
    // (they sleep between attempts), and client 0 alone never shows the skew.
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + static_cast<long>(rng() % 4)));
  }
}

// SETNX then EXPIRE as two commands (broken): a client that dies between them leaves a key
// with no expiry, and nobody gets the lock again. The parent sets crash_next; the next client
// whose SETNX succeeds records that and SIGKILLs itself before its EXPIRE.
void setnx_expire_worker(const WorkerContext& w) {
  WorkerProcess me(w);
  std::mt19937_64 rng(w.config.seed * 1000003u + static_cast<std::uint64_t>(w.me));
  const std::string key = lock_key();
  RedisConnection c;
  while (!w.shared.stop.load()) {
    if (!reconnect(c, w)) continue;
    Event base = me.event(EventType::acquire_invoke);
    base.token = hex_token(rng);
    me.history.write(base);
    const std::int64_t started = base.t_ns;
    RedisReplyPtr set = run_command(c.get(), {"SETNX", key, base.token});
    if (!set) {
      c.reset();
      continue;
    }
    if (set->type != REDIS_REPLY_INTEGER || set->integer != 1) {
      me.failed(base, "taken");
      std::this_thread::sleep_for(1ms);
      continue;
    }
    if (w.shared.crash_next.exchange(false)) {
      w.shared.crashed.store(w.me);
      Event fault = me.event(EventType::fault_start);
      fault.process = -1;
      fault.fault_id = 1'000'000 + w.me;
      fault.detail = "client " + std::to_string(w.me) + " SIGKILLed between SETNX and EXPIRE: the key never expires";
      me.history.write(fault);
      ::raise(SIGKILL);
    }
    RedisReplyPtr expire = run_command(c.get(), {"PEXPIRE", key, std::to_string(w.config.ttl.count())});
    me.granted(base, started, lease_deadline(w.config, started));
    me.use(base, me.hold_time());
    const std::int64_t release_ns = monotonic_ns();
    RedisReplyPtr del = run_command(c.get(), {"EVAL", kCompareAndDelete, "1", key, base.token});
    me.released(base, release_ns,
                del && del->type == REDIS_REPLY_INTEGER ? "deleted " + std::to_string(del->integer) : "release failed");
  }
}

}  // namespace

std::string client_address(int me) { return "127.0.0." + std::to_string(10 + me); }

void run_worker(const WorkerContext& w) {
  int code = 0;
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the harness
  try {
    const std::string& s = w.config.strategy;
    if (w.config.library()) library_worker(w);
    else if (s == "failover" || s == "get-then-del") single_master_worker(w);
    else if (s == "getset-timestamp") getset_timestamp_worker(w);
    else if (s == "setnx-expire") setnx_expire_worker(w);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "client %d: %s\n", w.me, e.what());
    code = 20;
  } catch (...) {
    code = 21;
  }
  std::fflush(stderr);
  ::_exit(code);
}

}  // namespace redlock::chaos

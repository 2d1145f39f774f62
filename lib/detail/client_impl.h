// SPDX-License-Identifier: Apache-2.0
// detail/client_impl.h — the inside of redlock::Client (redlock::detail::ClientImpl): operations, rounds, and what the
// Client knows about each master (restart guard, fencing counter).
#pragma once

#include <hiredis/hiredis.h>

#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "detail/commands.h"
#include "detail/connection.h"
#include "detail/event_loop.h"
#include "detail/lock_state.h"
#include "detail/quorum.h"
#include "redlock/client.h"

namespace redlock::detail {

// One lock operation: an acquire with its retries (and its fencing round), one extend, or
// one release.
struct Operation {
  OperationId id = 0;
  RoundKind kind = RoundKind::acquire;
  Callback done;
  std::string resource;
  std::string key;
  std::string token;  // extend/release: the lock's; acquire: the current attempt's
  Milliseconds ttl{0};
  Lock lock;          // extend: the lock being extended
  int retries_left = 0;                 // -1: unlimited
  std::uint64_t wait_deadline_ns = 0;   // 0: none
  bool internal = false;  // a release the library sends on its own (failed or cancelled acquire)
  bool fencing = false;
  int attempts = 0;
  std::shared_ptr<class Round> round;
  EventLoop::TimerId retry_timer = 0;
  Result last;  // the last failed attempt's result, reported if we give up

  // Fenced acquire between its two rounds: the grant round's start, table and token.
  std::chrono::steady_clock::time_point grant_started{};
  std::vector<MasterResult> grant_masters;
  std::shared_ptr<LockState> grant_state;
  std::uint64_t fence = 0;
};

// What one round sends: fixed when the round is created. (The operation's token changes
// with every attempt; a round answered late, e.g. a NOSCRIPT, must encode its own.)
struct RoundArgs {
  std::string key;
  std::string token;
  Milliseconds ttl{0};
  std::uint64_t fence = 0;  // fence round: the token to raise the counters to
  bool fencing = false;     // acquire: the fenced (scripted) variant
};

// What this Client knows about one master across reconnects.
struct MasterView {
  std::string run_id;           // of the last connection that completed its handshake
  std::uint32_t epoch = 0;      // bumps whenever run_id changes; 0 = never connected
  std::uint64_t epoch_seen_ns = 0;  // now_ns() when this Client first saw this run_id
  // The latest instant this incarnation can have started (now_ns()): from uptime, and once
  // this Client has seen the run_id change, never before it saw the new one. Only moves later.
  std::uint64_t started_ns = 0;
  bool durable = false;         // this incarnation: appendonly yes + appendfsync always
  // Counted before the age rule allows: only an incarnation this Client saw come from a
  // durable one by a restart (so it reloaded what was granted). A first contact, or a master
  // that was not durable before its restart, may have come back empty: the age rule applies.
  bool counted_at_once = false;
  bool fence_ready = false;     // fencing counter caught up for this epoch
  bool catch_up_running = false;
  bool twin_warned = false;     // warned that another configured master is this same server
  std::string permission_warned;  // the permission problem last warned about ("" = none)
};

class ClientImpl {
 public:
  explicit ClientImpl(ClientOptions options);
  ~ClientImpl();

  // Any thread.
  OperationId submit(std::shared_ptr<Operation> op);
  Result wait_for(const std::function<void(Callback)>& start);
  bool wait_connected(std::size_t count, Milliseconds timeout);

  // Loop thread.
  void begin(const std::shared_ptr<Operation>& op);
  void send_round(const std::shared_ptr<Operation>& op, RoundKind kind);
  std::string encode(RoundKind kind, const RoundArgs& args, bool use_eval) const;
  void decide(Round& round);
  void grant(const std::shared_ptr<Operation>& op, std::chrono::steady_clock::time_point started, Result result,
             std::shared_ptr<LockState> state);
  void fail_attempt(const std::shared_ptr<Operation>& op, Result result);
  void finish(const std::shared_ptr<Operation>& op, Result result);
  // Runs a user callback; its exceptions stop here. While it runs, deleting the Client
  // defers freeing this object (see destroy_from_callback).
  void call_back(const Callback& done, Result result) noexcept;
  // On the loop thread, inside one of this Client's callbacks.
  [[nodiscard]] bool inside_callback() const noexcept;
  // ~Client inside a callback on a caller's loop: shut down now, free on the loop's next
  // iteration, when no frame of this Client is on the stack any more.
  static void destroy_from_callback(std::unique_ptr<ClientImpl> impl);
  void release_in_background(const std::string& key, const std::string& token, Milliseconds ttl);
  void warn_failed_release(const Operation& op, const Result& result) const;
  void cancel(OperationId id);
  void shutdown();

  // Restart guard and fencing: why master `index`'s grant is not a vote, if it is not.
  std::optional<std::string> not_counted(std::uint32_t index, bool fenced) const;
  // Which rule counted a grant the age rule alone would not have (a durable master), if any.
  std::optional<std::string> counted_because(std::uint32_t index) const;
  // The permission check (permissions.cpp): the handshake steps of every connection, and
  // why master `index` may not be sent a lock command (fenced: the fencing paths too).
  std::vector<HandshakeStep> handshake_steps() const;
  std::optional<std::string> not_permitted(std::uint32_t index, bool fenced) const;
  void warn_permissions(std::uint32_t index);
  // Two configured masters that reach one server (the same run_id): one vote between them.
  bool same_server(std::uint32_t a, std::uint32_t b) const;
  void on_master_ready(std::uint32_t index);
  void forget_votes_of(std::uint32_t index);
  void carry_votes_of(std::uint32_t index, std::uint32_t previous_epoch);
  void remember(const std::shared_ptr<LockState>& state);
  void catch_up(std::uint32_t index);
  void warn(const std::string& message) const;
  // Text from or about a master as results and warnings may show it: every configured
  // password masked (a server may echo one back), at most kMaxShownText bytes.
  std::string shown(std::string_view text) const;
  static constexpr std::size_t kMaxShownText = 1024;

  // First, so it is destroyed last: every Connection and timer refers to it.
  std::unique_ptr<EventLoop> loop_;
  ClientOptions options_;
  std::vector<Endpoint> endpoints_;
  std::vector<std::string> names_;
  std::uint32_t size_ = 0;
  std::uint32_t quorum_ = 0;
  std::uint64_t guard_ns_ = 0;  // restart guard: counted once up longer than this
  std::shared_ptr<const Clock> clock_;
  Script release_script_{kReleaseScript};
  Script extend_script_{kExtendScript};
  Script fenced_acquire_script_{kFencedAcquireScript};
  Script fence_raise_script_{kFenceRaiseScript};
  Script permission_check_script_{kPermissionCheckScript};
  std::atomic<OperationId> next_id_{1};

  // Loop thread only.
  std::vector<std::unique_ptr<Connection>> connections_;
  std::vector<MasterView> views_;
  std::unordered_map<OperationId, std::shared_ptr<Operation>> operations_;
  std::vector<std::weak_ptr<LockState>> live_locks_;  // swept when it doubles
  std::size_t live_locks_sweep_at_ = 1024;
  std::minstd_rand jitter_rng_{std::random_device{}()};
  bool shutting_down_ = false;
  bool shut_down_ = false;
  int callbacks_running_ = 0;  // user callbacks on the stack (a Client may be deleted in one)
};

// One round: one command to each master, the votes, and the deadline.
class Round final : public ReplySink, public std::enable_shared_from_this<Round> {
 public:
  Round(ClientImpl& impl, std::shared_ptr<Operation> op, RoundKind kind, RoundArgs args);

  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) override;
  void record(std::uint32_t index, MasterStatus status, std::string error);
  void evaluate();
  void on_deadline();

  ClientImpl& impl_;
  // Kept after the decision (a late NOSCRIPT still needs the key and token); the
  // op -> round link is cut when the operation finishes or retries, so no cycle outlives it.
  std::shared_ptr<Operation> op_;
  const RoundKind kind_;
  const RoundArgs args_;
  Tally tally_;
  std::vector<MasterResult> masters_;
  std::vector<long long> values_;  // fenced acquire: each master's counter after INCR
  std::shared_ptr<LockState> granted_;  // acquire: which masters granted (late OKs added)
  std::chrono::steady_clock::time_point started_{};
  std::uint64_t start_ns_ = 0;
  bool decided_ = false;
  std::vector<bool> eval_sent_;  // per master: NOSCRIPT already answered with EVAL
  EventLoop::TimerId deadline_timer_ = 0;

 private:
  MasterStatus classify(std::uint32_t index, const redisReply* reply, std::string& error);
  // Whether another configured master that is the same server already voted in this round.
  bool twin_voted(std::uint32_t index) const;
  void resend_with_eval(std::uint32_t index);
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/client_impl.h — the inside of redlock::Client: the life of each operation, from
// submit to its callback (begin, rounds, grant or retry, finish), on the Client's event loop.
//
// What it owns, in order (docs/design.md has the map): the event loop; the options; how text
// is shown (Diagnostics); the lock's Redis commands (LockCommands); the masters (MasterSet:
// connections, restart guard, fencing catch-up, permissions); the operations in flight. A
// round (Round) is given only the parts it talks to (RoundContext).
#pragma once

#include <atomic>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "detail/diagnostics.h"
#include "detail/event_loop.h"
#include "detail/lock_commands.h"
#include "detail/master_set.h"
#include "detail/operation.h"
#include "detail/pool_allocator.h"
#include "detail/release_watch.h"
#include "detail/ring_queue.h"
#include "detail/round.h"
#include "redlock/client.h"
#include "tls/tls_context.h"

namespace redlock::detail {

class LeaseCore;
class StatusQuery;

// Calls a user callback at the library boundary: its exceptions go no further. (The Result
// is passed on, not copied: each hop by value costs a move of the whole Result.)
void call_user(const Callback& done, Result&& result) noexcept;

class ClientImpl {
 public:
  explicit ClientImpl(ClientOptions options);
  ~ClientImpl();
  ClientImpl(const ClientImpl&) = delete;
  ClientImpl& operator=(const ClientImpl&) = delete;

  // Any thread.
  // A new operation, from the Client's pool of them (detail/pool_allocator.h).
  [[nodiscard]] std::shared_ptr<Operation> make_operation() const;
  // A new lock state for `masters` masters, from the Client's pool of them. (The pool outlives
  // the Client while a Lock still holds a state from it: detail/pool_allocator.h.)
  [[nodiscard]] std::shared_ptr<LockState> make_lock_state(std::size_t masters) const;
  OperationId submit(std::shared_ptr<Operation> op);
  void cancel_soon(OperationId id);  // posts cancel() to the loop
  Result wait_for(const std::function<void(Callback)>& start);
  // This process is a child of a fork() made after the Client was (EventLoop::forked).
  [[nodiscard]] bool forked() const noexcept { return loop_->forked(); }
  // Loop thread: runs `user_code` (completion, status and stop callbacks, on_lost): a Client
  // destroyed inside it on a caller's loop is shut down there and freed on the loop's next pass
  // (Client::~Client), not under the loop code still on the stack. A child of a fork() made in
  // it on the Client's own loop thread does not come back into that loop (EventLoop::forked).
  template <typename UserCode>
  void run_as_callback(UserCode&& user_code) {
    ++callbacks_running_;
    std::forward<UserCode>(user_code)();
    end_if_forked_child();
    --callbacks_running_;
  }
  // Loop thread, after user code returned (callbacks, on_warning): a child of a fork() made in
  // it on the Client's own loop thread ends here (EventLoop::end_forked_child).
  void end_if_forked_child() const noexcept {
    if (loop_->forked() && loop_->owns_thread()) EventLoop::end_forked_child();
  }
  bool wait_connected(std::size_t count, Milliseconds timeout);
  // Client::status (lib/status.cpp): throws UsageError for a bad resource name.
  void status_async(std::optional<std::string> resource, StatusCallback done);
  FleetStatus status(std::optional<std::string> resource);
  [[nodiscard]] Lock adopt(std::string_view resource, std::string_view token, std::uint64_t fence) const;
  // Client::extend_async / release_async (lib/client.cpp); a lease renews and releases through them.
  OperationId extend_async(Lock lock, Callback done, std::optional<Milliseconds> ttl);
  OperationId release_async(Lock lock, Callback done);
  // Loop thread only: the extend begins (and its round is sent) before this returns, with no
  // loop pass in between (a lease checks its deadline and sends in one step).
  // `resend_before`: RoundArgs::resend_before (a lease's loss moment, validity clock).
  OperationId extend_now(Lock lock, Callback done, std::optional<Milliseconds> ttl,
                         std::chrono::steady_clock::time_point resend_before);
  // Loop thread only: the release is queued on every connection before this returns. A
  // lease's release task uses it: a second post would run after a ~Client that came right
  // behind it (its shutdown refuses what it has not begun; its close writes what is queued).
  OperationId release_now(Lock lock, Callback done);
  // A Lock this Client granted (acquire, or an extend on this Client). Any thread.
  [[nodiscard]] bool granted_here(const Lock& lock) const noexcept;
  // The holder gave `lock` up (a release of it was submitted here) or the restart guard knows
  // it lost: its remaining() is 0 and it is never extended. Any thread.
  [[nodiscard]] bool given_up(const Lock& lock) const noexcept;
  // Client::remaining: deadline - now on this Client's clock, 0 once given up or past.
  [[nodiscard]] std::chrono::microseconds remaining(const Lock& lock) const;
  // The deadline to believe for `lock`: for a Lock granted here, the earlier of its own and the
  // one this Client granted (LockState::deadline: an edited copy is not believed); for another
  // (its validity is unknown here) time_point::min(): nothing may rely on it.
  [[nodiscard]] std::chrono::steady_clock::time_point deadline_of(const Lock& lock) const noexcept;
  // Unique among the process's Clients, past and present (LockState::granted_by).
  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }

  // On the loop thread, inside one of this Client's callbacks.
  [[nodiscard]] bool inside_callback() const noexcept;
  // ~Client inside a callback on a caller's loop: shut down now, free on the loop's next
  // iteration, when no frame of this Client is on the stack any more.
  static void destroy_from_callback(std::unique_ptr<ClientImpl> impl);

  [[nodiscard]] const ClientOptions& options() const noexcept { return options_; }
  [[nodiscard]] std::uint32_t size() const noexcept { return masters_.size(); }
  [[nodiscard]] std::uint32_t quorum() const noexcept { return masters_.quorum(); }
  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return masters_.names(); }
  [[nodiscard]] const Clock& clock() const noexcept { return *clock_; }
  [[nodiscard]] EventLoop& loop() noexcept { return *loop_; }

  // Leases (lib/lease.cpp). Loop thread: the Client stops `lease` when it shuts down (at once
  // if it already is), then starts it.
  void keep_lease(const std::shared_ptr<LeaseCore>& lease);
  // Any thread: a lease asked to release; its task is on the way to the loop. lib/lease.cpp.
  void note_lease_release(const std::shared_ptr<LeaseCore>& lease);

 private:
  // Loop thread.
  void begin(const std::shared_ptr<Operation>& op);
  OperationId begin_now(std::shared_ptr<Operation> op);  // gives it an id, then begin()
  void send_round(const std::shared_ptr<Operation>& op, RoundKind kind);
  void decided(const std::shared_ptr<Operation>& op, Round& round);
  // `state`: which masters granted; `fence`: the acquire's fencing token (0 when unfenced).
  // A failed extend whose rows prove no quorum can hold the token any more (its key gone or
  // another owner's on more than N - quorum masters): the Lock is marked lost, for every copy.
  void mark_lost_if_proven(const Lock& lock, const Result& result);
  // Whether a release of key/token begun here may still run late (released_here_):
  // not_known once the ring overflowed, until the window of the newest entry dropped ends.
  enum class ReleasedHereAnswer { no, yes, not_known };
  [[nodiscard]] ReleasedHereAnswer released_here(const std::string& key, const std::string& token) const;
  void remember_release(const Operation& op);
  [[nodiscard]] std::uint64_t released_here_end(std::uint64_t submitted) const noexcept;
  // max_lock_ttl, or the longest ttl acquired or extended here if longer (only grows).
  [[nodiscard]] Milliseconds longest_ttl_in_use() const noexcept;
  [[nodiscard]] std::uint64_t validity_clock_ns() const;
  void grant(const std::shared_ptr<Operation>& op, std::chrono::steady_clock::time_point started, Result&& result,
             std::shared_ptr<LockState> state, std::uint64_t fence);
  void fail_attempt(const std::shared_ptr<Operation>& op, Result&& result);
  // Waiting: when the failed round says a quorum of the holders' keys could have expired (0:
  // unknown); a release announced for `key` (ReleaseWatch); the retry timer; the end.
  [[nodiscard]] std::uint64_t quorum_free_at(const Round& round, const std::vector<MasterResult>& masters,
                                             std::uint64_t& said_ns) const;
  void on_release_announced(const std::string& key, bool lost);  // notes the key; wakes after the reads
  void wake_announced();
  void wake_waiters(const std::string& key, bool lost = false);
  void poll_instead_of_listening(const std::shared_ptr<Operation>& op, std::uint64_t now);
  std::uint64_t next_poll_at(std::uint64_t now);
  bool wake(const std::shared_ptr<Operation>& op, std::uint64_t now);
  // Whether a quorum granted the failed attempt (the key was free: it failed for a reason of its own).
  [[nodiscard]] bool granted_by_quorum(const Result& result) const;
  void arm_retry(const std::shared_ptr<Operation>& op, std::uint64_t at, bool give_up);
  [[nodiscard]] static std::uint64_t retry_deadline(const AcquirePart& acquire) noexcept;
  void stop_waiting(Operation& op);
  std::uint64_t wake_jitter_ns();
  void note_failure(AcquirePart& acquire, std::uint64_t now) const;
  // An acquire of `key` was granted here, valid for `validity` from now: see held_here_.
  void note_held(const std::string& key, std::chrono::microseconds validity, OperationId holder);
  [[nodiscard]] bool held_here(const std::string& key, std::uint64_t now) const;
  void note_release(const Operation& op, const Round& round);
  void finish(const std::shared_ptr<Operation>& op, Result&& result);
  // Runs a user callback; its exceptions stop here. While it runs, deleting the Client
  // defers freeing this object (see destroy_from_callback).
  void call_back(const Callback& done, Result&& result) noexcept;
  // The library's own release of a failed or cancelled acquire attempt (its key, token, ttl
  // and the masters never sent its SET: AcquirePart::attempt_never_sent).
  void release_failed_attempt(Operation& attempt);
  void warn_failed_release(const Operation& op, const Result& result) const;
  void cancel(OperationId id);
  void shutdown();
  void stop_leases();  // lib/lease.cpp
  // Loop thread, at shutdown: begins the releases noted (note_lease_release) whose task has not
  // run yet (it may still be queued behind a shutdown that runs first: a caller's loop, a
  // callback). lib/lease.cpp.
  void begin_lease_releases();

  // How many freed operations, and rounds, are kept for reuse (each about 0.6 KiB).
  static constexpr std::size_t kCachedBlocks = 1024;

  const std::uint64_t id_;
  ClientOptions options_;  // validated, then max_lock_ttl defaulted (by endpoints_'s initialiser)
  const std::vector<Endpoint> endpoints_;
  // One OpenSSL context when any master is rediss:// (built, and its files checked, at
  // construction); null for a plain fleet, which never touches OpenSSL. Outlives every
  // Connection (their TlsSessions refer to it).
  const std::unique_ptr<TlsContext> tls_;
  std::shared_ptr<const Clock> clock_;  // the validity clock
  Diagnostics diagnostics_;
  LockCommands commands_;  // computes the scripts' SHA1s: may throw, so before the loop exists
  // Before everything that refers to it (every Connection and timer), so it is destroyed
  // after them; created only once everything that may throw is built (a loop thread that
  // started would never be told to close, and ~EventLoop would wait for it forever).
  std::unique_ptr<EventLoop> loop_;
  RoundDeadlines deadlines_;  // before masters_: rounds live on in their connections' queues
  MasterSet masters_;
  std::string command_buffer_;  // loop thread: RoundContext::command_buffer
  // Where rounds are made (detail/pool_allocator.h): a round costs no heap allocation once
  // the cache has seen as many in flight at once (up to kCachedBlocks).
  const std::shared_ptr<std::pmr::memory_resource> rounds_memory_ = std::make_shared<BlockCache>(kCachedBlocks);
  ReleaseRoom release_room_;  // loop thread: RoundContext::release_room
  RoundContext round_context_;
  ReleaseWatch watch_;  // release notifications for this Client's waiters
  std::atomic<OperationId> next_id_{1};
  // Where operations are made (by callers on any thread; freed mostly on the loop thread).
  const std::shared_ptr<std::pmr::memory_resource> operations_pool_ = std::make_shared<BlockCache>(kCachedBlocks);
  // Where lock states are made (on the loop thread for a grant, on the caller's for an extend of
  // another Client's Lock; freed wherever the last copy of the Lock dies).
  const std::shared_ptr<std::pmr::memory_resource> lock_states_pool_ = std::make_shared<BlockCache>(kCachedBlocks);

  // Loop thread only.
  // The map's nodes come from a free list and go back to it: an operation in flight costs the
  // map no allocation once the list has grown to the number in flight (up to kCachedBlocks).
  // (unsynchronized_pool_resource cost about 300 instructions per node taken and given back.)
  BlockCache operations_memory_{kCachedBlocks};
  std::pmr::unordered_map<OperationId, std::shared_ptr<Operation>> operations_{&operations_memory_};
  std::minstd_rand jitter_rng_{std::random_device{}()};
  // Acquires waiting for a release of each key (watching it), by key, in line order: by the
  // place each took (AcquirePart::line_place, from next_line_place_), so one leaving costs
  // O(log n) (a vector's erase made 30,000 waiters giving up together stall the loop 6 s).
  using WaitingLine = std::map<std::uint64_t, OperationId>;
  std::unordered_map<std::string, WaitingLine> waiting_;
  std::uint64_t next_line_place_ = 0;
  // Keys announced released during this pass of the loop, their waiters not yet woken (true:
  // a subscriber connection was lost, ReleaseWatch::Wake).
  std::unordered_map<std::string, bool> announced_;
  // yield_to_waiters: key -> until when this Client's next acquire of it waits (loop time);
  // expired entries are swept when it has doubled (from 1024).
  std::unordered_map<std::string, std::uint64_t> yield_until_;
  std::size_t yield_until_sweep_at_ = 1024;
  // Releases begun here by callers, oldest first: no adopted copy of that lock is extended
  // here until released_here_end(submitted). Whatever a release's outcome, its commands, and
  // the SETs and extends that went before it, may still run on a master later than anything
  // sent since on another connection (a resend after NOSCRIPT; bytes held up on a connection
  // dropped meanwhile). With L the longest ttl in use (max_lock_ttl, or the longest acquired
  // or extended here, as it is when asked: L only grows): every command sent before the
  // release lands within L of it or never (the bounded delay Redlock assumes), and its key
  // lives at most L more; the release itself is written within connect_timeout (a connection
  // being made holds it until its handshake is done), so the end is connect_timeout + 2L after
  // the submission. (Its NOSCRIPT resend is sent only within L of its start:
  // RoundArgs::resend_before.) Ends come in submission
  // order, so expired entries leave from the front. 16 bytes per release, no allocation once
  // grown; searched only by an extend of an adopted copy. At most kMaxReleasedHere entries:
  // past that the oldest is dropped and every adopted copy is refused until it would have ended.
  struct ReleasedHere {
    std::uint64_t owner = 0;      // owner_of(key, token)
    std::uint64_t submitted = 0;  // validity_clock_ns() at the release's beginning
  };
  static constexpr std::size_t kMaxReleasedHere = std::size_t{1} << 20;  // 16 MiB
  RingQueue<ReleasedHere> released_here_;
  std::optional<std::uint64_t> released_here_dropped_;  // the submission of the newest entry dropped
  Milliseconds longest_ttl_{0};
  // Keys this Client was granted by an acquire, until when (loop time: the acquire's validity;
  // renewals do not move it, so that an extend decided after a release began cannot put it
  // back). While one is held here, announcements of the key wake none of this Client's
  // waiters: none could win it. And the grant resets its siblings' free-retry spacing: only
  // one waiter of a Client can win a handoff, and the others' losses to it must not push
  // their next retries out (a Client with six waiters of one key kept the fifth waiting for
  // seconds). Only keys that had waiters here at the grant. Erased when a release of the key
  // begins here; expired entries are swept when it has doubled (from 1024).
  std::unordered_map<std::string, std::uint64_t> held_here_;
  std::size_t held_here_sweep_at_ = 1024;
  bool shutting_down_ = false;
  bool shut_down_ = false;
  // Loop thread. Set once an extend made an adopted or another Client's Lock this Client's (a
  // state of its own beside the granted one's): from then on every release looks for other
  // states of its lock (RestartGuard::released_elsewhere), not only a release of an adopted copy.
  bool adopted_states_ = false;
  int callbacks_running_ = 0;  // user callbacks on the stack (a Client may be deleted in one)
  // One blocking wait_connected, answered by the loop only (at the count, at its deadline, or
  // false at shutdown): its caller sleeps on `answer` and never touches the Client again after
  // posting, so a Client destroyed on another thread meanwhile answers false instead of being
  // read after it was freed (a review: the old loop posted a query every 5 ms, re-reading the
  // Client each time). The loop thread alone reads and sets it; the caller only waits on the future.
  struct ConnectWait {
    std::size_t count = 0;
    std::uint64_t deadline_ns = 0;
    std::promise<bool> answer;
    bool answered = false;
    void give(bool connected) {
      if (answered) return;
      answered = true;
      answer.set_value(connected);
    }
  };
  std::vector<std::shared_ptr<ConnectWait>> connect_waits_;
  EventLoop::TimerId connect_check_timer_ = 0;
  void check_connect_waits();
  std::vector<std::weak_ptr<LeaseCore>> leases_;  // stopped at shutdown; swept when it doubles
  std::size_t leases_sweep_at_ = 64;
  // Status queries in flight: answered at shutdown (StatusQuery::finish); swept when it doubles.
  std::vector<std::weak_ptr<StatusQuery>> status_queries_;
  std::size_t status_queries_sweep_at_ = 64;
  // Once a second while leases live: did the validity clock move further than the loop's since
  // the last look (the machine slept)? Then every lease checks its loss moment. lib/lease.cpp.
  void arm_sleep_check();
  void check_for_sleep();
  EventLoop::TimerId sleep_check_timer_ = 0;
  Clock::time_point sleep_check_validity_{};
  std::uint64_t sleep_check_loop_ns_ = 0;
  std::mutex releasing_mutex_;  // a leaf: never held while taking another lock
  std::vector<std::weak_ptr<LeaseCore>> releasing_;  // guarded; swept when it doubles
  std::size_t releasing_sweep_at_ = 64;               // guarded
};

}  // namespace redlock::detail

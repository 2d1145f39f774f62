// SPDX-License-Identifier: Apache-2.0
// The life of one lock operation on the loop thread: begin, send rounds, decide, grant or
// retry, finish (detail/client_impl.h).
#include "detail/client_impl.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdio>
#include <future>
#include <utility>

#include "detail/ms_text.h"
#include "detail/status_query.h"
#include "detail/sweep.h"
#include "detail/token.h"
#include "detail/uv_handle.h"
#include "detail/validation.h"
#include "redlock/errors.h"

namespace redlock::detail {

namespace {

// The user's on_warning, and after it returns the check every callback on the loop thread
// gets (ClientImpl::end_if_forked_child): a child forked in it must not run the parent's loop.
std::function<void(const std::string&)> on_warning_for(std::function<void(const std::string&)> user,
                                                       const ClientImpl* client) {
  if (!user) return nullptr;
  return [user = std::move(user), client](const std::string& text) {
    struct AfterUserCode {
      const ClientImpl* client;
      ~AfterUserCode() { client->end_if_forked_child(); }
    } after{client};
    user(text);
  };
}

}  // namespace

using std::chrono::microseconds;

void call_user(const Callback& done, Result&& result) noexcept {
  if (!done) return;
  try {
    done(std::move(result));
  } catch (...) {
  }
}

namespace {

// Whether a waiter holds its Client's wake-up for its key (ClientImpl::wake_waiters): woken
// while its attempt is out, a wake-up's retry scheduled, or that retry in flight or pending
// (a wake-up's free retry: not a poll, not a known expiry, not the give-up timer).
bool holds_wake(const AcquirePart& acquire) {
  return acquire.woken || acquire.wake_scheduled || (acquire.free_retry && !acquire.polling && !acquire.giving_up);
}

Milliseconds default_max_lock_ttl(Milliseconds ttl) {
  const auto seconds = (ttl.count() + 999) / 1000;
  return Milliseconds((seconds + 1) * 1000);
}

// Validates (throws ConfigError naming the bad value), then fills in the defaults that
// depend on other fields. Returns the parsed masters.
std::vector<Endpoint> prepare(ClientOptions& options) {
  std::vector<Endpoint> endpoints = validate(options);
  if (options.max_lock_ttl.count() == 0) options.max_lock_ttl = default_max_lock_ttl(options.ttl);
  return endpoints;
}

// The TLS context, if any master is rediss:// (throws ConfigError naming a bad file).
std::unique_ptr<TlsContext> make_tls_context(const ClientOptions& options, const std::vector<Endpoint>& endpoints) {
  for (const auto& endpoint : endpoints) {
    if (endpoint.tls) return std::make_unique<TlsContext>(options.tls);
  }
  return nullptr;
}

std::uint64_t next_client_id() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

ClientImpl::ClientImpl(ClientOptions options)
    : id_(next_client_id()),
      options_(std::move(options)),
      endpoints_(prepare(options_)),
      tls_(make_tls_context(options_, endpoints_)),
      clock_(options_.clock ? options_.clock : std::make_shared<SteadyClock>()),
      diagnostics_(endpoints_, on_warning_for(options_.on_warning, this)),
      commands_(options_.key_prefix, options_.fence_key, options_.restart_guard),
      loop_(std::make_unique<EventLoop>(options_.loop)),
      deadlines_(*loop_),
      masters_(*loop_, options_, endpoints_, commands_, diagnostics_, tls_.get()),
      round_context_{*loop_,     masters_,      commands_,      diagnostics_, *clock_, options_.command_timeout,
                     deadlines_, release_room_, command_buffer_},
      watch_(*loop_, options_, endpoints_, tls_.get(), masters_,
             [this](const std::string& key, bool lost) { on_release_announced(key, lost); }) {
  // Connections are created on the loop thread: they register with the loop, which is
  // already running there. A Client on a caller's loop may be destroyed before that loop
  // ever ran this task: then the masters are closed and start() does nothing.
  loop_->post([this] { masters_.start(); });
  if (tls_ != nullptr && !tls_->verifies_peer()) {
    loop_->post([this] {
      diagnostics_.warn(
          "TlsOptions::insecure_skip_verify is set: the rediss:// masters' certificates are NOT checked; anyone on "
          "the path can impersonate them and read or change every command, AUTH included");
    });
  }
}

ClientImpl::~ClientImpl() {
  if (loop_->owns_thread()) {
    if (loop_->in_loop_thread()) {
      std::fputs("redlock: Client destroyed on its own loop thread; this would deadlock\n", stderr);
      std::abort();
    }
    loop_->post([this] { shutdown(); });
  } else {
    shutdown();
  }
  loop_->join();  // the loop thread ends once the shutdown has closed every handle
}

void ClientImpl::call_back(const Callback& done, Result&& result) noexcept {
  run_as_callback([&] { call_user(done, std::move(result)); });
}

bool ClientImpl::inside_callback() const noexcept { return loop_->in_loop_thread() && callbacks_running_ > 0; }

void ClientImpl::destroy_from_callback(std::unique_ptr<ClientImpl> impl) {
  if (impl->loop_->owns_thread()) {
    std::fputs("redlock: Client destroyed inside its own callback on its own loop thread; this would deadlock\n",
               stderr);
    std::abort();
  }
  impl->shutdown();
  // An idle handle runs once on the loop's next iteration, frees the Client, then closes.
  auto idle = make_uv_handle<uv_idle_t>();
  uv_idle_init(impl->loop_->uv(), idle.get());
  idle->data = impl.release();
  uv_idle_start(idle.release(), [](uv_idle_t* handle) {
    delete static_cast<ClientImpl*>(handle->data);
    UvClose<uv_idle_t>{}(handle);
  });
}

void ClientImpl::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  masters_.begin_close();  // every acquire in flight gets room for its release
  begin_lease_releases();  // first: a Lease destroyed before ~Client is released before anything else
  shutting_down_ = true;
  std::vector<OperationId> live;
  for (auto& [id, op] : operations_) {
    if (!op->internal()) live.push_back(id);
  }
  for (const OperationId id : live) cancel(id);
  for (const auto& wait : connect_waits_) wait->give(false);
  connect_waits_.clear();
  if (connect_check_timer_ != 0) loop_->cancel(std::exchange(connect_check_timer_, 0));
  // What was handed to the loop before this point runs now, while the connections are open:
  // a release among it is sent (begin() lets releases through), whatever else is refused.
  // Run after the close, a release queued behind the shutdown (a grant's callback releasing
  // while ~Client ran on another thread) was answered `cancelled` and never sent: its key
  // stayed for its whole ttl (a review: 310 in 30 rounds). Later posts are refused at once.
  loop_->refuse_posts_and_run_accepted();
  // After the tasks above (a Lease's release task finds its Client there and begins it), and
  // before the loop closes: the leases must not post to it from now on.
  stop_leases();
  masters_.close();
  watch_.close();
  // The close answered every command whose sink its connection still had. A command that a
  // frozen master left unanswered past its deadline, under a backlog of more than
  // Connection::kKeepLateSinksUpTo, gave its sink up at the next send there, and its round or
  // status query waits for its deadline's task, which the loop's close drops: their callbacks
  // were never called (a review: 0 of 300 releases, extends and status queries submitted while
  // three masters were frozen, at a ~Client that came before that task ran). They are answered
  // now, once each (a round already decided, or a query finished, is passed by), the masters
  // that did not answer timed out: their deadline had passed. A release is then `cancelled`
  // with how many masters it was written to (decided(), the answer of a release the close
  // cuts): whether it ran is unknown. `released` would claim what no quorum confirmed, and
  // quorum_unreachable an outage of masters that only went unheard because the Client shut
  // down. An extend reads quorum_unreachable, as one the close cuts does.
  deadlines_.expire_all();
  for (const auto& weak : status_queries_) {
    if (const auto query = weak.lock()) query->finish();
  }
  status_queries_.clear();
  for (auto& [id, op] : operations_) op->round.reset();  // cut op <-> round cycles
  operations_.clear();
  loop_->close();
}

OperationId ClientImpl::submit(std::shared_ptr<Operation> op) {
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  const OperationId id = op->id;
  // The task carries two raw pointers: they fit in std::function's own storage, so handing
  // an operation to the loop allocates nothing (a captured shared_ptr would). Meanwhile the
  // operation owns itself, and begin() takes that over. Every task the loop accepts runs
  // (EventLoop::close runs what is still queued), so none is left owning itself.
  Operation* const raw = op.get();
  raw->in_transit = std::move(op);
  if (!loop_->post([this, raw] { begin(std::exchange(raw->in_transit, nullptr)); })) {
    const std::shared_ptr<Operation> refused = std::exchange(raw->in_transit, nullptr);
    Result result;
    result.outcome = Outcome::cancelled;
    result.message = forked() ? kMadeBeforeFork : "the client is shutting down";
    call_user(refused->done, std::move(result));
  }
  return id;
}

void ClientImpl::cancel_soon(OperationId id) {
  loop_->post([this, id] { cancel(id); });
}

void ClientImpl::begin(const std::shared_ptr<Operation>& op) {
  Result refused;
  refused.outcome = Outcome::invalid_argument;
  const RoundKind kind = op->kind();
  if (kind == RoundKind::release) {
    // Given up from its submission on, whatever the release's outcome: the leases keeping the
    // Lock through other copies stop now, not at their next renewal (a review: "held" for one
    // renew interval while another Client was granted). The releasing Lease is stopped already.
    // A copy without the state (adopted) finds the granted copies by key and token (a review:
    // the original said "held" until its next renewal), and so does any release once a Lock
    // extended from an adopted copy has a state of its own beside the granted one (a review:
    // either released, the other said "held"). A scan of the live locks: only on those paths.
    const std::shared_ptr<LockState>& state = op->release().state;  // (kept: the round reads not_run)
    if (state && state->on_lost) state->on_lost(LossReason::taken);
    if (!op->internal()) remember_release(*op);
    if ((!state && !op->internal()) || adopted_states_) {
      masters_.released_elsewhere(owner_of(op->key, op->release().token));
    }
  }
  if (shutting_down_ && !op->internal() && kind != RoundKind::release) {
    refused.outcome = Outcome::cancelled;
    refused.message = "the client is shutting down";
  } else if (kind == RoundKind::acquire) {
    if (op->acquire().refused) {
      refused.message = std::move(*op->acquire().refused);
    } else if (auto why = check_resource(op->acquire().resource)) {
      refused.message = std::move(*why);
    } else if (auto fence = check_not_fence_key(options_, op->acquire().resource)) {
      refused.message = std::move(*fence);
    }
  } else if (op->key.empty() || op->token().empty()) {
    refused.message = "the Lock has no key or token (was it default-constructed?)";
  } else if (auto why = check_lock_key(op->key)) {
    refused.message = std::move(*why);  // a Lock's fields are public: one built by hand
  } else if (auto bad_token = check_token(op->token())) {
    refused.message = "the Lock's " + std::move(*bad_token);
  }
  if (refused.message.empty() && kind != RoundKind::release) {
    if (auto why = check_ttl(options_, op->ttl)) {
      refused.message = std::move(*why);
    } else if (options_.restart_guard && op->ttl > options_.max_lock_ttl) {
      refused.message = "ttl " + std::to_string(op->ttl.count()) + " ms exceeds max_lock_ttl " +
                        std::to_string(options_.max_lock_ttl.count()) + " ms, which the restart guard waits out";
    }
  }
  if (refused.message.empty() && kind == RoundKind::extend && op->extend().lock.lost()) {
    refused.outcome = Outcome::lost;
    refused.message =
        "this lock is lost (masters that granted it restarted, or an extend found it gone on more than N - quorum "
        "masters); a lost lock is never extended";
  } else if (refused.message.empty() && kind == RoundKind::extend && given_up(op->extend().lock)) {
    refused.message = "this Lock was released; a released lock is never extended (acquire it again)";
  } else if (refused.message.empty() && kind == RoundKind::extend && op->extend().lock.adopted()) {
    // An adopted copy's state is new: no release marked it. Sent now, the extend could run
    // before that release on a master (a release whose script the master forgot is sent again
    // as EVAL, behind it: a review, "extended" 9 of 9 after the key was deleted), and after it,
    // whatever its outcome: its commands may still run late (ClientLossTest, reviews).
    switch (released_here(op->key, op->token())) {
      case ReleasedHereAnswer::no:
        break;
      case ReleasedHereAnswer::yes:
        refused.message =
            "this lock was released on this Client (its release may still run on a master, late); a released lock "
            "is never extended";
        break;
      case ReleasedHereAnswer::not_known:
        refused.message = "more than " + std::to_string(kMaxReleasedHere) +
                          " releases were begun on this Client within connect_timeout + twice the longest ttl in "
                          "use, and the oldest were forgotten: no adopted copy is extended here until their window "
                          "ends (extend it on the Client that granted it, or acquire again)";
        break;
    }
  }
  if (!refused.message.empty()) {
    call_back(op->done, std::move(refused));
    return;
  }
  if (kind != RoundKind::release) longest_ttl_ = std::max(longest_ttl_, op->ttl);
  if (kind == RoundKind::release && !held_here_.empty()) held_here_.erase(op->key);  // its announcements wake our waiters again
  if (kind == RoundKind::extend && op->extend().lock.adopted() && LockAccess::state(op->extend().lock)) {
    // An adopted or another Client's Lock got a state of this Client's for the extend: kept
    // among the live locks from the extend's start (no epochs: the restart guard passes it
    // by), so that a release of any copy begun while it is in flight finds it and the grant
    // then refuses (a review: kept only at the grant, such an extend said extended, 2.97 s,
    // after the release had deleted the key, 6 of 6).
    masters_.remember(LockAccess::state(op->extend().lock));
    adopted_states_ = true;
  }
  operations_.emplace(op->id, op);
  if (kind == RoundKind::acquire && options_.yield_to_waiters.count() > 0) {
    // Fairness: this Client released this key lately and waiters elsewhere heard it.
    if (const auto it = yield_until_.find(op->key); it != yield_until_.end()) {
      std::uint64_t until = it->second;
      yield_until_.erase(it);
      const std::uint64_t wait_deadline = op->acquire().wait_deadline_ns;
      if (wait_deadline != 0) until = std::min(until, wait_deadline);
      if (until > now_ns()) {
        arm_retry(op, until, false);
        return;
      }
    }
  }
  send_round(op, kind);
}

void ClientImpl::send_round(const std::shared_ptr<Operation>& op, RoundKind kind) {
  if (kind != RoundKind::fence) ++op->attempts;  // the fencing round belongs to its acquire's attempt
  RoundArgs args{kind, op->key, {}, op->ttl, false, 0};
  std::shared_ptr<LockState> lock_state;  // see Round::Round
  switch (kind) {
    case RoundKind::acquire:
      args.token = make_token();  // the attempt's token (AcquirePart::attempt_token)
      args.fencing = op->acquire().fencing;
      // Retries learn the holders' PTTLs; the first attempt stays a plain SET NX PX.
      args.learn_pttl = !args.fencing && op->attempts > 1;
      break;
    case RoundKind::fence:
      args.token = std::move(op->acquire().attempt_token);
      args.fencing = true;
      args.fence = op->acquire().fenced->fence;
      for (std::uint32_t i = 0; i < op->acquire().fenced->masters.size(); ++i) {
        if (op->acquire().fenced->masters[i].status == MasterStatus::ok) args.granted |= std::uint64_t{1} << i;
      }
      lock_state = op->acquire().fenced->state;  // and the grants that came after the decision
      break;
    case RoundKind::extend:
      args.token = op->extend().lock.token;
      args.resend_before = op->extend().resend_before;
      // Only a state whose epochs this Client's restart guard recorded (not the fresh one of an
      // adopted or other Client's Lock, which records none).
      if (const auto& state = LockAccess::state(op->extend().lock); state && state->votes > 0) lock_state = state;
      break;
    case RoundKind::release:
      // A release sends its token in this one round (a NOSCRIPT resend encodes the round's own).
      args.token = std::move(std::get<ReleasePart>(op->part).token);
      args.never_sent = std::get<ReleasePart>(op->part).never_sent;
      lock_state = std::get<ReleasePart>(op->part).state;  // where its SET did not run (LockState::not_run)
      // A NOSCRIPT read later than the longest ttl in use is not answered: sent then, the
      // release could land after released_here_'s window, under an extend it let through (a
      // review: replies held 2.1 s against a 2 s window, two holders 3 of 3). That master keeps
      // the key until its ttl.
      args.resend_before = clock_->now() + longest_ttl_in_use();
      break;
  }
  // A raw pointer is enough, and keeps the callback allocation-free (two pointers fit in
  // std::function's own storage): an undecided round's operation is alive in operations_,
  // and every way an operation ends closes its undecided round first (close() drops this).
  Operation* const owner = op.get();
  auto round = std::allocate_shared<Round>(PoolAllocator<Round>(rounds_memory_), round_context_, std::move(args),
                                           std::move(lock_state), op->internal(), [this, owner](Round& decided_round) {
                                             const auto it = operations_.find(owner->id);
                                             if (it == operations_.end()) return;
                                             // A copy: finishing erases the map's entry.
                                             const std::shared_ptr<Operation> live = it->second;
                                             decided(live, decided_round);
                                           });
  op->round = round;
  if (kind == RoundKind::extend) {
    const Lock& lock = op->extend().lock;
    // An adopted lock's deadline says nothing (its validity is unknown here): the masters
    // decide whether it is still ours.
    if (!lock.adopted() && round->sent_at() >= deadline_of(lock)) {
      round->close();
      Result expired;
      expired.outcome = Outcome::validity_expired;
      expired.message = "the lock's deadline has passed; an expired lock is never extended";
      finish(op, std::move(expired));
      return;
    }
  }
  round->start();
}

void ClientImpl::decided(const std::shared_ptr<Operation>& op, Round& round) {
  const bool success = round.tally().verdict() == Verdict::success;
  const std::uint32_t size = masters_.size();

  if (round.kind() == RoundKind::acquire || round.kind() == RoundKind::fence) {
    op->acquire().attempt_token = round.take_token();
  }
  if (round.kind() == RoundKind::acquire) {
    op->acquire().attempt_never_sent = round.never_sent();
    op->acquire().attempt_room = round.take_room();
  }
  Result result;
  result.masters = round.take_masters();
  result.attempts = op->attempts;
  if (!success) {
    result.outcome = round.tally().failure_outcome();
    result.message = std::to_string(round.tally().granted) + " of " + std::to_string(size) + " masters " +
                     (round.kind() == RoundKind::fence ? "acknowledged the fencing token, " : "agreed, ") +
                     std::to_string(masters_.quorum()) + " needed";
  }

  switch (round.kind()) {
    case RoundKind::release:
      if (success) result.outcome = Outcome::released;
      if (!success && shutting_down_ && result.outcome == Outcome::quorum_unreachable) {
        // The connections closed under it (~Client), not the masters: its commands were written
        // at the close where a connection was ready (a release then ~Client on one thread
        // deleted every key, and said "quorum_unreachable: 0 of 3 masters agreed"), and dropped
        // unsent where one was still in its handshake (review 43: "written to the connected
        // masters" was said of those too).
        result.outcome = Outcome::cancelled;
        // (Decided in its start() before the close, or by the close: MasterSet::ready_set.)
        const int written = std::popcount(round.handed_over() & masters_.ready_set());
        const std::string tally = std::move(result.message);
        result.message = written == 0
                             ? "the Client shut down before the release was sent: it was written to none of the " +
                                   std::to_string(size) +
                                   " masters (their connections were not ready); the key "
                                   "stays until its ttl (" +
                                   tally + ")"
                             : "the Client shut down before a quorum answered; the release was written to " +
                                   std::to_string(written) + " of " + std::to_string(size) +
                                   " masters, whether it ran there is unknown (" + tally + ")";
      }
      if (success && !op->internal()) note_release(*op, round);
      if (op->internal()) warn_failed_release(*op, result);
      finish(op, std::move(result));
      return;
    case RoundKind::extend:
      if (success) {
        grant(op, round.sent_at(), std::move(result), LockAccess::state(op->extend().lock), op->extend().lock.fence);
      } else {
        mark_lost_if_proven(op->extend().lock, result);
        finish(op, std::move(result));
      }
      return;
    case RoundKind::acquire: {
      if (!success) {
        AcquirePart& acquire = op->acquire();
        acquire.free_at_said_ns = 0;
        acquire.free_at_ns =
            round.args().learn_pttl ? quorum_free_at(round, result.masters, acquire.free_at_said_ns) : 0;
        break;
      }
      auto state = make_lock_state(size);
      for (std::uint32_t i = 0; i < size; ++i) {
        if (result.masters[i].status == MasterStatus::ok) {
          state->granted_on |= std::uint64_t{1} << i;
          state->epochs[i] = masters_.incarnation(i).epoch;
          ++state->votes;
        }
      }
      round.keep_late_grants(state);
      state->granted_by = id_;
      state->owner = owner_of(op->key, op->acquire().attempt_token);
      state->never_sent = op->acquire().attempt_never_sent;
      state->not_run = round.not_run();
      // From now on a restart of a granting master takes its vote away, also while a fencing
      // round is out (RestartGuardTest.AGrantLostDuringTheFencingRoundIsNotHandedOut).
      masters_.remember(state);
      AcquirePart& acquire = op->acquire();
      if (!acquire.fencing) {
        grant(op, round.sent_at(), std::move(result), std::move(state), 0);
        return;
      }
      // Fencing round 2: raise the counters to the highest value the granting quorum
      // returned; the lock is handed over only once a quorum acknowledged it.
      FencedGrant fenced;
      for (std::uint32_t i = 0; i < size; ++i) {
        if (result.masters[i].status == MasterStatus::ok) {
          fenced.fence = std::max(fenced.fence, static_cast<std::uint64_t>(round.counter(i)));
        }
      }
      fenced.started = round.sent_at();
      fenced.masters = std::move(result.masters);
      fenced.state = std::move(state);
      acquire.fenced = std::move(fenced);
      send_round(op, RoundKind::fence);
      return;
    }
    case RoundKind::fence: {
      if (!success) {
        op->acquire().free_at_ns = 0;
        break;
      }
      FencedGrant fenced = std::move(*op->acquire().fenced);
      op->acquire().fenced.reset();
      result.masters = std::move(fenced.masters);
      grant(op, fenced.started, std::move(result), std::move(fenced.state), fenced.fence);
      return;
    }
  }
  fail_attempt(op, std::move(result));
}

// Loop thread. A scan: only for an extend of an adopted copy.
ClientImpl::ReleasedHereAnswer ClientImpl::released_here(const std::string& key, const std::string& token) const {
  if (released_here_.empty() && !released_here_dropped_) return ReleasedHereAnswer::no;  // (no clock reading)
  const std::uint64_t owner = owner_of(key, token);
  // The longest ttl as it is now: one used since the release may have been that of a command
  // sent before it (a review: a window fixed at the release let such an extend through).
  const std::uint64_t now = validity_clock_ns();
  const auto released_too_lately = [&](std::uint64_t submitted) { return released_here_end(submitted) > now; };
  for (std::size_t i = 0; i < released_here_.size(); ++i) {
    if (released_here_[i].owner == owner && released_too_lately(released_here_[i].submitted)) {
      return ReleasedHereAnswer::yes;
    }
  }
  // The ring overflowed: a release whose entry was dropped may have been this lock's.
  if (released_here_dropped_ && released_too_lately(*released_here_dropped_)) return ReleasedHereAnswer::not_known;
  return ReleasedHereAnswer::no;
}

std::uint64_t ClientImpl::released_here_end(std::uint64_t submitted) const noexcept {
  const Milliseconds longest = longest_ttl_in_use();
  // A release submitted while a master's connection is being made waits for its handshake,
  // up to connect_timeout, before it is written (a review: written then, it landed after a
  // window counted from the submission, two holders 6 of 6).
  return deadline_after(deadline_after(deadline_after(submitted, options_.connect_timeout), longest), longest);
}

Milliseconds ClientImpl::longest_ttl_in_use() const noexcept { return std::max(options_.max_lock_ttl, longest_ttl_); }

// The window is on the validity clock, as is the release's resend bound (RoundArgs::resend_before).
std::uint64_t ClientImpl::validity_clock_ns() const {
  const auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(clock_->now().time_since_epoch()).count();
  return since > 0 ? static_cast<std::uint64_t>(since) : 0;
}

// Another Client may hold the lock now; before, remaining() went on counting down the old
// validity and lost() said false (ClientTest.AnExtendThatProvesTheLockGoneMarksEveryCopyLost).
// A "no key" against timeouts proves nothing: the silent masters may still hold it.
void ClientImpl::mark_lost_if_proven(const Lock& lock, const Result& result) {
  const auto& state = LockAccess::state(lock);
  if (!state || result.outcome != Outcome::lost) return;
  const std::size_t gone = result.count(MasterStatus::not_found) + result.count(MasterStatus::held_by_other);
  if (gone > masters_.size() - masters_.quorum()) state->mark_lost(LossReason::taken);
}

// A quorum said yes; the lock is granted if validity is left. Acquire (and its fencing
// round) and extend end here.
void ClientImpl::grant(const std::shared_ptr<Operation>& op, std::chrono::steady_clock::time_point started,
                       Result&& result, std::shared_ptr<LockState> state, std::uint64_t fence) {
  const bool acquiring = op->kind() == RoundKind::acquire;
  if (acquiring && state->lost.load(std::memory_order_acquire)) {
    for (std::uint32_t i = 0; i < result.masters.size(); ++i) {
      if (result.masters[i].status != MasterStatus::ok || state->epochs[i] != 0) continue;
      result.masters[i].status = MasterStatus::not_counted;
      result.masters[i].error = "restarted after its grant, before the fencing round ended: the grant is gone";
    }
    result.outcome = Outcome::quorum_unreachable;
    result.message = "a master that granted it restarted before the fencing round ended: " +
                     std::to_string(state->votes) + " grants left, " + std::to_string(masters_.quorum()) + " needed";
    fail_attempt(op, std::move(result));
    return;
  }
  if (!acquiring && given_up(op->extend().lock)) {
    // Released (or marked lost) while the extend was in flight: the holder gave it up, and the
    // release, behind the extend on every connection, deletes what it extended (a review: async
    // extends so raced said "extended" with 2.97 s of validity while another Client held it).
    const bool lost = op->extend().lock.lost();
    result.outcome = lost ? Outcome::lost : Outcome::invalid_argument;
    result.message = lost ? "the lock was found lost while the extend was in flight; a lost lock is never extended"
                          : "this Lock was released while the extend was in flight; a released lock is never "
                            "extended (acquire it again)";
    finish(op, std::move(result));
    return;
  }
  const auto drift = drift_for(op->ttl, options_.drift_factor, options_.drift_constant);
  auto deadline = started + op->ttl - drift;
  // An extend never shortens (the script keeps a longer PTTL), so the lock's deadline never
  // moves earlier. An adopted lock's old deadline means nothing.
  if (!acquiring && !op->extend().lock.adopted()) deadline = std::max(deadline, deadline_of(op->extend().lock));
  const auto now = clock_->now();
  const auto validity = std::chrono::duration_cast<microseconds>(deadline - now);
  if (validity <= options_.min_validity) {
    result.outcome = Outcome::validity_expired;
    result.message = "a quorum answered after " + ms_text(std::chrono::duration_cast<microseconds>(now - started)) +
                     ", leaving validity " + ms_text(validity) + " (drift allowance " + ms_text(drift) + ")";
    if (acquiring) {
      fail_attempt(op, std::move(result));
    } else {
      finish(op, std::move(result));
    }
    return;
  }
  // The operation ends here: what the Lock needs is moved out of it (its key stays: finish()
  // stops waiting on it).
  Lock lock;
  if (acquiring) {
    AcquirePart& acquire = op->acquire();
    lock.resource = std::move(acquire.resource);
    lock.key = op->key;
    lock.token = std::move(acquire.attempt_token);
    acquire.attempt_room.reset();  // no release of the attempt: the lock's own has its reserve
    lock.fence = fence;
    LockAccess::set_state(lock, std::move(state));  // granted_by and owner set at the decision
  } else {
    lock = std::move(op->extend().lock);
    LockAccess::set_adopted(lock, false);  // its validity is known from now on
  }
  lock.ttl = op->ttl;
  lock.started = started;
  lock.deadline = deadline;
  LockAccess::state(lock)->raise_deadline(deadline);
  if (acquiring) note_held(op->key, validity, op->id);
  result.outcome = acquiring ? Outcome::acquired : Outcome::extended;
  result.lock = std::move(lock);
  result.validity = validity;
  result.message.clear();
  finish(op, std::move(result));
}

// A failed acquire attempt: release it everywhere, then retry or give up.
//
// Waiting (docs/design.md "Waiting"): the next attempt comes at the earliest of a release
// announced for the key (ReleaseWatch: at once, jittered), the moment a quorum of the
// holders' keys could have expired (free_at_ns), and, while release notifications cannot be
// relied on or that moment is unknown, retry_delay (polling). Polls and retries at a known
// expiry use up retry_count; wake-ups do not, and are bounded by its time budget
// (retry_deadline), `wait` and the free-retry backoff (note_failure).
void ClientImpl::fail_attempt(const std::shared_ptr<Operation>& op, Result&& result) {
  AcquirePart& acquire = op->acquire();
  const std::uint64_t now = now_ns();
  note_failure(acquire, now);
  // Failed for a reason of its own: a quorum granted it (round 1 of a fenced acquire whose
  // fence round failed, or an attempt whose validity ran out), so the key was free; below.
  const bool own_failure = acquire.fenced.has_value() || granted_by_quorum(result);
  // Released on every master that was sent the SET, including those that timed out or have
  // not answered: their SET may still land, and this release is queued behind it on the same
  // connection.
  release_failed_attempt(*op);
  acquire.fenced.reset();
  if (acquire.retries_left == 0 || shutting_down_) {
    acquire.woken = acquire.woken || own_failure;  // stop_waiting passes it on: the key was free
    finish(op, std::move(result));
    return;
  }
  if (acquire.budget_deadline_ns == 0 && acquire.retries_left > 0) {
    // The time retry_count polling retries would take (saturating: "no budget").
    const auto per_retry = options_.retry_delay + options_.retry_jitter;
    if (per_retry.count() > 0 && acquire.retries_left <= kMaxDuration / per_retry) {
      acquire.budget_deadline_ns = deadline_after(now, per_retry * acquire.retries_left);
    }
  }
  // A failure of its own (its ttl too short for the round trips, its fence refused): it goes
  // to the back of the line and the next waiter is woken (its release may announce nothing:
  // a key of a short ttl may have expired by then).
  if (options_.release_notifications && !acquire.watching) {
    acquire.watching = true;
    watch_.watch(op->key);
    acquire.line_place = ++next_line_place_;
    waiting_[op->key].emplace(acquire.line_place, op->id);
  } else if (acquire.watching && own_failure) {
    WaitingLine& line = waiting_[op->key];
    line.erase(acquire.line_place);
    acquire.line_place = ++next_line_place_;
    line.emplace(acquire.line_place, op->id);
  }
  const std::uint64_t poll_at = next_poll_at(now);
  const auto before = [](std::uint64_t at, std::uint64_t deadline) { return deadline == 0 || at < deadline; };
  const std::uint64_t free_deadline = retry_deadline(acquire);  // wait, and retry_count's time budget
  const bool heard = options_.release_notifications && watch_.reliable(op->key);
  // Consumed: a later failure that learned nothing (validity expired, a fence round) must not
  // reuse a moment that has passed, which would retry at once again and again.
  // A moment made earlier by masters that said nothing (quorum_free_at) counts from the poll
  // on; before the poll, the moment the replies said counts if it comes before the poll, else
  // this is a poll. (One hostile PTTL 0 must not make a waiter retry faster than polling would;
  // an honest quorum's expiry before the poll must not wait for the poll.)
  const std::uint64_t said_free_at = std::exchange(acquire.free_at_said_ns, 0);
  std::uint64_t known_free_at = std::exchange(acquire.free_at_ns, 0);
  if (known_free_at < said_free_at && known_free_at < poll_at)
    known_free_at = said_free_at < poll_at ? said_free_at : 0;
  acquire.last = std::move(result);
  // A free retry: a wake-up came while this attempt was out, or a quorum of the holders'
  // keys could have expired before the next poll (or at all, when releases are heard).
  // A retry at a known expiry replaces the poll: it uses one of retry_count like the poll would
  // (a hostile master's PTTL 0 must not buy a round per millisecond).
  const bool can_poll = acquire.retries_left != 0 && before(poll_at, acquire.wait_deadline_ns);
  const bool woken = std::exchange(acquire.woken, false);
  std::uint64_t free_at = 0;
  if (woken) {
    free_at = std::max(now + wake_jitter_ns(), acquire.free_not_before_ns);
    if (can_poll && free_at >= poll_at) free_at = 0;  // backed off to the poll: poll
  } else if (known_free_at != 0 && (heard || known_free_at < poll_at)) {
    free_at = std::max(known_free_at, acquire.free_not_before_ns);
  }
  bool used_wake = false;
  if (free_at != 0 && before(free_at, free_deadline)) {
    const bool counted = !woken;
    if (counted && acquire.retries_left > 0) --acquire.retries_left;
    arm_retry(op, free_at, false);
    acquire.polling = counted;
    acquire.free_retry = true;
    used_wake = woken;
  } else if (heard && known_free_at != 0 && free_deadline != 0) {
    // Only a release can free the key before the deadline, and it will be heard: listen.
    arm_retry(op, free_deadline, true);
  } else if (can_poll) {
    if (acquire.retries_left > 0) --acquire.retries_left;
    arm_retry(op, poll_at, false);
    acquire.polling = true;
  } else if (options_.release_notifications && free_deadline != 0 && now < free_deadline) {
    // No poll left before the deadline, but a release may still be announced: listen.
    arm_retry(op, free_deadline, true);
  } else {
    acquire.woken = woken || own_failure;  // stop_waiting passes it on
    finish(op, std::move(acquire.last));
    return;
  }
  // A wake-up this one could not use, or a free key it could not take: the next waiter's.
  if ((woken && !used_wake) || own_failure) wake_waiters(op->key);
}

std::uint64_t ClientImpl::next_poll_at(std::uint64_t now) {
  const auto delay_ms = std::max<long long>(
      0, options_.retry_delay.count() + std::uniform_int_distribution<long long>(
                                            -options_.retry_jitter.count(), options_.retry_jitter.count())(jitter_rng_));
  return deadline_after(now, Milliseconds(delay_ms));
}

bool ClientImpl::granted_by_quorum(const Result& result) const {
  const auto granted = std::count_if(result.masters.begin(), result.masters.end(),
                                     [](const MasterResult& master) { return master.status == MasterStatus::ok; });
  return static_cast<std::uint32_t>(granted) >= masters_.quorum();
}

std::uint64_t ClientImpl::wake_jitter_ns() {
  // Waiters of one Client woken by one release spread over a few hundred microseconds (the
  // loop's timers have millisecond resolution, so in practice they go within ~1 ms).
  return std::uniform_int_distribution<std::uint64_t>(0, 300'000)(jitter_rng_);
}

// An attempt failed. Free retries (a wake-up's, or at a known expiry) are rate-limited: the
// first goes at once; each failed one multiplies the spacing of the next by 4 (1, 4, 16, 64 ms
// ..., up to retry_delay, where a wake-up is no sooner than the poll it would replace), counted
// from the last failed attempt of any kind. An honest handoff (a release after a quiet spell)
// is still retried at once; a PUBLISH flood costs a waiter about log4(retry_delay / 1 ms) extra
// rounds per acquire, not one per round trip. A new acquire starts over, as do the waiters
// of a key this Client was just granted for a sibling (note_held).
void ClientImpl::note_failure(AcquirePart& acquire, std::uint64_t now) const {
  if (std::exchange(acquire.free_retry, false)) {
    const std::uint64_t grown = acquire.free_backoff_ns == 0 ? 1'000'000 : acquire.free_backoff_ns * 4;
    acquire.free_backoff_ns = std::min(to_ns(options_.retry_delay), grown);
  }
  acquire.free_not_before_ns = deadline_after(now, acquire.free_backoff_ns);
}

std::uint64_t ClientImpl::retry_deadline(const AcquirePart& acquire) noexcept {
  const std::uint64_t a = acquire.wait_deadline_ns;
  const std::uint64_t b = acquire.budget_deadline_ns;
  if (a == 0) return b;
  if (b == 0) return a;
  return std::min(a, b);
}

void ClientImpl::arm_retry(const std::shared_ptr<Operation>& op, std::uint64_t at, bool give_up) {
  AcquirePart& acquire = op->acquire();
  if (acquire.retry_timer != 0) loop_->cancel(std::exchange(acquire.retry_timer, 0));
  acquire.giving_up = give_up;
  acquire.wake_scheduled = false;
  acquire.polling = false;
  acquire.free_retry = false;
  acquire.retry_at_ns = at;
  acquire.retry_timer = loop_->schedule_at(at, [this, op] {
    AcquirePart& part = op->acquire();
    part.retry_timer = 0;
    part.wake_scheduled = false;
    part.polling = false;
    part.retry_at_ns = 0;
    if (std::exchange(part.giving_up, false)) {
      finish(op, std::move(part.last));
      return;
    }
    send_round(op, RoundKind::acquire);
  });
}

// The earliest moment a quorum of masters could be free, from a failed waiting round: a
// master that granted (our attempt, released now) is free at once, a held one after its PTTL;
// a key without expiry and a master whose grant would not count (not_counted, not_permitted)
// never; fewer than a quorum of those: not known (0). One millisecond more: PTTL is whole
// milliseconds, and the key must have expired there. A master that said nothing about its key
// (its reply not read before the round was decided, a timeout, an error, no connection, no PTTL
// said) may be free at once: the moment returned takes it so, and `said_ns` is the moment from
// the replies that said something alone; fail_attempt trusts the earlier one only from the next
// poll on. From the replies read alone, one master's key left for minutes, or one hostile
// master's PTTL, stood for the quorum's expiry, and a waiter that relied on announcements
// listened until its wait ended (WaitTest.ALeftoverKeyOnOneMasterDoesNotHideAQuorumsExpiry);
// taking such masters as free at once without that limit, or counting them as replies, made a
// master refusing writes or down, or one hostile PTTL 0, look like a free quorum, and waiters
// spent their retry_count in a few milliseconds
// (WaitTest.AMasterRefusingWritesDoesNotUseUpAWaitersRetries); dropping an early moment for the
// poll delayed an honest quorum's expiry that came before the poll (four reviews).
std::uint64_t ClientImpl::quorum_free_at(const Round& round, const std::vector<MasterResult>& masters,
                                         std::uint64_t& said_ns) const {
  said_ns = 0;
  std::vector<long long> known;
  std::size_t silent = 0;
  for (std::uint32_t i = 0; i < masters.size(); ++i) {
    const MasterStatus status = masters[i].status;
    if (status == MasterStatus::not_counted || status == MasterStatus::not_permitted) continue;
    if (status == MasterStatus::ok) {
      known.push_back(0);
    } else if (const long long pttl = status == MasterStatus::held_by_other ? round.pttl(i) : kPttlUnknown; pttl >= 0) {
      // Clamped: a (hostile) PTTL beyond a year, or beyond the budget, means "not before the
      // deadline" (fail_attempt); unclamped, `+ 1` below overflows and wraps to "free now".
      known.push_back(std::min<long long>(pttl, kMaxDuration.count()));
    } else if (pttl != -1) {  // -1: no expiry, only a release frees it
      ++silent;
    }
  }
  const std::uint32_t quorum = masters_.quorum();
  if (known.size() < quorum) return 0;
  std::sort(known.begin(), known.end());
  // The silent masters, free at once, take the places of the largest values below the
  // quorum-th (there are fewer of them than a quorum: at least a quorum of rows said something).
  const long long at = silent == 0 ? known[quorum - 1] : silent >= quorum ? 0 : known[quorum - 1 - silent];
  const std::uint64_t now = now_ns();
  said_ns = deadline_after(now, Milliseconds(known[quorum - 1] + 1));
  return deadline_after(now, Milliseconds(at + 1));
}

void ClientImpl::on_release_announced(const std::string& key, bool lost) {
  // Coalesced: however many announcements of a key one pass of the loop reads (a flood from a
  // master or from any client allowed to PUBLISH), its waiters are looked at once, after the
  // reads. Per message that is a few hash lookups, never one per waiter: the loop stays free
  // to run its timers (a lease's loss signal among them).
  if (shutting_down_ || !waiting_.contains(key)) return;
  const auto [it, added] = announced_.try_emplace(key, lost);
  it->second = it->second || lost;
  if (added && announced_.size() == 1) loop_->after_io([this] { wake_announced(); });
}

void ClientImpl::wake_announced() {
  std::unordered_map<std::string, bool> keys;
  keys.swap(announced_);
  for (const auto& [key, lost] : keys) wake_waiters(key, lost);
}

// A wake-up goes to one waiter of the key: the first of this Client's (they queue in the order
// of their first failed attempt) that takes it (wake()). Only one waiter of a Client can win a
// handoff, so the Client retries as one waiter would: one attempt per wake-up, spaced by that
// waiter's free-retry backoff, while the others wait behind it. Waking every waiter made a
// PUBLISH flood cost one round per waiter per message on every master, and kept the loop
// from its timers (AttackWaitTest, AttackLeaseTest). A wake-up the first waiter cannot use is
// passed on: when it leaves without a grant holding one (stop_waiting), when its backoff has
// reached a counted retry or its deadline (wake(), fail_attempt), when it failed for a reason
// of its own (it goes to the back of the line: fail_attempt). The price: its spacing is the
// Client's (docs/design.md "One wake-up, one waiter"). `lost`: a subscriber connection was
// lost, and what it would have heard is unknown. The next in line tries once, as for an
// announcement; when the key's announcements can no longer be relied on, the waiters that
// relied on hearing a release poll (poll_instead_of_listening: by fail_attempt's rules). Waking every
// waiter instead let a master that drops subscriber connections again and again cost one
// round per waiter per drop, spaced only by each waiter's own backoff (AttackWaitTest).
void ClientImpl::wake_waiters(const std::string& key, bool lost) {
  const auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  const std::uint64_t now = now_ns();
  if (lost && !watch_.reliable(key)) {
    for (const auto& [place, id] : it->second) {
      const auto op_it = operations_.find(id);
      if (op_it != operations_.end()) poll_instead_of_listening(op_it->second, now);
    }
  }
  if (held_here(key, now)) return;  // another's release, or forged: none of ours could win
  for (const auto& [place, id] : it->second) {
    const auto op_it = operations_.find(id);
    if (op_it != operations_.end() && wake(op_it->second, now)) return;
  }
}

// A waiter that relied on hearing a release polls, now that it would not hear one: one that
// only listened (until its give-up), or one whose counted retry at the holders' expiry is
// later than its poll. The rules are fail_attempt's: a listener polls if it has a poll left
// before its wait ends (and uses one of retry_count); the expiry's retry was counted already.
// A waiter with its attempt out (fail_attempt sees it) or a wake-up's retry pending (no later
// than a poll) is left as it is.
void ClientImpl::poll_instead_of_listening(const std::shared_ptr<Operation>& op, std::uint64_t now) {
  AcquirePart& acquire = op->acquire();
  if (acquire.retry_timer == 0 || !(acquire.giving_up || acquire.polling)) return;
  const std::uint64_t poll_at = next_poll_at(now);
  if (acquire.giving_up) {
    const std::uint64_t wait = acquire.wait_deadline_ns;
    if (acquire.retries_left == 0 || (wait != 0 && poll_at >= wait)) return;
    if (acquire.retries_left > 0) --acquire.retries_left;
  } else if (poll_at >= acquire.retry_at_ns) {
    return;  // a poll already, or an expiry before the next poll
  }
  arm_retry(op, poll_at, false);
  acquire.polling = true;
}

// Wakes one waiter; whether it takes the wake-up: it will try at once, or when its attempt out
// fails, or at a wake-up's retry already scheduled that comes before any this one could
// arrange. Not taken: past its deadline, or backed off beyond a counted retry (a poll, a
// known expiry) or its deadline.
bool ClientImpl::wake(const std::shared_ptr<Operation>& op, std::uint64_t now) {
  AcquirePart& acquire = op->acquire();
  const std::uint64_t deadline = retry_deadline(acquire);
  if (deadline != 0 && now >= deadline) return false;
  if (acquire.retry_timer == 0) {
    acquire.woken = true;  // an attempt is out: retry at once if it fails
    return true;
  }
  if (acquire.wake_scheduled) return true;
  // Backed off (note_failure): never later than the retry already scheduled.
  const std::uint64_t at = std::max(now + wake_jitter_ns(), acquire.free_not_before_ns);
  if (at >= acquire.retry_at_ns) return holds_wake(acquire);
  // A wake-up that replaces a counted retry gives it back: it did not happen.
  if (acquire.polling && acquire.retries_left >= 0) ++acquire.retries_left;
  arm_retry(op, at, false);
  acquire.wake_scheduled = true;
  acquire.free_retry = true;
  return true;
}

void ClientImpl::note_held(const std::string& key, microseconds validity, OperationId holder) {
  // Only while this Client has waiters of the key: without siblings there is nothing to do,
  // and a lock cycle then costs no map entry (an allocation). A waiter that comes later is
  // woken by any announcement, as any other Client's waiter would be.
  const auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  const std::uint64_t now = now_ns();
  sweep_when_doubled(held_here_, held_here_sweep_at_, 1024, [now](const auto& entry) { return entry.second <= now; });
  held_here_[key] = deadline_after(now, static_cast<std::uint64_t>(std::chrono::nanoseconds(validity).count()));  // (> 0 here)
  // Its siblings lost this handoff to it, not to another Client: their spacing starts again.
  // Only an acquire's grant does this (a quorum, which no single master can fake; once per
  // handoff): renewals do not, and losses after it grow the spacing as always, so a hostile
  // master answering PTTL 0 to a sibling still buys no round per millisecond. (Without this
  // reset, ignoring announcements alone, the sixth of six waiters in wait_test still missed
  // its 3 s bound in 2 of 3 runs.)
  for (const auto& [place, id] : it->second) {
    const auto op_it = operations_.find(id);
    if (id == holder || op_it == operations_.end()) continue;
    AcquirePart& acquire = op_it->second->acquire();
    acquire.free_backoff_ns = 0;
    acquire.free_not_before_ns = 0;
  }
}

bool ClientImpl::held_here(const std::string& key, std::uint64_t now) const {
  const auto it = held_here_.find(key);
  return it != held_here_.end() && it->second > now;
}

void ClientImpl::stop_waiting(Operation& op) {
  AcquirePart& acquire = op.acquire();
  if (!acquire.watching) return;
  acquire.watching = false;
  watch_.unwatch(op.key);
  const auto it = waiting_.find(op.key);
  if (it == waiting_.end()) return;
  it->second.erase(acquire.line_place);
  // A wake-up it had taken (in flight, scheduled, or a wake-up's retry pending), when it was
  // cancelled or ran out of time or retries: the next waiter's. (After a grant here nobody is
  // woken: held_here. A waiter that had none passes nothing: each would cost the first in
  // line a round, and many waiters timing out together a burst of them.)
  const bool had_wake = holds_wake(acquire);
  if (it->second.empty()) {
    waiting_.erase(it);
  } else if (had_wake && !shutting_down_) {
    wake_waiters(op.key);
  }
}

// yield_to_waiters: a release that reached subscribers other than this Client's own makes
// this Client's next acquire of the key wait (begin()).
void ClientImpl::note_release(const Operation& op, const Round& round) {
  if (options_.yield_to_waiters.count() <= 0) return;
  // Compared, never summed: a master's count is whatever it says ({1, LLONG_MAX} would overflow).
  bool others = false;
  for (std::uint32_t i = 0; i < masters_.size() && !others; ++i) {
    others = round.receivers(i) > (watch_.subscribed(op.key, i) ? 1 : 0);
  }
  if (!others) return;
  const std::uint64_t now = now_ns();
  // (Swept at a fixed size, a map of live entries, a long yield or a master answering every
  // release with a second receiver, was scanned whole on every release.)
  sweep_when_doubled(yield_until_, yield_until_sweep_at_, 1024, [now](const auto& entry) { return entry.second <= now; });
  yield_until_[op.key] = deadline_after(now, options_.yield_to_waiters);
}

void ClientImpl::finish(const std::shared_ptr<Operation>& op, Result&& result) {
  if (op->kind() == RoundKind::acquire) stop_waiting(*op);
  operations_.erase(op->id);
  op->round.reset();
  call_back(op->done, std::move(result));
}

// Loop thread, at a caller's release's beginning (released_here_).
void ClientImpl::remember_release(const Operation& op) {
  const std::uint64_t now = validity_clock_ns();
  while (!released_here_.empty() && released_here_end(released_here_.front().submitted) <= now) {
    released_here_.pop_front();
  }
  if (released_here_.size() >= kMaxReleasedHere) {
    // Bounded memory, failing closed: until the dropped entry would have expired, no adopted
    // copy is extended here at all.
    released_here_dropped_ = released_here_.front().submitted;
    released_here_.pop_front();
  }
  released_here_.push_back({owner_of(op.key, std::get<ReleasePart>(op.part).token), now});
}

// The release the library sends on its own after a failed or cancelled acquire has no
// caller to read its rows: a master that refused it (NOPERM, READONLY, OOM...) keeps the key
// until its ttl, and the next attempts there read held_by_other. Say so. (Timeouts and lost
// connections are not repeated here: the acquire's own rows showed them. Nor is a refusal of the
// key itself: the same user could not have set it either, a review saw one such false warning
// per master and attempt for names outside the user's key patterns.)
void ClientImpl::warn_failed_release(const Operation& op, const Result& result) const {
  const auto& release = std::get<ReleasePart>(op.part);
  for (std::size_t i = 0; i < result.masters.size(); ++i) {
    const auto& master = result.masters[i];
    if (master.status != MasterStatus::server_error) continue;
    if (is_key_refusal_text(master.error)) continue;
    diagnostics_.warn("release of key '" + op.key + "' after a failed acquire was refused by master " +
                          master.endpoint + ": " + master.error + "; the key stays there until its ttl (" +
                          std::to_string(release.acquired_ttl.count()) + " ms)",
                      master.endpoint + " (refused cleanup releases)");
  }
}

std::shared_ptr<Operation> ClientImpl::make_operation() const {
  return std::allocate_shared<Operation>(PoolAllocator<Operation>(operations_pool_));
}

std::shared_ptr<LockState> ClientImpl::make_lock_state(std::size_t masters) const {
  return std::allocate_shared<LockState>(PoolAllocator<LockState>(lock_states_pool_), masters);
}

void ClientImpl::release_failed_attempt(Operation& attempt) {
  AcquirePart& acquire = attempt.acquire();
  auto op = make_operation();
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  op->key = attempt.key;
  // Not sent where the attempt's SET never went (round 1's, for a fenced attempt).
  op->part = ReleasePart{acquire.attempt_token, true, attempt.ttl, acquire.attempt_never_sent, {}};
  operations_.emplace(op->id, op);
  send_round(op, RoundKind::release);
  acquire.attempt_room.reset();  // queued (held to the commands bound alone: Connection::send's `covered`)
}

void ClientImpl::cancel(OperationId id) {
  const auto it = operations_.find(id);
  if (it == operations_.end()) return;
  const std::shared_ptr<Operation> op = it->second;
  if (op->kind() != RoundKind::acquire) return;
  AcquirePart& acquire = op->acquire();
  Result result = std::move(acquire.last);
  result.outcome = Outcome::cancelled;
  result.attempts = op->attempts;
  result.message = shutting_down_ ? "the client is shutting down" : "cancelled by the caller";
  if (acquire.retry_timer != 0) {
    loop_->cancel(std::exchange(acquire.retry_timer, 0));
  } else if (op->round && !op->round->decided()) {
    op->round->close();
    result.masters = op->round->take_masters();
    if (op->round->kind() == RoundKind::acquire) {
      acquire.attempt_never_sent = op->round->never_sent();
      acquire.attempt_room = op->round->take_room();
    }
    acquire.attempt_token = op->round->take_token();
    release_failed_attempt(*op);
  }
  finish(op, std::move(result));
}

Result ClientImpl::wait_for(const std::function<void(Callback)>& start) {
  if (loop_->in_loop_thread()) {
    throw UsageError("a blocking redlock call on the client's loop thread would wait for itself forever; "
                     "use the *_async functions in callbacks");
  }
  // One hand-off each way: the loop thread stores the Result and posts a semaphore, which
  // wakes this thread with one futex call (none if it has not gone to sleep yet); no mutex or
  // condition variable in between, and no spinning (std::atomic::wait yields in a loop first).
  // Shared so the slot outlives a post that is still returning on the loop thread.
  struct Slot {
    Slot() {
      if (const int rc = uv_sem_init(&done, 0); rc != 0) throw std::runtime_error(std::string("uv_sem_init: ") + uv_strerror(rc));
    }
    ~Slot() { uv_sem_destroy(&done); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    void deliver(Result answer) {
      if (delivered.exchange(true, std::memory_order_acq_rel)) return;
      result = std::move(answer);
      uv_sem_post(&done);
    }
    Result result;
    uv_sem_t done;
    std::atomic<bool> delivered{false};
  };
  // Every operation calls back exactly once. Should one ever be dropped without calling back,
  // its callback's last copy answers `cancelled` instead of leaving this thread asleep forever.
  struct Answer {
    explicit Answer(std::shared_ptr<Slot> to) : slot(std::move(to)) {}
    std::shared_ptr<Slot> slot;
    Answer(const Answer&) = delete;
    Answer& operator=(const Answer&) = delete;
    ~Answer() {
      if (slot->delivered.load(std::memory_order_acquire)) return;
      Result dropped;
      dropped.outcome = Outcome::cancelled;
      dropped.message = "the operation ended without an answer (a redlock bug: please report it)";
      slot->deliver(std::move(dropped));
    }
  };
  auto slot = std::make_shared<Slot>();
  auto answer = std::make_shared<Answer>(slot);
  start([answer](Result result) { answer->slot->deliver(std::move(result)); });
  answer.reset();
  uv_sem_wait(&slot->done);
  // The validity was reckoned on the loop thread at the decision; this thread may have woken
  // long after it. What is left now is what the caller may count on.
  Result result = std::move(slot->result);
  if (result.lock && result.validity > std::chrono::microseconds::zero()) {
    result.validity = std::min(result.validity, remaining(*result.lock));
  }
  return result;
}

bool ClientImpl::wait_connected(std::size_t count, Milliseconds timeout) {
  if (loop_->in_loop_thread()) {
    throw UsageError(
        "a blocking redlock call on the client's loop thread would wait for itself forever; "
        "wait_connected cannot see a connection made while its caller holds the loop");
  }
  auto wait = std::make_shared<ConnectWait>();
  wait->count = count;
  wait->deadline_ns = deadline_after(now_ns(), to_ns(timeout));
  auto connected = wait->answer.get_future();
  const auto give_up = steady_deadline_after(timeout);
  // A task the loop accepts always runs (at the latest in its close, after the shutdown).
  const bool posted = loop_->post([this, wait] {
    if (shut_down_) {
      wait->give(false);
      return;
    }
    connect_waits_.push_back(wait);
    check_connect_waits();
  });
  if (!posted) return false;
  // Bounded on this side too: a caller's loop that is not running answers nothing.
  if (connected.wait_until(give_up) != std::future_status::ready) return false;
  return connected.get();
}

// Loop thread: answers the waits whose count is reached or whose deadline passed, and checks
// again in 1 ms while any is left (there is no event for "a master became ready").
void ClientImpl::check_connect_waits() {
  const std::size_t ready = masters_.ready_count();
  const std::uint64_t now = now_ns();
  std::erase_if(connect_waits_, [&](const std::shared_ptr<ConnectWait>& wait) {
    if (ready >= wait->count) {
      wait->give(true);
    } else if (now >= wait->deadline_ns) {
      wait->give(false);
    }
    return wait->answered;
  });
  if (!connect_waits_.empty() && connect_check_timer_ == 0) {
    connect_check_timer_ = loop_->schedule_after(Milliseconds(1), [this] {
      connect_check_timer_ = 0;
      check_connect_waits();
    });
  }
}

Lock ClientImpl::adopt(std::string_view resource, std::string_view token, std::uint64_t fence) const {
  if (auto why = check_resource(resource)) throw UsageError("adopt: " + *why);
  if (auto why = check_token(token)) throw UsageError("adopt: " + *why);
  Lock lock;
  lock.resource = std::string(resource);
  lock.key = options_.key_prefix + lock.resource;
  lock.token = std::string(token);
  lock.ttl = options_.ttl;
  lock.started = clock_->now();
  lock.deadline = lock.started;  // validity unknown: nothing may rely on it
  lock.fence = fence;
  LockAccess::set_adopted(lock, true);
  return lock;
}

}  // namespace redlock::detail

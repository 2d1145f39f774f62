// SPDX-License-Identifier: Apache-2.0
// The life of one lock operation on the loop thread: begin, send rounds, decide, grant or
// retry, finish (detail/client_impl.h).
#include "detail/client_impl.h"

#include <cstdio>
#include <future>
#include <utility>

#include "detail/ms_text.h"
#include "detail/token.h"
#include "detail/uv_handle.h"
#include "detail/validation.h"
#include "redlock/errors.h"

namespace redlock::detail {

using std::chrono::microseconds;

namespace {

// Calls a user callback at the library boundary: its exceptions go no further.
void call_user(const Callback& done, Result result) noexcept {
  if (!done) return;
  try {
    done(std::move(result));
  } catch (...) {
  }
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

}  // namespace

ClientImpl::ClientImpl(ClientOptions options)
    : options_(std::move(options)),
      endpoints_(prepare(options_)),
      tls_(make_tls_context(options_, endpoints_)),
      clock_(options_.clock ? options_.clock : std::make_shared<SteadyClock>()),
      diagnostics_(endpoints_, options_.on_warning),
      commands_(options_.key_prefix, options_.fence_key),
      loop_(std::make_unique<EventLoop>(options_.loop)),
      masters_(*loop_, options_, endpoints_, commands_, diagnostics_, tls_.get()),
      round_context_{*loop_, masters_, commands_, diagnostics_, *clock_, options_.command_timeout} {
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

void ClientImpl::call_back(const Callback& done, Result result) noexcept {
  ++callbacks_running_;
  call_user(done, std::move(result));
  --callbacks_running_;
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
  shutting_down_ = true;
  std::vector<OperationId> live;
  for (auto& [id, op] : operations_) {
    if (!op->internal()) live.push_back(id);
  }
  for (const OperationId id : live) cancel(id);
  masters_.close();
  for (auto& [id, op] : operations_) op->round.reset();  // cut op <-> round cycles
  operations_.clear();
  loop_->close();
}

OperationId ClientImpl::submit(std::shared_ptr<Operation> op) {
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  const OperationId id = op->id;
  if (!loop_->post([this, op] { begin(op); })) {
    Result result;
    result.outcome = Outcome::cancelled;
    result.message = "the client is shutting down";
    call_user(op->done, std::move(result));
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
  if (shutting_down_ && !op->internal()) {
    refused.outcome = Outcome::cancelled;
    refused.message = "the client is shutting down";
  } else if (kind == RoundKind::acquire) {
    if (auto why = check_resource(op->acquire().resource)) refused.message = std::move(*why);
  } else if (op->key.empty() || op->token().empty()) {
    refused.message = "the Lock has no key or token (was it default-constructed?)";
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
    refused.message = "masters that granted this lock restarted; a lost lock is never extended";
  }
  if (!refused.message.empty()) {
    call_back(op->done, std::move(refused));
    return;
  }
  operations_.emplace(op->id, op);
  send_round(op, kind);
}

void ClientImpl::send_round(const std::shared_ptr<Operation>& op, RoundKind kind) {
  if (kind != RoundKind::fence) ++op->attempts;  // the fencing round belongs to its acquire's attempt
  RoundArgs args{kind, op->key, {}, op->ttl, false, 0};
  std::shared_ptr<LockState> extended;
  switch (kind) {
    case RoundKind::acquire:
      op->acquire().attempt_token = make_token();
      args.fencing = op->acquire().fencing;
      break;
    case RoundKind::fence:
      args.fencing = true;
      args.fence = op->acquire().fenced->fence;
      break;
    case RoundKind::extend:
      extended = LockAccess::state(op->extend().lock);
      break;
    case RoundKind::release:
      break;
  }
  args.token = op->token();
  // A raw pointer is enough, and keeps the callback allocation-free (two pointers fit in
  // std::function's own storage): an undecided round's operation is alive in operations_,
  // and every way an operation ends closes its undecided round first (close() drops this).
  Operation* const owner = op.get();
  auto round = std::make_shared<Round>(round_context_, std::move(args), std::move(extended), op->internal(),
                                       [this, owner](Round& decided_round) {
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
    if (!lock.adopted() && round->sent_at() >= lock.deadline) {
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
      if (op->internal()) warn_failed_release(*op, result);
      finish(op, std::move(result));
      return;
    case RoundKind::extend:
      if (success) {
        grant(op, round.sent_at(), std::move(result), LockAccess::state(op->extend().lock), op->extend().lock.fence);
      } else {
        finish(op, std::move(result));
      }
      return;
    case RoundKind::acquire: {
      if (!success) break;
      auto state = std::make_shared<LockState>(size);
      for (std::uint32_t i = 0; i < size; ++i) {
        if (result.masters[i].status == MasterStatus::ok) {
          state->epochs[i] = masters_.incarnation(i).epoch;
          ++state->votes;
        }
      }
      round.keep_late_grants(state);
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
      if (!success) break;
      FencedGrant fenced = std::move(*op->acquire().fenced);
      op->acquire().fenced.reset();
      result.masters = std::move(fenced.masters);
      grant(op, fenced.started, std::move(result), std::move(fenced.state), fenced.fence);
      return;
    }
  }
  fail_attempt(op, std::move(result));
}

// A quorum said yes; the lock is granted if validity is left. Acquire (and its fencing
// round) and extend end here.
void ClientImpl::grant(const std::shared_ptr<Operation>& op, std::chrono::steady_clock::time_point started,
                       Result result, std::shared_ptr<LockState> state, std::uint64_t fence) {
  const bool acquiring = op->kind() == RoundKind::acquire;
  const auto drift = drift_for(op->ttl, options_.drift_factor, options_.drift_constant);
  const auto deadline = started + op->ttl - drift;
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
  Lock lock;
  if (acquiring) {
    const AcquirePart& acquire = op->acquire();
    lock.resource = acquire.resource;
    lock.key = op->key;
    lock.token = acquire.attempt_token;
    lock.fence = fence;
    LockAccess::set_state(lock, std::move(state));
    masters_.remember(LockAccess::state(lock));
  } else {
    lock = op->extend().lock;
    LockAccess::set_adopted(lock, false);  // its validity is known from now on
  }
  lock.ttl = op->ttl;
  lock.started = started;
  lock.deadline = deadline;
  result.outcome = acquiring ? Outcome::acquired : Outcome::extended;
  result.lock = std::move(lock);
  result.validity = validity;
  result.message.clear();
  finish(op, std::move(result));
}

// A failed acquire attempt: release it everywhere, then retry or give up.
void ClientImpl::fail_attempt(const std::shared_ptr<Operation>& op, Result result) {
  AcquirePart& acquire = op->acquire();
  // Released on every master, including those that timed out or have not answered: their
  // SET may still land, and this release is queued behind it on the same connection.
  release_in_background(op->key, acquire.attempt_token, op->ttl);
  acquire.fenced.reset();
  const auto delay_ms = std::max<long long>(
      0, options_.retry_delay.count() + std::uniform_int_distribution<long long>(
                                            -options_.retry_jitter.count(), options_.retry_jitter.count())(jitter_rng_));
  const std::uint64_t retry_at = deadline_after(now_ns(), Milliseconds(delay_ms));
  const bool within_wait = acquire.wait_deadline_ns == 0 || retry_at < acquire.wait_deadline_ns;
  if (acquire.retries_left == 0 || !within_wait || shutting_down_) {
    finish(op, std::move(result));
    return;
  }
  if (acquire.retries_left > 0) --acquire.retries_left;
  acquire.last = std::move(result);
  acquire.retry_timer = loop_->schedule_at(retry_at, [this, op] {
    op->acquire().retry_timer = 0;
    send_round(op, RoundKind::acquire);
  });
}

void ClientImpl::finish(const std::shared_ptr<Operation>& op, Result result) {
  operations_.erase(op->id);
  op->round.reset();
  call_back(op->done, std::move(result));
}

// The release the library sends on its own after a failed or cancelled acquire has no
// caller to read its rows: a master that refused it (NOPERM, READONLY, OOM...) keeps the key
// until its ttl, and the next attempts there read held_by_other. Say so. (Timeouts and lost
// connections are not repeated here: the acquire's own rows showed them.)
void ClientImpl::warn_failed_release(const Operation& op, const Result& result) const {
  const auto ttl = std::get<ReleasePart>(op.part).acquired_ttl;
  for (const auto& master : result.masters) {
    if (master.status != MasterStatus::server_error) continue;
    diagnostics_.warn("release of key '" + op.key + "' after a failed acquire was refused by master " +
                      master.endpoint + ": " + master.error + "; the key stays there until its ttl (" +
                      std::to_string(ttl.count()) + " ms)");
  }
}

void ClientImpl::release_in_background(const std::string& key, const std::string& token, Milliseconds acquired_ttl) {
  auto op = std::make_shared<Operation>();
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  op->key = key;
  op->part = ReleasePart{token, true, acquired_ttl};
  operations_.emplace(op->id, op);
  send_round(op, RoundKind::release);
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
    release_in_background(op->key, acquire.attempt_token, op->ttl);
  }
  finish(op, std::move(result));
}

Result ClientImpl::wait_for(const std::function<void(Callback)>& start) {
  if (loop_->in_loop_thread()) {
    throw UsageError("a blocking redlock call on the client's loop thread would wait for itself forever; "
                     "use the *_async functions in callbacks");
  }
  // Shared so the promise outlives a set_value that is still returning on the loop thread.
  auto promise = std::make_shared<std::promise<Result>>();
  auto future = promise->get_future();
  start([promise](Result result) { promise->set_value(std::move(result)); });
  return future.get();
}

bool ClientImpl::wait_connected(std::size_t count, Milliseconds timeout) {
  const auto give_up = steady_deadline_after(timeout);
  for (;;) {
    auto promise = std::make_shared<std::promise<std::size_t>>();
    auto future = promise->get_future();
    const bool posted = loop_->post([this, promise] { promise->set_value(masters_.ready_count()); });
    if (!posted) return false;
    if (future.wait_until(give_up) != std::future_status::ready) return false;
    if (future.get() >= count) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(Milliseconds(5));
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

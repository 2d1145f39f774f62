// SPDX-License-Identifier: Apache-2.0
// The Client's operations on the loop thread: begin, send rounds, decide, retry, finish.
#include <cstdio>
#include <future>

#include <utility>

#include "detail/client_impl.h"
#include "detail/token.h"
#include "detail/validation.h"
#include "redlock/errors.h"

namespace redlock::detail {

using std::chrono::microseconds;

namespace {

std::string ms_text(microseconds value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(value.count()) / 1000.0);
  return text;
}

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

}  // namespace

ClientImpl::ClientImpl(ClientOptions options) : options_(std::move(options)) {
  endpoints_ = validate(options_);
  size_ = static_cast<std::uint32_t>(endpoints_.size());
  quorum_ = quorum_of(size_);
  if (options_.max_lock_ttl.count() == 0) options_.max_lock_ttl = default_max_lock_ttl(options_.ttl);
  guard_ns_ = to_ns(options_.max_lock_ttl);
  for (const auto& ep : endpoints_) names_.push_back(ep.display());
  clock_ = options_.clock ? options_.clock : std::make_shared<SteadyClock>();
  views_.resize(size_);
  loop_ = std::make_unique<EventLoop>(options_.loop);

  // Connections are created on the loop thread: they register with the loop, which is
  // already running there.
  loop_->post([this] {
    // A Client on a caller's loop may be destroyed before that loop ever ran this task.
    if (shutting_down_) return;
    for (std::uint32_t i = 0; i < size_; ++i) {
      ConnectionOptions co;
      co.endpoint = endpoints_[i];
      co.connect_timeout = options_.connect_timeout;
      co.reconnect_min = options_.reconnect_min;
      co.reconnect_max = options_.reconnect_max;
      co.stall_timeout = options_.stall_timeout;
      co.source_address = options_.source_address;
      co.handshake_steps = [this] { return handshake_steps(); };
      connections_.push_back(std::make_unique<Connection>(*loop_, std::move(co)));
      connections_.back()->on_ready = [this, i] { on_master_ready(i); };
      connections_.back()->start();
    }
  });
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
  auto* idle = new uv_idle_t;
  uv_idle_init(impl->loop_->uv(), idle);
  idle->data = impl.release();
  uv_idle_start(idle, [](uv_idle_t* handle) {
    delete static_cast<ClientImpl*>(handle->data);
    uv_close(reinterpret_cast<uv_handle_t*>(handle), [](uv_handle_t* h) { delete reinterpret_cast<uv_idle_t*>(h); });
  });
}

void ClientImpl::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  shutting_down_ = true;
  std::vector<OperationId> live;
  for (auto& [id, op] : operations_) {
    if (!op->internal) live.push_back(id);
  }
  for (const OperationId id : live) cancel(id);
  for (auto& connection : connections_) connection->close();
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

void ClientImpl::begin(const std::shared_ptr<Operation>& op) {
  Result refused;
  refused.outcome = Outcome::invalid_argument;
  if (shutting_down_ && !op->internal) {
    refused.outcome = Outcome::cancelled;
    refused.message = "the client is shutting down";
  } else if (op->kind == RoundKind::acquire) {
    if (auto why = check_resource(op->resource)) refused.message = std::move(*why);
  } else if (op->key.empty() || op->token.empty()) {
    refused.message = "the Lock has no key or token (was it default-constructed?)";
  }
  if (refused.message.empty() && op->kind != RoundKind::release) {
    if (auto why = check_ttl(options_, op->ttl)) {
      refused.message = std::move(*why);
    } else if (options_.restart_guard && op->ttl > options_.max_lock_ttl) {
      refused.message = "ttl " + std::to_string(op->ttl.count()) + " ms exceeds max_lock_ttl " +
                        std::to_string(options_.max_lock_ttl.count()) + " ms, which the restart guard waits out";
    }
  }
  if (refused.message.empty() && op->kind == RoundKind::extend && op->lock.lost()) {
    refused.outcome = Outcome::lost;
    refused.message = "masters that granted this lock restarted; a lost lock is never extended";
  }
  if (!refused.message.empty()) {
    call_back(op->done, std::move(refused));
    return;
  }
  operations_.emplace(op->id, op);
  send_round(op, op->kind);
}

std::string ClientImpl::encode(RoundKind kind, const RoundArgs& args, bool use_eval) const {
  switch (kind) {
    case RoundKind::acquire:
      if (!args.fencing) return encode_set_nx_px(args.key, args.token, args.ttl.count());
      return encode_script_call(fenced_acquire_script_, use_eval, {args.key, options_.fence_key},
                                {args.token, std::to_string(args.ttl.count())});
    case RoundKind::extend:
      return encode_script_call(extend_script_, use_eval, {args.key}, {args.token, std::to_string(args.ttl.count())});
    case RoundKind::release:
      return encode_script_call(release_script_, use_eval, {args.key}, {args.token});
    case RoundKind::fence:
      return encode_script_call(fence_raise_script_, use_eval, {options_.fence_key}, {std::to_string(args.fence)});
  }
  return {};
}

void ClientImpl::send_round(const std::shared_ptr<Operation>& op, RoundKind kind) {
  if (kind != RoundKind::fence) ++op->attempts;  // the fencing round belongs to its acquire's attempt
  if (kind == RoundKind::acquire) op->token = make_token();
  auto round = std::make_shared<Round>(*this, op, kind, RoundArgs{op->key, op->token, op->ttl, op->fence, op->fencing});
  op->round = round;
  const std::string command = encode(kind, round->args_, false);
  // t0 is taken before the first send: elapsed time is never under-counted.
  round->started_ = clock_->now();
  round->start_ns_ = now_ns();
  if (kind == RoundKind::extend && round->started_ >= op->lock.deadline) {
    Result expired;
    expired.outcome = Outcome::validity_expired;
    expired.message = "the lock's deadline has passed; an expired lock is never extended";
    finish(op, std::move(expired));
    return;
  }
  const std::uint64_t late_after = deadline_after(round->start_ns_, options_.command_timeout);
  // A master whose user may not run the lock paths is never sent a SET, an extend or a
  // fenced acquire (a grant there could not be released). A release still goes: it can only
  // remove our own token, and the ACL may allow it.
  const bool fenced = touches_fence_counter(kind, op->fencing);
  for (std::uint32_t i = 0; i < size_; ++i) {
    if (kind != RoundKind::release) {
      if (auto why = not_permitted(i, fenced)) {
        round->record(i, MasterStatus::not_permitted, std::move(*why));
        continue;
      }
    }
    if (!connections_[i]->send(command, round, i, late_after, kind == RoundKind::release)) {
      round->record(i, MasterStatus::not_connected, connections_[i]->last_error());
    }
  }
  round->evaluate();
  if (!round->decided_) {
    round->deadline_timer_ = loop_->schedule_at(deadline_after(round->start_ns_, options_.command_timeout), [this, round] {
      round->deadline_timer_ = 0;
      // Replies already waiting in the sockets count: read them before timing anyone out.
      loop_->after_io([round] { round->on_deadline(); });
    });
  }
}

void ClientImpl::decide(Round& round) {
  round.decided_ = true;
  if (round.deadline_timer_ != 0) loop_->cancel(std::exchange(round.deadline_timer_, 0));
  const std::shared_ptr<Operation> op = round.op_;
  const bool success = round.tally_.verdict() == Verdict::success;

  Result result;
  result.masters = std::move(round.masters_);
  result.attempts = op->attempts;
  if (!success) {
    result.outcome = round.tally_.failure_outcome();
    result.message = std::to_string(round.tally_.granted) + " of " + std::to_string(size_) + " masters " +
                     (round.kind_ == RoundKind::fence ? "acknowledged the fencing token, " : "agreed, ") +
                     std::to_string(quorum_) + " needed";
  }

  switch (round.kind_) {
    case RoundKind::release:
      if (success) result.outcome = Outcome::released;
      if (op->internal) warn_failed_release(*op, result);
      finish(op, std::move(result));
      return;
    case RoundKind::extend:
      if (success) {
        grant(op, round.started_, std::move(result), op->lock.state);
      } else {
        finish(op, std::move(result));
      }
      return;
    case RoundKind::acquire: {
      if (!success) break;
      auto state = std::make_shared<LockState>(size_);
      for (std::uint32_t i = 0; i < size_; ++i) {
        if (result.masters[i].status == MasterStatus::ok) {
          state->epochs[i] = views_[i].epoch;
          ++state->votes;
        }
      }
      round.granted_ = state;
      if (!op->fencing) {
        grant(op, round.started_, std::move(result), std::move(state));
        return;
      }
      // Fencing round 2: raise the counters to the highest value the granting quorum
      // returned; the lock is handed over only once a quorum acknowledged it.
      op->fence = 0;
      for (std::uint32_t i = 0; i < size_; ++i) {
        if (result.masters[i].status == MasterStatus::ok) {
          op->fence = std::max(op->fence, static_cast<std::uint64_t>(round.values_[i]));
        }
      }
      op->grant_started = round.started_;
      op->grant_masters = std::move(result.masters);
      op->grant_state = std::move(state);
      send_round(op, RoundKind::fence);
      return;
    }
    case RoundKind::fence:
      if (!success) break;
      result.masters = std::move(op->grant_masters);
      grant(op, op->grant_started, std::move(result), std::move(op->grant_state));
      return;
  }
  fail_attempt(op, std::move(result));
}

// A quorum said yes; the lock is granted if validity is left. Acquire (and its fencing
// round) and extend end here.
void ClientImpl::grant(const std::shared_ptr<Operation>& op, std::chrono::steady_clock::time_point started,
                         Result result, std::shared_ptr<LockState> state) {
  const auto drift = drift_for(op->ttl, options_.drift_factor, options_.drift_constant);
  const auto deadline = started + op->ttl - drift;
  const auto now = clock_->now();
  const auto validity = std::chrono::duration_cast<microseconds>(deadline - now);
  if (validity <= options_.min_validity) {
    result.outcome = Outcome::validity_expired;
    result.message = "a quorum answered after " + ms_text(std::chrono::duration_cast<microseconds>(now - started)) +
                     ", leaving validity " + ms_text(validity) + " (drift allowance " + ms_text(drift) + ")";
    if (op->kind == RoundKind::acquire) {
      fail_attempt(op, std::move(result));
    } else {
      finish(op, std::move(result));
    }
    return;
  }
  Lock lock = op->kind == RoundKind::extend ? op->lock : Lock{};
  if (op->kind == RoundKind::acquire) {
    lock.resource = op->resource;
    lock.key = op->key;
    lock.token = op->token;
    lock.fence = op->fencing ? op->fence : 0;
    lock.state = std::move(state);
    remember(lock.state);
  }
  lock.ttl = op->ttl;
  lock.started = started;
  lock.deadline = deadline;
  result.outcome = op->kind == RoundKind::acquire ? Outcome::acquired : Outcome::extended;
  result.lock = std::move(lock);
  result.validity = validity;
  result.message.clear();
  finish(op, std::move(result));
}

// A failed acquire attempt: release it everywhere, then retry or give up.
void ClientImpl::fail_attempt(const std::shared_ptr<Operation>& op, Result result) {
  // Released on every master, including those that timed out or have not answered: their
  // SET may still land, and this release is queued behind it on the same connection.
  release_in_background(op->key, op->token, op->ttl);
  const auto delay_ms = std::max<long long>(
      0, options_.retry_delay.count() + std::uniform_int_distribution<long long>(
                                            -options_.retry_jitter.count(), options_.retry_jitter.count())(jitter_rng_));
  const std::uint64_t retry_at = deadline_after(now_ns(), Milliseconds(delay_ms));
  const bool within_wait = op->wait_deadline_ns == 0 || retry_at < op->wait_deadline_ns;
  if (op->retries_left == 0 || !within_wait || shutting_down_) {
    finish(op, std::move(result));
    return;
  }
  if (op->retries_left > 0) --op->retries_left;
  op->last = std::move(result);
  op->retry_timer = loop_->schedule_at(retry_at, [this, op] {
    op->retry_timer = 0;
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
  for (const auto& master : result.masters) {
    if (master.status != MasterStatus::server_error) continue;
    warn("release of key '" + op.key + "' after a failed acquire was refused by master " + master.endpoint + ": " +
         master.error + "; the key stays there until its ttl (" + std::to_string(op.ttl.count()) + " ms)");
  }
}

void ClientImpl::release_in_background(const std::string& key, const std::string& token, Milliseconds ttl) {
  auto op = std::make_shared<Operation>();
  op->ttl = ttl;  // only for the warning above
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  op->kind = RoundKind::release;
  op->key = key;
  op->token = token;
  op->internal = true;
  operations_.emplace(op->id, op);
  send_round(op, RoundKind::release);
}

void ClientImpl::cancel(OperationId id) {
  const auto it = operations_.find(id);
  if (it == operations_.end()) return;
  const std::shared_ptr<Operation> op = it->second;
  if (op->kind != RoundKind::acquire) return;
  Result result = std::move(op->last);
  result.outcome = Outcome::cancelled;
  result.attempts = op->attempts;
  result.message = shutting_down_ ? "the client is shutting down" : "cancelled by the caller";
  if (op->retry_timer != 0) {
    loop_->cancel(std::exchange(op->retry_timer, 0));
  } else if (op->round && !op->round->decided_) {
    Round& round = *op->round;
    round.decided_ = true;
    if (round.deadline_timer_ != 0) loop_->cancel(std::exchange(round.deadline_timer_, 0));
    result.masters = std::move(round.masters_);
    release_in_background(op->key, op->token, op->ttl);
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
    const bool posted = loop_->post([this, promise] {
      std::size_t ready = 0;
      for (const auto& connection : connections_) {
        if (connection->ready()) ++ready;
      }
      promise->set_value(ready);
    });
    if (!posted) return false;
    if (future.wait_until(give_up) != std::future_status::ready) return false;
    if (future.get() >= count) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(Milliseconds(5));
  }
}

std::string ClientImpl::shown(std::string_view text) const {
  std::string out(text);
  for (const auto& endpoint : endpoints_) out = endpoint.redact(out);
  if (out.size() > kMaxShownText) {
    out.resize(kMaxShownText);
    out += "... (cut)";
  }
  return out;
}

void ClientImpl::warn(const std::string& message) const {
  const std::string text = shown(message);
  if (options_.on_warning) {
    try {
      options_.on_warning(text);
    } catch (...) {
    }
    return;
  }
  std::fprintf(stderr, "redlock: warning: %s\n", text.c_str());
}

}  // namespace redlock::detail

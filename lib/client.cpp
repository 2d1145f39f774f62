#include "redlock/client.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <random>
#include <unordered_map>
#include <utility>

#include "detail/commands.h"
#include "detail/connection.h"
#include "detail/event_loop.h"
#include "detail/quorum.h"
#include "detail/token.h"
#include "detail/validation.h"
#include "redlock/errors.h"

namespace redlock {

using detail::Connection;
using detail::EventLoop;
using detail::now_ns;
using detail::RoundKind;
using detail::Tally;
using detail::Verdict;
using std::chrono::microseconds;

namespace {

std::uint64_t to_ns(Milliseconds value) { return static_cast<std::uint64_t>(value.count()) * 1'000'000u; }

std::string ms_text(microseconds value) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(value.count()) / 1000.0);
  return text;
}

bool starts_with(const redisReply* reply, std::string_view prefix) {
  return reply->len >= prefix.size() && std::string_view(reply->str, prefix.size()) == prefix;
}

std::string describe_unexpected(const redisReply* reply) {
  switch (reply->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return "unexpected reply '" + std::string(reply->str, std::min<std::size_t>(reply->len, 64)) + "'";
    case REDIS_REPLY_INTEGER:
      return "unexpected integer reply " + std::to_string(reply->integer);
    case REDIS_REPLY_NIL:
      return "unexpected nil reply";
    case REDIS_REPLY_ARRAY:
      return "unexpected array reply";
    default:
      return "unexpected reply type " + std::to_string(reply->type);
  }
}

// Calls a user callback at the library boundary: its exceptions go no further.
void call_back(const Callback& done, Result result) noexcept {
  if (!done) return;
  try {
    done(std::move(result));
  } catch (...) {
  }
}

}  // namespace

class Client::Impl {
 public:
  struct Operation;
  class Round;
  explicit Impl(ClientOptions options);
  ~Impl();

  OperationId submit(std::shared_ptr<Operation> op);
  void cancel(OperationId id);
  Result wait_for(const std::function<void(Callback)>& start);
  bool wait_connected(std::size_t count, Milliseconds timeout);

  // Loop thread.
  void begin(const std::shared_ptr<Operation>& op);
  void send_round(const std::shared_ptr<Operation>& op);
  void decide(Round& round);
  void finish(const std::shared_ptr<Operation>& op, Result result);
  void release_in_background(const std::string& key, const std::string& token);
  void shutdown();

  ClientOptions options_;
  std::vector<Endpoint> endpoints_;
  std::vector<std::string> names_;
  std::uint32_t size_ = 0;
  std::shared_ptr<const Clock> clock_;
  detail::Script release_script_{detail::kReleaseScript};
  detail::Script extend_script_{detail::kExtendScript};
  std::atomic<OperationId> next_id_{1};

  // Loop thread only.
  std::vector<std::unique_ptr<Connection>> connections_;
  std::unordered_map<OperationId, std::shared_ptr<Operation>> operations_;
  std::minstd_rand jitter_rng_{std::random_device{}()};
  bool shutting_down_ = false;

  std::unique_ptr<EventLoop> loop_;  // last: its thread must not outlive the members above
};

// ---------------------------------------------------------------------------------------
// One lock operation (acquire with its retries, one extend, one release) and its rounds.

struct Client::Impl::Operation {
  OperationId id = 0;
  RoundKind kind = RoundKind::acquire;
  Callback done;
  std::string resource;
  std::string key;
  std::string token;  // extend/release: the lock's; acquire: the current attempt's
  Milliseconds ttl{0};
  Lock lock;          // extend: the lock being extended
  int retries_left = 0;  // -1: unlimited
  std::uint64_t wait_deadline_ns = 0;  // 0: none
  bool internal = false;  // a release the library sends on its own (failed or cancelled acquire)
  int attempts = 0;
  std::shared_ptr<Round> round;
  EventLoop::TimerId retry_timer = 0;
  Result last;  // the last failed round's result, reported if we give up
};

// One round: one command to each master, the votes, and the deadline.
class Client::Impl::Round final : public detail::ReplySink, public std::enable_shared_from_this<Round> {
 public:
  Round(Impl& impl, std::shared_ptr<Operation> op)
      : impl_(impl), op_(std::move(op)), kind_(op_->kind), tally_{kind_, impl.size_} {
    masters_.resize(impl.size_);
    eval_sent_.resize(impl.size_);
    for (std::uint32_t i = 0; i < impl.size_; ++i) masters_[i].endpoint = impl.names_[i];
  }

  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) override {
    if (decided_ || masters_[index].status != MasterStatus::pending) {
      // Late: the round was decided (or this master timed out) first. For a failed acquire
      // the release was sent to this master after the SET, on the same connection, so it
      // runs after it: a late grant is already being undone. A late NOSCRIPT on a release
      // still needs its EVAL, or our key would stay on that master until it expires.
      if (kind_ == RoundKind::release && reply != nullptr && reply->type == REDIS_REPLY_ERROR &&
          starts_with(reply, "NOSCRIPT") && !eval_sent_[index]) {
        resend_with_eval(index);
      }
      return;
    }
    if (reply == nullptr) {
      record(index, MasterStatus::not_connected, std::string(failure));
    } else if (reply->type == REDIS_REPLY_ERROR) {
      if (kind_ != RoundKind::acquire && starts_with(reply, "NOSCRIPT") && !eval_sent_[index]) {
        resend_with_eval(index);
        return;
      }
      record(index, MasterStatus::server_error, std::string(reply->str, reply->len));
    } else if (kind_ == RoundKind::acquire) {
      if (reply->type == REDIS_REPLY_STATUS && starts_with(reply, "OK") && reply->len == 2) {
        record(index, MasterStatus::ok, {});
      } else if (reply->type == REDIS_REPLY_NIL) {
        record(index, MasterStatus::held_by_other, {});
      } else {
        record(index, MasterStatus::server_error, describe_unexpected(reply));
      }
    } else if (reply->type == REDIS_REPLY_INTEGER && reply->integer >= -1 && reply->integer <= 1) {
      static constexpr MasterStatus kByValue[] = {MasterStatus::held_by_other, MasterStatus::not_found,
                                                  MasterStatus::ok};
      record(index, kByValue[reply->integer + 1], {});
    } else {
      record(index, MasterStatus::server_error, describe_unexpected(reply));
    }
    evaluate();
  }

  void record(std::uint32_t index, MasterStatus status, std::string error) {
    auto& master = masters_[index];
    master.status = status;
    master.error = std::move(error);
    master.latency = microseconds((now_ns() - start_ns_) / 1000u);
    tally_.add(status);
  }

  void evaluate() {
    if (!decided_ && tally_.verdict() != Verdict::undecided) impl_.decide(*this);
  }

  void on_deadline() {
    deadline_timer_ = 0;
    if (decided_) return;
    const std::string why = "no reply within " + std::to_string(impl_.options_.command_timeout.count()) + " ms";
    for (std::uint32_t i = 0; i < masters_.size(); ++i) {
      if (masters_[i].status == MasterStatus::pending) record(i, MasterStatus::timeout, why);
    }
    evaluate();
  }

  void resend_with_eval(std::uint32_t index) {
    // The script cache was flushed (or the master restarted) since the handshake loaded it.
    eval_sent_[index] = true;
    const auto& op = *op_;
    const detail::Script& script = kind_ == RoundKind::release ? impl_.release_script_ : impl_.extend_script_;
    const std::string ttl = std::to_string(op.ttl.count());
    const std::string command = kind_ == RoundKind::release
                                    ? detail::encode_script_call(script, true, op.key, {op.token})
                                    : detail::encode_script_call(script, true, op.key, {op.token, ttl});
    if (!impl_.connections_[index]->send(command, shared_from_this(), index) && !decided_) {
      record(index, MasterStatus::not_connected, impl_.connections_[index]->last_error());
      evaluate();
    }
  }

  Impl& impl_;
  // Kept after the decision (a late NOSCRIPT still needs the key and token); the
  // op -> round link is cut when the operation finishes or retries, so no cycle outlives it.
  std::shared_ptr<Operation> op_;
  const RoundKind kind_;
  Tally tally_;
  std::vector<MasterResult> masters_;
  Clock::time_point started_{};
  std::uint64_t start_ns_ = 0;
  bool decided_ = false;
  std::vector<bool> eval_sent_;  // per master: NOSCRIPT already answered with EVAL
  EventLoop::TimerId deadline_timer_ = 0;
};

// ---------------------------------------------------------------------------------------

Client::Impl::Impl(ClientOptions options) : options_(std::move(options)) {
  endpoints_ = detail::validate(options_);
  size_ = static_cast<std::uint32_t>(endpoints_.size());
  for (const auto& ep : endpoints_) names_.push_back(ep.display());
  clock_ = options_.clock ? options_.clock : std::make_shared<SteadyClock>();
  loop_ = std::make_unique<EventLoop>(options_.loop);

  // Connections are created on the loop thread: they register with the loop, which is
  // already running there.
  loop_->post([this] {
    const std::string handshake = release_script_.load_command + extend_script_.load_command;
    for (const auto& ep : endpoints_) {
      detail::ConnectionOptions co;
      co.endpoint = ep;
      co.connect_timeout = options_.connect_timeout;
      co.reconnect_min = options_.reconnect_min;
      co.reconnect_max = options_.reconnect_max;
      co.stall_timeout = options_.stall_timeout;
      co.source_address = options_.source_address;
      co.handshake_extra = handshake;
      co.handshake_extra_count = 2;
      connections_.push_back(std::make_unique<Connection>(*loop_, std::move(co)));
      connections_.back()->start();
    }
  });
}

Client::Impl::~Impl() {
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

void Client::Impl::shutdown() {
  shutting_down_ = true;
  std::vector<std::shared_ptr<Operation>> live;
  for (auto& [id, op] : operations_) {
    if (!op->internal) live.push_back(op);
  }
  for (auto& op : live) cancel(op->id);
  for (auto& connection : connections_) connection->close();
  for (auto& [id, op] : operations_) op->round.reset();  // cut op <-> round cycles
  operations_.clear();
  loop_->close();
}

OperationId Client::Impl::submit(std::shared_ptr<Operation> op) {
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  const OperationId id = op->id;
  if (!loop_->post([this, op] { begin(op); })) {
    Result result;
    result.outcome = Outcome::cancelled;
    result.message = "the client is shutting down";
    call_back(op->done, std::move(result));
  }
  return id;
}

void Client::Impl::begin(const std::shared_ptr<Operation>& op) {
  Result invalid;
  invalid.outcome = Outcome::invalid_argument;
  if (shutting_down_ && !op->internal) {
    invalid.outcome = Outcome::cancelled;
    invalid.message = "the client is shutting down";
    call_back(op->done, std::move(invalid));
    return;
  }
  if (op->kind == RoundKind::acquire) {
    if (auto why = detail::check_resource(op->resource)) invalid.message = std::move(*why);
  } else if (op->key.empty() || op->token.empty()) {
    invalid.message = "the Lock has no key or token (was it default-constructed?)";
  }
  if (invalid.message.empty() && op->kind != RoundKind::release) {
    if (auto why = detail::check_ttl(options_, op->ttl)) invalid.message = std::move(*why);
  }
  if (!invalid.message.empty()) {
    call_back(op->done, std::move(invalid));
    return;
  }
  operations_.emplace(op->id, op);
  send_round(op);
}

void Client::Impl::send_round(const std::shared_ptr<Operation>& op) {
  auto round = std::make_shared<Round>(*this, op);
  op->round = round;
  ++op->attempts;
  std::string command;
  const std::string ttl = std::to_string(op->ttl.count());
  switch (op->kind) {
    case RoundKind::acquire:
      op->token = detail::make_token();
      command = detail::encode_set_nx_px(op->key, op->token, op->ttl.count());
      break;
    case RoundKind::extend:
      command = detail::encode_script_call(extend_script_, false, op->key, {op->token, ttl});
      break;
    case RoundKind::release:
      command = detail::encode_script_call(release_script_, false, op->key, {op->token});
      break;
  }
  // t0 is taken before the first send: elapsed time is never under-counted.
  round->started_ = clock_->now();
  round->start_ns_ = now_ns();
  if (op->kind == RoundKind::extend && round->started_ >= op->lock.deadline) {
    Result expired;
    expired.outcome = Outcome::validity_expired;
    expired.attempts = op->attempts;
    expired.message = "the lock's deadline has passed; an expired lock is never extended";
    finish(op, std::move(expired));
    return;
  }
  for (std::uint32_t i = 0; i < size_; ++i) {
    if (!connections_[i]->send(command, round, i)) {
      round->record(i, MasterStatus::not_connected, connections_[i]->last_error());
    }
  }
  round->evaluate();
  if (!round->decided_) {
    round->deadline_timer_ = loop_->schedule_at(round->start_ns_ + to_ns(options_.command_timeout),
                                                [round] { round->on_deadline(); });
  }
}

void Client::Impl::decide(Round& round) {
  round.decided_ = true;
  if (round.deadline_timer_ != 0) loop_->cancel(std::exchange(round.deadline_timer_, 0));
  const std::shared_ptr<Operation> op = round.op_;
  const Verdict verdict = round.tally_.verdict();

  Result result;
  result.masters = std::move(round.masters_);
  result.attempts = op->attempts;

  if (verdict == Verdict::success && op->kind == RoundKind::release) {
    result.outcome = Outcome::released;
    finish(op, std::move(result));
    return;
  }
  if (verdict == Verdict::success) {
    const auto drift = detail::drift_for(op->ttl, options_.drift_factor, options_.drift_constant);
    const auto deadline = round.started_ + op->ttl - drift;
    const auto now = clock_->now();
    const auto validity = std::chrono::duration_cast<microseconds>(deadline - now);
    if (validity > options_.min_validity) {
      Lock lock = op->kind == RoundKind::extend ? op->lock : Lock{};
      if (op->kind == RoundKind::acquire) {
        lock.resource = op->resource;
        lock.key = op->key;
        lock.token = op->token;
      }
      lock.ttl = op->ttl;
      lock.started = round.started_;
      lock.deadline = deadline;
      result.outcome = op->kind == RoundKind::acquire ? Outcome::acquired : Outcome::extended;
      result.lock = std::move(lock);
      result.validity = validity;
      finish(op, std::move(result));
      return;
    }
    result.outcome = Outcome::validity_expired;
    result.message = "a quorum answered after " +
                     ms_text(std::chrono::duration_cast<microseconds>(now - round.started_)) +
                     ", leaving validity " + ms_text(validity) + " (drift allowance " + ms_text(drift) + ")";
  } else {
    result.outcome = round.tally_.failure_outcome();
    result.message = std::to_string(round.tally_.granted) + " of " + std::to_string(size_) + " masters agreed, " +
                     std::to_string(round.tally_.quorum) + " needed";
  }

  if (op->kind != RoundKind::acquire) {
    finish(op, std::move(result));
    return;
  }
  // A failed attempt is released on every master, including those that timed out or have
  // not answered: their SET may still land, and this release is queued behind it.
  release_in_background(op->key, op->token);
  const bool retries_left = op->retries_left != 0;
  const auto delay_ms = std::max<long long>(
      0, options_.retry_delay.count() +
             std::uniform_int_distribution<long long>(-options_.retry_jitter.count(),
                                                      options_.retry_jitter.count())(jitter_rng_));
  const std::uint64_t retry_at = now_ns() + static_cast<std::uint64_t>(delay_ms) * 1'000'000u;
  const bool within_wait = op->wait_deadline_ns == 0 || retry_at < op->wait_deadline_ns;
  if (!retries_left || !within_wait || shutting_down_) {
    finish(op, std::move(result));
    return;
  }
  if (op->retries_left > 0) --op->retries_left;
  op->last = std::move(result);
  op->retry_timer = loop_->schedule_at(retry_at, [this, op] {
    op->retry_timer = 0;
    send_round(op);
  });
}

void Client::Impl::finish(const std::shared_ptr<Operation>& op, Result result) {
  operations_.erase(op->id);
  op->round.reset();
  call_back(op->done, std::move(result));
}

void Client::Impl::release_in_background(const std::string& key, const std::string& token) {
  auto op = std::make_shared<Impl::Operation>();
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  op->kind = RoundKind::release;
  op->key = key;
  op->token = token;
  op->internal = true;
  operations_.emplace(op->id, op);
  send_round(op);
}

void Client::Impl::cancel(OperationId id) {
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
    release_in_background(op->key, op->token);
  }
  finish(op, std::move(result));
}

Result Client::Impl::wait_for(const std::function<void(Callback)>& start) {
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

bool Client::Impl::wait_connected(std::size_t count, Milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto promise = std::make_shared<std::promise<std::size_t>>();
    auto future = promise->get_future();
    const bool posted = loop_->post([this, promise] {
      std::size_t ready = 0;
      for (const auto& connection : connections_) if (connection->ready()) ++ready;
      promise->set_value(ready);
    });
    if (!posted) return false;
    if (future.wait_until(give_up) != std::future_status::ready) return false;
    if (future.get() >= count) return true;
    if (std::chrono::steady_clock::now() >= give_up) return false;
    std::this_thread::sleep_for(Milliseconds(5));
  }
}

// ---------------------------------------------------------------------------------------

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Client::~Client() = default;

OperationId Client::acquire_async(std::string resource, Callback done, AcquireOptions options) {
  auto op = std::make_shared<Impl::Operation>();
  op->kind = RoundKind::acquire;
  op->done = std::move(done);
  op->key = impl_->options_.key_prefix + resource;
  op->resource = std::move(resource);
  op->ttl = options.ttl.value_or(impl_->options_.ttl);
  op->retries_left = options.retry_count.value_or(impl_->options_.retry_count);
  if (op->retries_left < -1) op->retries_left = 0;
  if (options.wait) op->wait_deadline_ns = now_ns() + to_ns(std::max(*options.wait, Milliseconds{0}));
  return impl_->submit(std::move(op));
}

OperationId Client::extend_async(Lock lock, Callback done, std::optional<Milliseconds> ttl) {
  auto op = std::make_shared<Impl::Operation>();
  op->kind = RoundKind::extend;
  op->done = std::move(done);
  op->resource = lock.resource;
  op->key = lock.key;
  op->token = lock.token;
  op->ttl = ttl.value_or(lock.ttl);
  op->lock = std::move(lock);
  return impl_->submit(std::move(op));
}

OperationId Client::release_async(Lock lock, Callback done) {
  auto op = std::make_shared<Impl::Operation>();
  op->kind = RoundKind::release;
  op->done = std::move(done);
  op->resource = std::move(lock.resource);
  op->key = std::move(lock.key);
  op->token = std::move(lock.token);
  return impl_->submit(std::move(op));
}

void Client::cancel(OperationId id) {
  Impl* impl = impl_.get();
  impl->loop_->post([impl, id] { impl->cancel(id); });
}

Result Client::acquire(std::string_view resource, AcquireOptions options) {
  return impl_->wait_for([&](Callback done) { acquire_async(std::string(resource), std::move(done), options); });
}

Result Client::extend(const Lock& lock, std::optional<Milliseconds> ttl) {
  return impl_->wait_for([&](Callback done) { extend_async(lock, std::move(done), ttl); });
}

Result Client::release(const Lock& lock) {
  return impl_->wait_for([&](Callback done) { release_async(lock, std::move(done)); });
}

bool Client::wait_connected(std::size_t count, Milliseconds timeout) {
  return impl_->wait_connected(count, timeout);
}

std::size_t Client::size() const noexcept { return impl_->size_; }
std::size_t Client::quorum() const noexcept { return detail::quorum_of(impl_->size_); }
const ClientOptions& Client::options() const noexcept { return impl_->options_; }
std::vector<std::string> Client::endpoints() const { return impl_->names_; }

microseconds Client::drift(Milliseconds ttl) const noexcept {
  return detail::drift_for(ttl, impl_->options_.drift_factor, impl_->options_.drift_constant);
}

std::chrono::steady_clock::time_point Client::now() const { return impl_->clock_->now(); }

microseconds Client::remaining(const Lock& lock) const {
  const auto left = std::chrono::duration_cast<microseconds>(lock.deadline - impl_->clock_->now());
  return std::max(left, microseconds{0});
}

}  // namespace redlock

// SPDX-License-Identifier: Apache-2.0
// redlock::Client's public functions: build an Operation and hand it to the loop.
#include "redlock/client.h"

#include "detail/client_impl.h"
#include "detail/lock_state.h"
#include "detail/validation.h"

namespace redlock {

using detail::AcquirePart;
using detail::ExtendPart;
using detail::Operation;
using detail::ReleasePart;

Client::Client(ClientOptions options) : impl_(std::make_unique<detail::ClientImpl>(std::move(options))) {}
Client::~Client() {
  // In a child of fork(): everything of this Client is the parent's (detail/fork_generation.h).
  // Closing anything here would take the parent's sockets out of their shared epoll instance.
  if (impl_->forked()) {
    (void)impl_.release();  // left to the child's exit or exec
    return;
  }
  if (impl_->inside_callback()) detail::ClientImpl::destroy_from_callback(std::move(impl_));
}

OperationId Client::acquire_async(std::string resource, Callback done, AcquireOptions options) {
  auto op = impl_->make_operation();
  op->done = std::move(done);
  op->key = impl_->options().key_prefix + resource;
  op->ttl = options.ttl.value_or(impl_->options().ttl);
  AcquirePart acquire;
  acquire.refused = detail::check_acquire_options(options);
  acquire.resource = std::move(resource);
  acquire.retries_left = std::max(-1, options.retry_count.value_or(impl_->options().retry_count));
  acquire.fencing = options.fencing;
  if (options.wait) acquire.wait_deadline_ns = detail::deadline_after(detail::now_ns(), *options.wait);
  op->part = std::move(acquire);
  return impl_->submit(std::move(op));
}

OperationId Client::extend_async(Lock lock, Callback done, std::optional<Milliseconds> ttl) {
  return impl_->extend_async(std::move(lock), std::move(done), ttl);
}

OperationId Client::release_async(Lock lock, Callback done) { return impl_->release_async(std::move(lock), std::move(done)); }

void Client::cancel(OperationId id) { impl_->cancel_soon(id); }

Result Client::acquire(std::string_view resource, AcquireOptions options) {
  return impl_->wait_for([&](Callback done) { acquire_async(std::string(resource), std::move(done), options); });
}

Result Client::extend(const Lock& lock, std::optional<Milliseconds> ttl) {
  return impl_->wait_for([&](Callback done) { extend_async(lock, std::move(done), ttl); });
}

Result Client::release(const Lock& lock) {
  return impl_->wait_for([&](Callback done) { release_async(lock, std::move(done)); });
}

Lock Client::adopt(std::string_view resource, std::string_view token, std::uint64_t fence) const {
  return impl_->adopt(resource, token, fence);
}

bool Client::wait_connected(std::size_t count, Milliseconds timeout) {
  return impl_->wait_connected(count, timeout);
}

bool Client::on_loop_thread() const noexcept { return impl_->loop().in_loop_thread(); }

std::size_t Client::size() const noexcept { return impl_->size(); }
std::size_t Client::quorum() const noexcept { return impl_->quorum(); }
const ClientOptions& Client::options() const noexcept { return impl_->options(); }
std::vector<std::string> Client::endpoints() const { return impl_->names(); }

std::chrono::microseconds drift_allowance(const ClientOptions& options, Milliseconds ttl) noexcept {
  return detail::drift_for(ttl, options.drift_factor, options.drift_constant);
}

std::chrono::microseconds Client::drift(Milliseconds ttl) const noexcept { return drift_allowance(impl_->options(), ttl); }

std::chrono::steady_clock::time_point Client::now() const { return impl_->clock().now(); }

std::chrono::microseconds Client::remaining(const Lock& lock) const { return impl_->remaining(lock); }

namespace detail {

namespace {

// The extend of `lock` on `client`. A Lock from another Client (its deadline is on that
// Client's validity clock, its LockState holds that Client's restart-guard epochs and is
// written on that Client's loop), from adopt() or built by hand from the public fields (no
// state; its deadline is whatever the builder copied) is extended like an adopted one: its old
// deadline is ignored, and the result gets a state of this Client's own (no epochs: the
// restart guard does not track it, as for any adopted lock).
std::shared_ptr<Operation> extend_operation(const ClientImpl& client, Lock lock, Callback done,
                                            std::optional<Milliseconds> ttl) {
  if (!client.granted_here(lock)) {
    LockAccess::set_adopted(lock, true);
    auto state = client.make_lock_state(client.size());
    state->granted_by = client.id();
    state->owner = owner_of(lock.key, lock.token);
    LockAccess::set_state(lock, std::move(state));
  }
  auto op = client.make_operation();
  op->done = std::move(done);
  op->key = lock.key;
  op->ttl = ttl.value_or(lock.ttl);
  op->part = ExtendPart{std::move(lock), std::chrono::steady_clock::time_point::max()};
  return op;
}

std::shared_ptr<Operation> release_operation(const ClientImpl& client, Lock lock, Callback done) {
  std::shared_ptr<LockState> state;
  if (client.granted_here(lock)) {
    state = LockAccess::state(lock);
    state->released.store(true, std::memory_order_release);
  }
  auto op = client.make_operation();
  op->done = std::move(done);
  op->key = std::move(lock.key);
  const std::uint64_t never_sent = state ? state->never_sent : 0;
  op->part = ReleasePart{std::move(lock.token), false, {}, never_sent, std::move(state)};
  return op;
}

}  // namespace

bool ClientImpl::granted_here(const Lock& lock) const noexcept {
  const auto& state = LockAccess::state(lock);
  return state && state->granted_by == id_ && state->owner == owner_of(lock.key, lock.token);
}

std::chrono::microseconds ClientImpl::remaining(const Lock& lock) const {
  // In a child of a fork(), every lock of this Client is the parent's (review 71: a child saw
  // the parent's validity count down, and could act as the holder).
  if (forked() || given_up(lock)) return std::chrono::microseconds{0};
  const auto deadline = deadline_of(lock);
  const auto now = clock().now();
  if (deadline <= now) return std::chrono::microseconds{0};
  return std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
}

bool ClientImpl::given_up(const Lock& lock) const noexcept {
  const auto& state = LockAccess::state(lock);
  return state && (state->lost.load(std::memory_order_acquire) || state->released.load(std::memory_order_acquire));
}

std::chrono::steady_clock::time_point ClientImpl::deadline_of(const Lock& lock) const noexcept {
  if (!granted_here(lock)) return std::chrono::steady_clock::time_point::min();  // unknown here
  return std::min(lock.deadline, LockAccess::state(lock)->deadline());
}

OperationId ClientImpl::extend_async(Lock lock, Callback done, std::optional<Milliseconds> ttl) {
  return submit(extend_operation(*this, std::move(lock), std::move(done), ttl));
}

OperationId ClientImpl::extend_now(Lock lock, Callback done, std::optional<Milliseconds> ttl,
                                   std::chrono::steady_clock::time_point resend_before) {
  auto op = extend_operation(*this, std::move(lock), std::move(done), ttl);
  std::get<ExtendPart>(op->part).resend_before = resend_before;
  return begin_now(std::move(op));
}

OperationId ClientImpl::release_async(Lock lock, Callback done) {
  return submit(release_operation(*this, std::move(lock), std::move(done)));
}

OperationId ClientImpl::release_now(Lock lock, Callback done) {
  return begin_now(release_operation(*this, std::move(lock), std::move(done)));
}

OperationId ClientImpl::begin_now(std::shared_ptr<Operation> op) {
  op->id = next_id_.fetch_add(1, std::memory_order_relaxed);
  const OperationId id = op->id;
  begin(op);
  return id;
}

}  // namespace detail

}  // namespace redlock

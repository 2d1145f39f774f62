// SPDX-License-Identifier: Apache-2.0
// redlock::Client's public functions: build an Operation and hand it to the loop.
#include "redlock/client.h"

#include "detail/client_impl.h"

namespace redlock {

using detail::AcquirePart;
using detail::ExtendPart;
using detail::Operation;
using detail::ReleasePart;

Client::Client(ClientOptions options) : impl_(std::make_unique<detail::ClientImpl>(std::move(options))) {}
Client::~Client() {
  if (impl_->inside_callback()) detail::ClientImpl::destroy_from_callback(std::move(impl_));
}

OperationId Client::acquire_async(std::string resource, Callback done, AcquireOptions options) {
  auto op = std::make_shared<Operation>();
  op->done = std::move(done);
  op->key = impl_->options().key_prefix + resource;
  op->ttl = options.ttl.value_or(impl_->options().ttl);
  AcquirePart acquire;
  acquire.resource = std::move(resource);
  acquire.retries_left = std::max(-1, options.retry_count.value_or(impl_->options().retry_count));
  acquire.fencing = options.fencing;
  if (options.wait) acquire.wait_deadline_ns = detail::deadline_after(detail::now_ns(), *options.wait);
  op->part = std::move(acquire);
  return impl_->submit(std::move(op));
}

OperationId Client::extend_async(Lock lock, Callback done, std::optional<Milliseconds> ttl) {
  auto op = std::make_shared<Operation>();
  op->done = std::move(done);
  op->key = lock.key;
  op->ttl = ttl.value_or(lock.ttl);
  op->part = ExtendPart{std::move(lock)};
  return impl_->submit(std::move(op));
}

OperationId Client::release_async(Lock lock, Callback done) {
  auto op = std::make_shared<Operation>();
  op->done = std::move(done);
  op->key = std::move(lock.key);
  op->part = ReleasePart{std::move(lock.token), false, {}};
  return impl_->submit(std::move(op));
}

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

std::size_t Client::size() const noexcept { return impl_->size(); }
std::size_t Client::quorum() const noexcept { return impl_->quorum(); }
const ClientOptions& Client::options() const noexcept { return impl_->options(); }
std::vector<std::string> Client::endpoints() const { return impl_->names(); }

std::chrono::microseconds drift_allowance(const ClientOptions& options, Milliseconds ttl) noexcept {
  return detail::drift_for(ttl, options.drift_factor, options.drift_constant);
}

std::chrono::microseconds Client::drift(Milliseconds ttl) const noexcept { return drift_allowance(impl_->options(), ttl); }

std::chrono::steady_clock::time_point Client::now() const { return impl_->clock().now(); }

std::chrono::microseconds Client::remaining(const Lock& lock) const {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(lock.deadline - impl_->clock().now());
  return std::max(left, std::chrono::microseconds{0});
}

}  // namespace redlock

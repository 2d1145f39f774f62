// SPDX-License-Identifier: Apache-2.0
// redlock::Client's public functions: build an Operation and hand it to the loop.
#include "redlock/client.h"

#include "detail/client_impl.h"

namespace redlock {

using detail::RoundKind;

Client::Client(ClientOptions options) : impl_(std::make_unique<detail::ClientImpl>(std::move(options))) {}
Client::~Client() {
  if (impl_->inside_callback()) detail::ClientImpl::destroy_from_callback(std::move(impl_));
}

OperationId Client::acquire_async(std::string resource, Callback done, AcquireOptions options) {
  auto op = std::make_shared<detail::Operation>();
  op->kind = RoundKind::acquire;
  op->done = std::move(done);
  op->key = impl_->options_.key_prefix + resource;
  op->resource = std::move(resource);
  op->ttl = options.ttl.value_or(impl_->options_.ttl);
  op->retries_left = std::max(-1, options.retry_count.value_or(impl_->options_.retry_count));
  op->fencing = options.fencing;
  if (options.wait) {
    op->wait_deadline_ns = detail::deadline_after(detail::now_ns(), *options.wait);
  }
  return impl_->submit(std::move(op));
}

OperationId Client::extend_async(Lock lock, Callback done, std::optional<Milliseconds> ttl) {
  auto op = std::make_shared<detail::Operation>();
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
  auto op = std::make_shared<detail::Operation>();
  op->kind = RoundKind::release;
  op->done = std::move(done);
  op->resource = std::move(lock.resource);
  op->key = std::move(lock.key);
  op->token = std::move(lock.token);
  return impl_->submit(std::move(op));
}

void Client::cancel(OperationId id) {
  detail::ClientImpl* impl = impl_.get();
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
std::size_t Client::quorum() const noexcept { return impl_->quorum_; }
const ClientOptions& Client::options() const noexcept { return impl_->options_; }
std::vector<std::string> Client::endpoints() const { return impl_->names_; }

std::chrono::microseconds Client::drift(Milliseconds ttl) const noexcept {
  return detail::drift_for(ttl, impl_->options_.drift_factor, impl_->options_.drift_constant);
}

std::chrono::steady_clock::time_point Client::now() const { return impl_->clock_->now(); }

std::chrono::microseconds Client::remaining(const Lock& lock) const {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(lock.deadline - impl_->clock_->now());
  return std::max(left, std::chrono::microseconds{0});
}

}  // namespace redlock

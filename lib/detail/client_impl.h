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
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "detail/diagnostics.h"
#include "detail/event_loop.h"
#include "detail/lock_commands.h"
#include "detail/master_set.h"
#include "detail/operation.h"
#include "detail/round.h"
#include "redlock/client.h"
#include "tls/tls_context.h"

namespace redlock::detail {

class ClientImpl {
 public:
  explicit ClientImpl(ClientOptions options);
  ~ClientImpl();
  ClientImpl(const ClientImpl&) = delete;
  ClientImpl& operator=(const ClientImpl&) = delete;

  // Any thread.
  OperationId submit(std::shared_ptr<Operation> op);
  void cancel_soon(OperationId id);  // posts cancel() to the loop
  Result wait_for(const std::function<void(Callback)>& start);
  bool wait_connected(std::size_t count, Milliseconds timeout);
  // Client::status (lib/status.cpp): throws UsageError for a bad resource name.
  void status_async(std::optional<std::string> resource, StatusCallback done);
  FleetStatus status(std::optional<std::string> resource);
  [[nodiscard]] Lock adopt(std::string_view resource, std::string_view token, std::uint64_t fence) const;

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

 private:
  // Loop thread.
  void begin(const std::shared_ptr<Operation>& op);
  void send_round(const std::shared_ptr<Operation>& op, RoundKind kind);
  void decided(const std::shared_ptr<Operation>& op, Round& round);
  // `state`: which masters granted; `fence`: the acquire's fencing token (0 when unfenced).
  void grant(const std::shared_ptr<Operation>& op, std::chrono::steady_clock::time_point started, Result result,
             std::shared_ptr<LockState> state, std::uint64_t fence);
  void fail_attempt(const std::shared_ptr<Operation>& op, Result result);
  void finish(const std::shared_ptr<Operation>& op, Result result);
  // Runs a user callback; its exceptions stop here. While it runs, deleting the Client
  // defers freeing this object (see destroy_from_callback).
  void call_back(const Callback& done, Result result) noexcept;
  void release_in_background(const std::string& key, const std::string& token, Milliseconds acquired_ttl);
  void warn_failed_release(const Operation& op, const Result& result) const;
  void cancel(OperationId id);
  void shutdown();

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
  MasterSet masters_;
  RoundContext round_context_;
  std::atomic<OperationId> next_id_{1};

  // Loop thread only.
  std::unordered_map<OperationId, std::shared_ptr<Operation>> operations_;
  std::minstd_rand jitter_rng_{std::random_device{}()};
  bool shutting_down_ = false;
  bool shut_down_ = false;
  int callbacks_running_ = 0;  // user callbacks on the stack (a Client may be deleted in one)
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// redlock/client.h — the quorum lock client.
//
// A Client holds one connection to each of N independent Redis masters, all driven by one
// libuv event loop. An acquire sends `SET key token NX PX ttl` to every master at once,
// decides as soon as the votes allow either way (quorum = N/2 + 1 for, or more than
// N - quorum against), and grants only while ttl - elapsed - drift is positive. A failed
// attempt is released on every master that was sent its SET. Release and extend are Lua compare-and-delete /
// compare-and-PEXPIRE scripts sent to all masters at once. N = 1 is the plain single-Redis
// lock through the same API.
//
// Threading: every public member function is thread-safe. Completion callbacks run on the
// loop thread (the Client's own, or the caller's uv loop); they must not block, and must not
// call the blocking functions (those throw UsageError there). Exceptions thrown by a
// callback are caught and discarded at the library boundary.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redlock/lease.h"
#include "redlock/options.h"
#include "redlock/result.h"
#include "redlock/status.h"

namespace redlock {

namespace detail {
class ClientImpl;
}

using OperationId = std::uint64_t;
using StatusCallback = std::function<void(FleetStatus)>;

class Client {
 public:
  // Validates `options` (throws ConfigError naming the bad value) and starts connecting to
  // every master in the background; it does not wait for the connections. Operations sent
  // while a master is still connecting wait for it within their command deadline.
  explicit Client(ClientOptions options);

  // Cancels operations still in flight (their callbacks get Outcome::cancelled and any
  // partial grant is released, best effort) and closes the connections. Never throws.
  // A connection with commands still unanswered (those releases among them) is closed once
  // its master has read everything sent to it (the master's EOF), or at the last of those
  // commands' deadlines (command_timeout after they were sent; at least 100 ms), later while
  // the master keeps answering (100 ms past each answer, up to 2 s): closed at once, the
  // kernel would reset it and the master drop what it had not read. The loop thread (or the
  // caller's loop) runs until then, so ~Client may wait that long for a master that is slow.
  // The release of a Lease destroyed (or released) before it is sent first, best effort: to
  // the masters whose connection is ready at that moment. A release (release_async, or a
  // Lease's) that reached the loop before the shutdown ran there, also one queued behind it
  // (a grant's callback releasing while ~Client runs on another thread), is sent before the
  // connections close, to each master whose connection is ready then (one still in its
  // handshake drops it unsent; its row says "never sent"). Its callback then says `released`,
  // or, when the close came before a quorum's replies, `cancelled` with how many masters it
  // was written to ("written to 2 of 3 masters": whether it ran there is unknown; "written to
  // none": the key stays until its ttl). One submitted after that is answered `cancelled`
  // ("the client is shutting down") at once and sent nowhere: the key stays until its ttl.
  // With the Client's own loop: joins the loop thread; must not be called from a callback
  // (that would wait for itself: it prints why and aborts).
  // With a caller's loop: must be called on that loop's thread (or while it is not
  // running), before the loop has ever run included; the caller must run the loop
  // afterwards until it has no handles left, which frees the last sockets. Those handles are
  // the library's to close: a uv_walk that uv_closes whatever is left (with a null callback)
  // leaks their memory, and a socket closed before its master read a release resets it, so
  // that release may be lost (the key then lives until its ttl). Deleting the
  // Client inside one of its own completion callbacks is allowed there: it shuts down at
  // once and its memory is freed on the loop's next iteration.
  // fork(): a Client belongs to the process that made it (its loop thread and sockets stay
  // there). In a child its calls answer `cancelled` at once (blocking ones included; Mutex
  // throws LockError), remaining() is 0 for every Lock, a Lease, Mutex or LockGuard holds
  // nothing there (redlock/lease.h, redlock/mutex.h), and its destructor frees and closes
  // nothing, so the parent's Client keeps working; make a new Client in the child. Limits: a
  // child of a process whose Clients resolved a host name (masters not given as addresses)
  // must end with _exit or exec, not exit(): libuv's exit handler joins its resolver threads,
  // which the child does not have, and crashes (libuv issue 4443). Built with GCC 12's ASan, a
  // child's malloc itself can wait for ever (that allocator is not fork-safe). A child forked
  // inside a callback on the Client's own loop thread must exec or _exit there: returning into
  // the loop ends it with status 70 (that loop runs on descriptors it shares with the
  // parent). With a caller's loop (ClientOptions::loop), a child that keeps running that loop
  // (uv_loop_fork) would run this Client's handles on the parent's sockets: destroy the Client
  // before forking such children, or make Clients in them after the fork.
  ~Client();

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // --- asynchronous API: never blocks; `done` is called exactly once, on the loop thread.
  OperationId acquire_async(std::string resource, Callback done, AcquireOptions options = {});
  OperationId extend_async(Lock lock, Callback done, std::optional<Milliseconds> ttl = {});
  OperationId release_async(Lock lock, Callback done);
  // Cancels an acquire (in flight or waiting to retry); its callback gets
  // Outcome::cancelled and any partial grant is released. Extend/release are not
  // cancellable (they finish within one command deadline). Unknown ids are ignored.
  void cancel(OperationId id);

  // --- leases (redlock/lease.h): renews `lock` in the background on this Client's loop until
  // the Lease is released or destroyed, and signals loss before the lock's deadline. Any
  // thread, the loop thread included (never blocks). Throws ConfigError naming a bad
  // LeaseOptions value, UsageError for a Lock that cannot be kept (default-constructed,
  // adopted: extend it once first, which gives it a known deadline; granted by another Client,
  // whose deadline is on that Client's validity clock: extend it on this Client first and
  // keep the extend's Lock).
  // A Lease may outlive its Client: destroying the Client stops its leases (see lease.h).
  Lease keep(Lock lock, LeaseOptions options = {});

  // --- blocking API: callable from any thread except the loop thread (UsageError there).
  // With a caller's loop (ClientOptions::loop), the loop thread is known once that loop has
  // run one of this Client's callbacks: a blocking call made before, on the thread that is
  // to run the loop, waits forever.
  // Acquire: retries per options (retry_count, retry_delay +- jitter, wait).
  Result acquire(std::string_view resource, AcquireOptions options = {});
  // Extend: one round. A lock whose deadline has passed is never extended
  // (Outcome::validity_expired), and a missing key is never recreated (Outcome::lost).
  // `ttl` defaults to the lock's own ttl. On success result.lock holds the new deadline.
  // A Lock granted by another Client (its deadline is on that Client's clock), or built by
  // hand from the public fields, is extended like an adopted one: its old deadline is not
  // consulted, the new deadline and validity come from this extend alone, and the result
  // belongs to this Client (restart guard: not tracked, like any adopted lock). A lost Lock
  // (Outcome::lost) or one whose release was submitted here (Outcome::invalid_argument) is
  // never extended, nor an adopted copy of a lock released here, whatever that release's
  // outcome, for connect_timeout plus twice max_lock_ttl (or the longest ttl this Client has
  // acquired or extended with, if longer, as it is at the extend) from its submission: the release, and the SETs and
  // extends before it, may still run on a master later than an extend sent on a new
  // connection. (This assumes, as Redlock does, that a command lands within that ttl of being
  // sent or never; docs/leases.md.)
  Result extend(const Lock& lock, std::optional<Milliseconds> ttl = {});
  // Release: one round of compare-and-delete on every master that was sent the lock's SET (a
  // master that refused it, or was not permitted it, holds nothing of it: its row reads
  // not_found, "not sent"; on another Client's or an adopted Lock, every master). A master
  // whose connection refused it or lost it (row not_connected) is sent it again once the
  // connection is back, within the longest ttl in use (docs/design.md, "What one master can
  // make the client hold").
  // From the moment it is submitted the Lock (every copy of it) is given up here: remaining()
  // is 0 and extend refuses it, whatever the release's outcome (a failed release is retried
  // with release(), not undone).
  // Released through an adopted copy (adopt()), the copies this Client granted, and those it
  // made its own by extending an adopted copy, are given up when the release begins on its
  // loop (before release() returns; their leases are told `taken`), and so is the granted copy
  // when one made so is released. A copy on another Client (or in another process) is not
  // told, and cannot be in time: an extend of it sent before this release has run on the
  // masters succeeds, the release then deletes the key under it, and that copy says "held"
  // for a whole ttl while another Client may be granted the lock (docs/leases.md, "A release
  // through another Client"). Releasing is the holder giving the lock up: stop every other
  // handle of it (and its Lease) first. An extend sent after the release landed finds the
  // key gone (Outcome::lost).
  Result release(const Lock& lock);

  // A Lock for a token this library printed earlier, e.g. by `redlock acquire` in another
  // process, so that this Client can extend or release it. Throws UsageError naming the bad
  // resource or token (a token is 32 lowercase hex digits). Its ttl is options().ttl (what an
  // extend sets unless given another) and `fence` is the fencing token it was granted with,
  // if any. Its validity is unknown here: `started` and `deadline` are now, remaining() is 0
  // and adopted() is true until an extend of it succeeds; unlike a granted Lock it may be
  // extended whatever its deadline says (the masters refuse if the key is gone or holds
  // another token, and never recreate it). lost() stays false: the Client does not know
  // which masters granted it.
  [[nodiscard]] Lock adopt(std::string_view resource, std::string_view token, std::uint64_t fence = 0) const;

  // --- status: one round of read-only commands to every master (redlock/status.h), bounded
  // by command_timeout; a frozen master is reported unreachable, never waited for. With a
  // `resource`, also who holds its key on each master. Changes no key. Throws UsageError
  // naming a bad resource name. status_async never blocks and calls `done` exactly once on
  // the loop thread; status blocks (not on the loop thread: UsageError there).
  void status_async(std::optional<std::string> resource, StatusCallback done);
  FleetStatus status(std::optional<std::string> resource = std::nullopt);

  // Blocks until at least `count` masters are connected (and authenticated), or `timeout`
  // passes. (A master's fencing votes count a little later, once its counter is caught up:
  // see docs/fencing.md.) Returns whether they are. Useful before a first, latency-sensitive acquire.
  bool wait_connected(std::size_t count, Milliseconds timeout);

  // Whether the calling thread is this Client's loop thread, where blocking calls are refused:
  // its own loop's thread; with a caller's loop, the thread that last ran that loop's
  // callbacks of this Client (none before the loop first ran one; the new one only once it
  // has, should the loop move to another thread).
  [[nodiscard]] bool on_loop_thread() const noexcept;

  [[nodiscard]] std::size_t size() const noexcept;    // N
  [[nodiscard]] std::size_t quorum() const noexcept;  // N/2 + 1
  [[nodiscard]] const ClientOptions& options() const noexcept;
  [[nodiscard]] std::vector<std::string> endpoints() const;  // display names, in order
  // The drift allowance for a given ttl: ttl * drift_factor + drift_constant.
  [[nodiscard]] std::chrono::microseconds drift(Milliseconds ttl) const noexcept;
  // Now on the Client's clock (the clock Lock::deadline is on).
  [[nodiscard]] std::chrono::steady_clock::time_point now() const;
  // Remaining validity of `lock` (deadline - now), never negative; 0 once it is lost() or its
  // release was submitted, and 0 for a Lock this Client did not grant (another Client's,
  // adopted, built by hand, or one whose key or token were changed: its validity is unknown
  // here; extend it here first).
  [[nodiscard]] std::chrono::microseconds remaining(const Lock& lock) const;

 private:
  std::unique_ptr<detail::ClientImpl> impl_;
};

}  // namespace redlock

// SPDX-License-Identifier: Apache-2.0
// detail/master_set.h — the N masters of one Client: their connections, and everything the
// Client knows about each across reconnects (its incarnation and the restart guard, its
// fencing counter catch-up, whether its user may run the lock, whether two configured
// masters are one server). Rounds ask it whether a master may be sent a command and whether
// its grant is a vote. Loop thread only (construction excepted).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detail/connection.h"
#include "detail/diagnostics.h"
#include "detail/fence_catch_up.h"
#include "detail/owed_releases.h"
#include "detail/restart_guard.h"
#include "redlock/options.h"

namespace redlock::detail {

class EventLoop;
class LockCommands;
class TlsContext;

class MasterSet {
 public:
  // How often a ready master's role, and a durable one's durability, are read again
  // (arm_periodic_read).
  static constexpr Milliseconds kReadEvery{1000};
  // How soon a release a master could not run (BUSY, LOADING) is sent again, at the least
  // (command_timeout if longer).
  static constexpr Milliseconds kRetryOwedAfter{100};

  // `options` must outlive the set (the ClientImpl's, with max_lock_ttl already defaulted);
  // so must `tls` (null when no master is rediss://).
  MasterSet(EventLoop& loop, const ClientOptions& options, const std::vector<Endpoint>& endpoints,
            const LockCommands& commands, const Diagnostics& diagnostics, TlsContext* tls);
  MasterSet(const MasterSet&) = delete;
  MasterSet& operator=(const MasterSet&) = delete;

  // Loop thread: creates the connections and starts connecting.
  void start();
  // The Client begins to shut down: releases are held to the count bound alone from now on
  // (Connection::begin_close).
  void begin_close();
  // Closes every connection (their outstanding sinks get a failure); no reconnect after.
  void close();
  [[nodiscard]] bool closed() const noexcept { return closed_; }
  // The masters (bit i: master i) whose connection is ready, so that what is queued there is
  // written; after close(), those whose connection was ready when it closed (a connection not
  // ready drops what it held for its handshake unsent).
  [[nodiscard]] std::uint64_t ready_set() const noexcept;

  [[nodiscard]] std::uint32_t size() const noexcept { return size_; }
  [[nodiscard]] std::uint32_t quorum() const noexcept { return quorum_; }
  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return names_; }
  [[nodiscard]] std::size_t ready_count() const noexcept;

  // Connection::send to master `index`; false (with last_error) when it cannot be queued,
  // also before start() or after close().
  bool send(std::uint32_t index, std::string_view encoded, std::shared_ptr<ReplySink> sink,
            std::uint64_t late_after_ns = 0, bool release = false, std::uint64_t sent_ns = 0, bool covered = false);
  [[nodiscard]] const std::string& last_error(std::uint32_t index) const;
  // A release master `index`'s connection refused or lost: sent again when it is ready
  // (OwedReleases). `encoded` is EVAL-encoded; `until_ns` on now_ns().
  // `soon`: the master answered that it could not run it now (BUSY with a script, LOADING) on
  // a connection that stays up: after max(command_timeout, kRetryOwedAfter) one of those owed
  // there is sent again, and so on each period while it is answered so; once it is answered
  // otherwise, all of them.
  void owe_release(std::uint32_t index, std::string encoded, std::uint64_t until_ns, bool soon = false);
  // The spell in which releases were owed to master `index` is over (its connection is back, or
  // it answered a release otherwise than BUSY or LOADING): the next drop past the bound warns again.
  void owed_spell_over(std::uint32_t index);
  // OwedReleases::late_release: what a release round's sink becomes past its deadline under a backlog.
  [[nodiscard]] std::shared_ptr<ReplySink> late_release(std::uint32_t index, std::string_view key,
                                                        std::string_view token, std::uint64_t until_ns,
                                                        std::shared_ptr<const LockState> state) {
    return owed_.late_release(index, key, token, until_ns, std::move(state));
  }
  [[nodiscard]] const LockCommands& commands() const noexcept { return commands_; }
  // Connection::failed_because of master `index`.
  [[nodiscard]] const std::string& failed_because(std::uint32_t index) const;

  // Why master `index` may not be sent a lock command (fenced: the fencing paths too).
  [[nodiscard]] std::optional<std::string> not_permitted(std::uint32_t index, bool fenced) const;
  // A round's command was refused by the ACL there (Connection::permission_refused): no lock
  // is sent there until a reconnect's check proves the permission again; warned once.
  void permission_refused(std::uint32_t index, bool fencing_only, std::string_view refusal);
  // Whether master `index`'s user may PUBLISH and SUBSCRIBE on the release channels, as its
  // last completed handshake proved (false before it: waiters poll it meanwhile).
  [[nodiscard]] bool notifications_permitted(std::uint32_t index) const noexcept;
  // Why master `index`'s grant is not a vote now (restart guard; fenced: the catch-up too).
  [[nodiscard]] std::optional<std::string> not_counted(std::uint32_t index, bool fenced) const;
  // Why a master whose INFO replication says "replica" does not vote (not_counted, its warning
  // and status say it).
  [[nodiscard]] static std::string replica_reason(std::string_view replica_of);
  // Restart guard: how long until master `index`'s grants count, when only its age keeps
  // them from counting now (for `redlock status`).
  [[nodiscard]] std::optional<std::uint64_t> counted_in_ns(std::uint32_t index) const;
  // Master `index`'s connection has completed its handshake.
  [[nodiscard]] bool ready(std::uint32_t index) const noexcept;
  // Master `index`'s connection is ready or connecting (not in reconnect backoff).
  [[nodiscard]] bool up_or_connecting(std::uint32_t index) const noexcept;
  // What master `index`'s last completed handshake learned (empty before the first).
  [[nodiscard]] const ServerInfo& server_info(std::uint32_t index) const noexcept;
  // Which rule counted a grant the age rule alone would not have, if any (for the row).
  [[nodiscard]] std::optional<std::string> counted_because(std::uint32_t index) const {
    return guard_.counted_because(index);
  }
  // Two configured masters that reach one server (the same run_id): one vote between them.
  [[nodiscard]] bool same_server(std::uint32_t a, std::uint32_t b) const { return guard_.same_server(a, b); }
  [[nodiscard]] bool any_same_server() const noexcept { return guard_.any_same_server(); }
  [[nodiscard]] const Incarnation& incarnation(std::uint32_t index) const { return guard_.incarnation(index); }
  [[nodiscard]] bool restart_guard_enabled() const noexcept { return guard_.enabled(); }
  // How many incarnations of master `index` this Client has seen: a new run_id, or any
  // reconnect while its run_id is unknown. A grant read under one count and decided under
  // another may be gone (Round::take_back_stale_votes).
  [[nodiscard]] std::uint32_t incarnations_seen(std::uint32_t index) const { return catch_up_.generation(index); }
  [[nodiscard]] bool fence_caught_up(std::uint32_t index) const { return catch_up_.ready(index); }

  // Restart guard: the keyspace mark's id this Client expects on master `index` ("" = not
  // known: an acquire then only asks that one exists).
  [[nodiscard]] const std::string& mark(std::uint32_t index) const { return guard_.incarnation(index).mark; }
  // What an acquire records when it is encoded for master `index`: 0 when the mark is not
  // known (it expects any), else the mark's generation + 1.
  [[nodiscard]] std::uint32_t mark_sent(std::uint32_t index) const {
    const Incarnation& incarnation = guard_.incarnation(index);
    return incarnation.mark.empty() ? 0 : incarnation.mark_generation + 1;
  }
  // An acquire sent to master `index` with mark_sent() `sent` was answered kMarkChangedError:
  // its keys were replaced since (RestartGuard::keys_replaced), and the mark is learned again.
  void mark_changed(std::uint32_t index, std::uint32_t sent);

  // A lock this Client granted (the restart guard may take votes away from it later), or made
  // its own by extending an adopted copy.
  void remember(const std::shared_ptr<LockState>& state) { guard_.remember(state); }
  // A release of the lock owner_of(key, token) through a copy that shares no state with the
  // granted one (Client::adopt): the granted copies give it up too.
  void released_elsewhere(std::uint64_t owner) { guard_.released_elsewhere(owner); }

 private:
  // What the set has already warned about for one master (warned once per problem).
  struct Warned {
    bool twin = false;              // another configured master is this same server
    std::string permission;         // the permission problem last warned about ("" = none)
    std::string eviction;           // the eviction risk last warned about ("" = none)
    std::string replica_of;         // the replica's master last warned about ("" = none)
    bool owed_dropped = false;      // releases owed to it were dropped in this spell (owed_spell_over)
  };
  class DurabilityRead;
  class RoleRead;
  class MarkRead;
  // Sends SET NX and GET of the mark to master `index` (after it was found changed).
  void learn_mark(std::uint32_t index);
  // A mark read on master `index` (MarkRead): `sent_with` the id known when it was sent.
  void mark_read(std::uint32_t index, const std::string& sent_with, bool created, const std::string& read,
                 bool learning);
  void on_ready(std::uint32_t index);
  void warn_permissions(std::uint32_t index);
  void warn_replica(std::uint32_t index);
  // While master `index`'s connection is ready, its role is read again every kReadEvery, and
  // while its incarnation counts as durable its durability too. REPLICAOF on a live master
  // keeps every connection, and its next full resync replaces its keys (RestartGuard::
  // observe_role); AOF switched off at run time (CONFIG SET appendonly no) loses what is
  // granted after it at the next restart. A read at handshakes alone would miss both on a
  // connection that lives for days.
  void arm_periodic_read(std::uint32_t index);
  void read_periodically(std::uint32_t index);
  // A periodic read's INFO replication on master `index`'s live connection.
  void role_read(std::uint32_t index, const ServerInfo& read);
  // Arms master `index`'s retry of releases it answered BUSY or LOADING (owe_release), unless
  // armed; each period it probes again while any are owed and the connection is up.
  void arm_owed_retry(std::uint32_t index);

  EventLoop& loop_;
  const ClientOptions& options_;
  const std::vector<Endpoint> endpoints_;
  const LockCommands& commands_;
  const Diagnostics& diagnostics_;
  TlsContext* const tls_;
  const std::uint32_t size_;
  const std::uint32_t quorum_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Connection>> connections_;  // empty until start()
  RestartGuard guard_;
  FenceCatchUp catch_up_;
  OwedReleases owed_;
  std::vector<Warned> warned_;
  std::vector<std::uint64_t> read_timers_;  // EventLoop::TimerId per master, 0 = none
  std::vector<std::uint64_t> owed_timers_;  // the same, for owe_release(..., soon)
  std::vector<bool> learning_mark_;         // learn_mark sent, not answered yet
  bool closed_ = false;
  std::uint64_t ready_when_closed_ = 0;  // see ready_set()
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// The N masters of one Client (detail/master_set.h).
#include "detail/master_set.h"

#include <hiredis/hiredis.h>

#include "detail/commands.h"
#include "detail/event_loop.h"
#include "detail/lock_commands.h"
#include "detail/loop_time.h"
#include "detail/quorum.h"

namespace redlock::detail {

MasterSet::MasterSet(EventLoop& loop, const ClientOptions& options, const std::vector<Endpoint>& endpoints,
                     const LockCommands& commands, const Diagnostics& diagnostics, TlsContext* tls)
    : loop_(loop),
      options_(options),
      endpoints_(endpoints),
      commands_(commands),
      diagnostics_(diagnostics),
      tls_(tls),
      size_(static_cast<std::uint32_t>(endpoints.size())),
      quorum_(quorum_of(size_)),
      guard_(size_, quorum_, options.restart_guard, options.max_lock_ttl),
      catch_up_(*this, loop, commands, options),
      owed_(*this, size_, options.command_timeout),
      warned_(size_),
      read_timers_(size_, 0),
      owed_timers_(size_, 0),
      learning_mark_(size_, false) {
  for (const auto& endpoint : endpoints_) names_.push_back(endpoint.display());
}

void MasterSet::start() {
  if (closed_ || !connections_.empty()) return;
  for (std::uint32_t i = 0; i < size_; ++i) {
    ConnectionOptions co = connection_options(options_, endpoints_[i], tls_);
    co.handshake_steps = [this] { return commands_.handshake_steps(); };
    connections_.push_back(std::make_unique<Connection>(loop_, std::move(co)));
    connections_.back()->on_ready = [this, i] { on_ready(i); };
    connections_.back()->on_down = [this, i] { guard_.connection_lost(i); };
    connections_.back()->start();
  }
}

void MasterSet::begin_close() {
  for (auto& connection : connections_) connection->begin_close(commands_.release_load_command());
}

void MasterSet::close() {
  // Read before the first close: closing one fails its commands, which can decide a round.
  ready_when_closed_ = ready_set();
  closed_ = true;
  for (auto* timers : {&read_timers_, &owed_timers_}) {
    for (auto& timer : *timers) {
      if (timer != 0) loop_.cancel(std::exchange(timer, 0));
    }
  }
  for (auto& connection : connections_) connection->close();
}

std::uint64_t MasterSet::ready_set() const noexcept {
  if (closed_) return ready_when_closed_;
  std::uint64_t ready = 0;
  for (std::size_t i = 0; i < connections_.size(); ++i) {
    if (connections_[i]->ready()) ready |= std::uint64_t{1} << i;
  }
  return ready;
}

std::size_t MasterSet::ready_count() const noexcept {
  std::size_t ready = 0;
  for (const auto& connection : connections_) {
    if (connection->ready()) ++ready;
  }
  return ready;
}

bool MasterSet::send(std::uint32_t index, std::string_view encoded, std::shared_ptr<ReplySink> sink,
                     std::uint64_t late_after_ns, bool release, std::uint64_t sent_ns, bool covered) {
  if (index >= connections_.size()) return false;
  return connections_[index]->send(encoded, std::move(sink), index, late_after_ns, release, sent_ns, covered);
}

void MasterSet::owe_release(std::uint32_t index, std::string encoded, std::uint64_t until_ns, bool soon) {
  if (closed_ || index >= size_) return;
  if (soon) arm_owed_retry(index);
  if (!owed_.owe(index, std::move(encoded), until_ns) && !warned_[index].owed_dropped) {
    warned_[index].owed_dropped =
        diagnostics_.warn("master " + names_[index] + ": more than " + std::to_string(OwedReleases::kMaxPerMaster) +
                              " releases are waiting to be sent again (its connection down, its backlog of "
                              "unsent commands full, or the master BUSY or LOADING); more are not kept, and "
                              "their keys stay there until their ttl",
                          names_[index] + " (owed releases)");
  }
}

// The connection is up, so no on_ready will come: while releases are owed there, each period
// asks the master with one of them whether it runs them again (OwedReleases::probe). If the
// connection dropped meanwhile, its on_ready sends them.
void MasterSet::arm_owed_retry(std::uint32_t index) {
  if (owed_timers_[index] != 0) return;
  owed_timers_[index] = loop_.schedule_after(std::max(options_.command_timeout, kRetryOwedAfter), [this, index] {
    owed_timers_[index] = 0;
    if (closed_ || !ready(index) || owed_.owed(index) == 0) return;
    owed_.probe(index);
    arm_owed_retry(index);
  });
}

void MasterSet::owed_spell_over(std::uint32_t index) {
  if (index < size_) warned_[index].owed_dropped = false;
}

const std::string& MasterSet::last_error(std::uint32_t index) const {
  static const std::string kNotStarted = "not connected yet";
  return index < connections_.size() ? connections_[index]->last_error() : kNotStarted;
}

std::optional<std::string> MasterSet::not_permitted(std::uint32_t index, bool fenced) const {
  if (index >= connections_.size()) return std::nullopt;
  const Connection& connection = *connections_[index];
  if (!connection.ready()) return std::nullopt;
  const auto& info = connection.server_info();
  if (!info.not_permitted.empty()) return "not permitted: " + info.not_permitted;
  if (fenced && !info.fence_not_permitted.empty()) return "not permitted (fencing): " + info.fence_not_permitted;
  return std::nullopt;
}

void MasterSet::permission_refused(std::uint32_t index, bool fencing_only, std::string_view refusal) {
  if (index >= connections_.size()) return;
  if (connections_[index]->permission_refused(fencing_only, refusal)) warn_permissions(index);
}

bool MasterSet::notifications_permitted(std::uint32_t index) const noexcept {
  return ready(index) && connections_[index]->server_info().notify_not_permitted.empty();
}

const std::string& MasterSet::failed_because(std::uint32_t index) const {
  static const std::string kNone;
  return index < connections_.size() ? connections_[index]->failed_because() : kNone;
}

bool MasterSet::ready(std::uint32_t index) const noexcept {
  return index < connections_.size() && connections_[index]->ready();
}

bool MasterSet::up_or_connecting(std::uint32_t index) const noexcept {
  return index < connections_.size() && connections_[index]->up_or_connecting();
}

const ServerInfo& MasterSet::server_info(std::uint32_t index) const noexcept {
  static const ServerInfo kNoInfo{};
  return index < connections_.size() ? connections_[index]->server_info() : kNoInfo;
}

std::optional<std::uint64_t> MasterSet::counted_in_ns(std::uint32_t index) const {
  return guard_.counted_in_ns(index, server_info(index));
}

std::optional<std::string> MasterSet::not_counted(std::uint32_t index, bool fenced) const {
  const ServerInfo& info = server_info(index);
  if (info.role == "replica") return replica_reason(info.replica_of);
  if (auto why = guard_.not_counted(index, info)) return why;
  if (guard_.enabled() && commands_.keyspace_mark() && guard_.incarnation(index).mark.empty()) {
    // The mark cannot be read (GET or SET refused by the ACL, say): a wipe would not be seen.
    // Nor when learning it again failed (its SET NX refused: OOM, BUSY; its GET found none): an
    // acquire would then only ask that some mark exists (review 60: a second wipe re-marked by
    // another Client was counted at once, and a held lock never heard it). Read again every
    // second (read_periodically).
    const std::string why = info.mark_error.empty() ? std::string("not learned again yet") : info.mark_error;
    return "keyspace mark unknown (" + why + "): a wipe (FLUSHALL, SWAPDB...) would not be seen, so the " +
           "restart guard does not count it; allow SET and GET on '" + commands_.mark_key() +
           "' to the lock user (docs/permissions.md)";
  }
  if (guard_.enabled() && info.role.empty()) {
    // The guard's promise covers keys a master forgets; a writable replica forgets them at its
    // next resync, so with the guard on a master that cannot be told from one does not vote
    // (a review: INFO replication alone refused by the ACL let a replica vote).
    return "role unknown (" + info.role_error +
           "): it may be a replica, whose keys a resync wipes, so the restart guard does not count it; allow INFO "
           "to the lock user (docs/permissions.md)";
  }
  if (fenced && !catch_up_.ready(index)) return std::string("fencing counter not caught up since this master (re)started");
  return std::nullopt;
}

// A replica that accepts writes (replica-read-only no) grants a lock's SET, and a full resync
// from its own master then wipes the key and the fencing counter while its run_id and our
// connection stay: the restart guard sees nothing (a review: two holders 5 of 5, fencing
// tokens 8 -> 1). A read-only one refuses the SET (READONLY) anyway.
std::string MasterSet::replica_reason(std::string_view replica_of) {
  return "a replica (of " + std::string(replica_of) +
         "), not a master: it refuses the lock's SET (READONLY), or if writable a resync from its master wipes its "
         "keys and fencing counter, so its grants are not counted; list only independent masters";
}

void MasterSet::on_ready(std::uint32_t index) {
  const ServerInfo& info = connections_[index]->server_info();
  warn_replica(index);
  const bool new_incarnation = guard_.observe(index, info);
  bool keys_replaced = guard_.observe_role(index, info);
  if (commands_.keyspace_mark()) {
    learning_mark_[index] = false;  // a reply lost with the old connection, if any: this read replaces it
    keys_replaced = guard_.observe_mark(index, info.mark_created, info.mark) || keys_replaced;
  }
  if (new_incarnation) warned_[index].twin = false;
  if (new_incarnation || keys_replaced) catch_up_.on_new_incarnation(index);
  warn_permissions(index);
  if (!new_incarnation && !keys_replaced) catch_up_.on_reconnect(index, !info.run_id.empty());
  catch_up_.on_master_ready(index);
  owed_.on_ready(index);
  owed_spell_over(index);
  const Incarnation& incarnation = guard_.incarnation(index);
  for (std::uint32_t other = 0; other < size_; ++other) {
    if (!same_server(index, other) || warned_[index].twin) continue;
    warned_[index].twin =
        diagnostics_.warn("masters " + names_[other] + " and " + names_[index] + " are the same server (run_id " +
                              incarnation.run_id + "): they give one vote between them; list every server once",
                          names_[index] + " (same server)");
  }
  // Again only when the policy changes (every reconnect reads it), not at every reconnect.
  std::string risk = eviction_risk(info.maxmemory_policy, options_.fence_key);
  // Recorded as warned only when shown: one the rate limit held back is warned at a later
  // reconnect.
  if (risk.empty()) {
    warned_[index].eviction.clear();
  } else if (risk != warned_[index].eviction &&
             diagnostics_.warn("master " + names_[index] + ": " + risk, names_[index] + " (eviction)")) {
    warned_[index].eviction = std::move(risk);
  }
  arm_periodic_read(index);
}

// Once per replica_of, as for the other problems: again only after it changed.
void MasterSet::warn_replica(std::uint32_t index) {
  const ServerInfo& info = connections_[index]->server_info();
  std::string& replica_warned = warned_[index].replica_of;
  if (info.role != "replica") {
    replica_warned.clear();
  } else if (info.replica_of != replica_warned &&
             diagnostics_.warn("master " + names_[index] + " is " + replica_reason(info.replica_of),
                               names_[index] + " (replica)")) {
    replica_warned = info.replica_of;
  }
}

// INFO replication read again on a live connection. A reply that did not come (the connection
// went down: the next handshake reads it) tells nothing here; any error leaves the role unknown,
// as at a handshake: INFO refused by the ACL, BUSY (a script), LOADING (Redis 7 answers INFO
// while loading; another server might not). The next read that tells compares the replication
// ID with the last one read (RestartGuardTest.AMasterPromotedWhileItsRoleReadsWereRefusedIs...).
class MasterSet::RoleRead final : public ReplySink {
 public:
  explicit RoleRead(MasterSet& set) : set_(set) {}
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    if (reply == nullptr || set_.closed_) return;
    ServerInfo read;
    read_info_replication(*reply, read);
    set_.role_read(index, read);
  }

 private:
  MasterSet& set_;
};

void MasterSet::role_read(std::uint32_t index, const ServerInfo& read) {
  if (!ready(index)) return;
  connections_[index]->role_read(read);
  warn_replica(index);
  if (guard_.observe_role(index, connections_[index]->server_info())) catch_up_.on_new_incarnation(index);
}

// The keyspace mark read again (restart guard on): with the role every second, and after an
// acquire found it changed (then SET NX first: learning). A reply that did not come (the
// connection went down: the next handshake reads it) or an error (the server's state, an ACL
// change) tells nothing.
class MasterSet::MarkRead final : public ReplySink {
 public:
  MarkRead(MasterSet& set, std::string sent_with, bool learning)
      : set_(set), sent_with_(std::move(sent_with)), learning_(learning), left_(learning ? 2 : 1) {}
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    const bool last = --left_ == 0;
    if (set_.closed_) return;
    if (!last) {
      created_ = reply != nullptr && reply->type == REDIS_REPLY_STATUS;
      return;
    }
    if (learning_) set_.learning_mark_[index] = false;
    std::string read;
    if (reply != nullptr && reply->type == REDIS_REPLY_STRING) read.assign(reply->str, reply->len);
    const bool told = reply != nullptr && (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_NIL);
    if (told) set_.mark_read(index, sent_with_, created_, read, learning_);
  }

 private:
  MasterSet& set_;
  const std::string sent_with_;
  const bool learning_;
  int left_;
  bool created_ = false;
};

void MasterSet::mark_changed(std::uint32_t index, std::uint32_t sent) {
  if (closed_ || index >= size_ || !guard_.enabled()) return;
  // Sent with an id this Client has since given up (the change was already taken): nothing
  // new. Sent with none known ("any id"): the mark was absent when it ran, after the handshake
  // that read it (same connection, in order): news, unless it is being learned again now.
  if (sent != 0 && sent != mark_sent(index)) return;
  if (guard_.incarnation(index).mark.empty() && learning_mark_[index]) return;
  guard_.keys_replaced(index, "keyspace replaced (mark changed)");
  catch_up_.on_new_incarnation(index);
  learn_mark(index);
}

void MasterSet::learn_mark(std::uint32_t index) {
  guard_.forget_mark(index);
  if (closed_ || !ready(index) || learning_mark_[index]) return;  // not ready: the handshake learns it
  auto read = std::make_shared<MarkRead>(*this, std::string(), true);
  if (send(index, commands_.mark_create(), read) && send(index, commands_.mark_read(), read)) {
    learning_mark_[index] = true;
  }
}

void MasterSet::mark_read(std::uint32_t index, const std::string& sent_with, bool created, const std::string& read,
                          bool learning) {
  if (!ready(index)) return;
  const std::string& known = guard_.incarnation(index).mark;
  if (learning) {
    if (!known.empty()) return;  // a handshake learned it meanwhile
    if (guard_.observe_mark(index, created, read)) catch_up_.on_new_incarnation(index);
    return;
  }
  // A periodic read: only one sent with the id still known tells (a handshake or a relearn
  // may have moved it since).
  if (sent_with.empty() || sent_with != known || read == known) return;
  guard_.keys_replaced(index, "keyspace replaced (mark changed)");
  catch_up_.on_new_incarnation(index);
  learn_mark(index);
}

// The three CONFIG GETs of one durability read. A reply that did not come (the connection
// went down) or a LOADING / BUSY error (the server's state, not its configuration) tells
// nothing; another error (CONFIG refused by the ACL) counts as not durable, as at a handshake.
// A read that tells nothing does not move durable_seen_ns: reads that keep telling nothing
// end the counting at once after a restart (RestartGuard::kDurableReadGapNs).
class MasterSet::DurabilityRead final : public ReplySink {
 public:
  DurabilityRead(MasterSet& set, std::uint32_t epoch) : set_(set), epoch_(epoch), sent_ns_(now_ns()) {}
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view) override {
    if (reply == nullptr || is_server_state_error(*reply)) {
      answered_ = false;
    } else {
      read_config_get(*reply, config_);
    }
    if (--left_ == 0 && answered_ && !set_.closed_) set_.guard_.durability_read(index, epoch_, config_, sent_ns_);
  }

 private:
  MasterSet& set_;
  const std::uint32_t epoch_;
  const std::uint64_t sent_ns_;
  ServerInfo config_;
  int left_ = 3;
  bool answered_ = true;
};

void MasterSet::arm_periodic_read(std::uint32_t index) {
  if (closed_ || read_timers_[index] != 0) return;
  read_timers_[index] = loop_.schedule_after(kReadEvery, [this, index] {
    read_timers_[index] = 0;
    read_periodically(index);
  });
}

void MasterSet::read_periodically(std::uint32_t index) {
  // Not ready: the next handshake reads it all (and on_ready arms the next read).
  if (closed_ || !ready(index)) return;
  // A backlog that refuses part of it leaves it unanswered: the next read tries again (and
  // compares the replication ID with the last one read: RestartGuard::observe_role).
  const bool role_sent = send(index, encode_command({"INFO", "replication"}), std::make_shared<RoleRead>(*this));
  if (role_sent && guard_.enabled() && commands_.keyspace_mark()) {
    if (!guard_.incarnation(index).mark.empty()) {
      // A wipe on a master no acquire goes to: held locks hear it within a read interval.
      send(index, commands_.mark_read(), std::make_shared<MarkRead>(*this, guard_.incarnation(index).mark, false));
    } else {
      // Unknown (a relearn or the handshake's read failed): learned again; not counted meanwhile.
      learn_mark(index);
    }
  }
  if (role_sent && guard_.enabled() && guard_.incarnation(index).durable) {
    auto read = std::make_shared<DurabilityRead>(*this, guard_.incarnation(index).epoch);
    for (const char* parameter : {kConfigRead[1], kConfigRead[2], kConfigRead[3]}) {
      if (!send(index, encode_command({"CONFIG", "GET", parameter}), read)) break;
    }
  }
  arm_periodic_read(index);
}

// Once per master and problem: again only if the problem changes (re-checked on every
// reconnect, as the ACL may have changed), and after it was fixed and came back.
void MasterSet::warn_permissions(std::uint32_t index) {
  const auto& info = connections_[index]->server_info();
  std::string& warned = warned_[index].permission;
  // Release notifications matter only when the Client uses them.
  const std::string& notify = options_.release_notifications ? info.notify_not_permitted : std::string();
  const std::string problem = info.not_permitted + "|" + info.fence_not_permitted + "|" + notify;
  if (problem == "||") {
    warned.clear();
    return;
  }
  if (problem == warned) return;
  // Recorded as warned only when every warning of it was shown (the rate limit may hold one
  // back: it is warned at a later reconnect).
  bool shown = true;
  if (!info.not_permitted.empty()) {
    shown = diagnostics_.warn("master " + names_[index] +
                                  ": the lock user may not run the lock's commands there, so it is sent no lock " +
                                  "(not_permitted) until a reconnect proves otherwise: " + info.not_permitted +
                                  " (docs/permissions.md lists the ACL the library needs)",
                              names_[index] + " (permissions)");
  } else if (!info.fence_not_permitted.empty()) {
    shown = diagnostics_.warn("master " + names_[index] +
                                  ": the lock user may not touch the fencing counter there, so fenced acquires " +
                                  "are not sent to it (not_permitted): " + info.fence_not_permitted +
                                  " (docs/permissions.md lists the ACL the library needs)",
                              names_[index] + " (permissions)");
  }
  if (!notify.empty()) {
    shown = diagnostics_.warn("master " + names_[index] +
                                  ": the lock user may not publish or subscribe to release notifications there, so "
                                  "waiters poll it (retry_delay) instead of hearing releases: " +
                                  notify + " (docs/permissions.md lists the ACL the library needs)",
                              names_[index] + " (permissions)") &&
            shown;
  }
  if (shown) warned = problem;
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// Client::status (redlock/status.h): one query, detail/status_query.h.
#include <hiredis/hiredis.h>

#include <charconv>
#include <cstdlib>
#include <future>
#include <map>
#include <string_view>

#include "detail/client_impl.h"
#include "detail/commands.h"
#include "detail/diagnostics.h"
#include "detail/loop_time.h"
#include "detail/master_set.h"
#include "detail/status_query.h"
#include "detail/sweep.h"
#include "detail/validation.h"
#include "redlock/errors.h"

namespace redlock::detail {

using std::chrono::microseconds;
using std::chrono::milliseconds;

namespace {

// A clock this far from ours is worth a word: the restart guard reads uptime, which Redis
// takes from its wall clock (docs/design.md "Restart guard").
constexpr microseconds kClockWarning{1'000'000};

std::string_view text_of(const redisReply& reply) { return {reply.str, reply.len}; }

// One "name:value" line of an INFO reply ("" when absent).
std::string_view info_field(std::string_view text, std::string_view name) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find_first_of("\r\n", at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (line.size() > name.size() && line.substr(0, name.size()) == name && line[name.size()] == ':') {
      return line.substr(name.size() + 1);
    }
    at = end + 1;
  }
  return {};
}

template <class Integer>
std::optional<Integer> number(std::string_view text) {
  Integer value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string offset_text(microseconds value) {
  const long long ms = value.count() / 1000;
  const long long tenths = (std::llabs(value.count()) % 1000) / 100;
  return std::string(value.count() < 0 ? (ms == 0 ? "-" : "") : "+") + std::to_string(ms) + "." + std::to_string(tenths) + " ms";
}

}  // namespace

// Receives one master's replies, in the order its commands were sent (Redis answers a
// connection in order), and hands each to the query with its index.
class StatusQuery::MasterSink final : public ReplySink {
 public:
  explicit MasterSink(std::shared_ptr<StatusQuery> query) : query_(std::move(query)) {}
  void on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) override {
    query_->on_reply(index, reply, failure);
  }

 private:
  std::shared_ptr<StatusQuery> query_;
};

StatusQuery::StatusQuery(EventLoop& loop, MasterSet& masters, const Diagnostics& diagnostics, milliseconds timeout,
                         std::optional<std::string> resource, std::string key, std::string fence_key, Done done)
    : loop_(loop),
      masters_(masters),
      diagnostics_(diagnostics),
      timeout_(timeout),
      resource_(std::move(resource)),
      key_(std::move(key)),
      fence_key_(std::move(fence_key)),
      done_(std::move(done)),
      pending_(masters.size()),
      tokens_(masters.size()) {}

void StatusQuery::start() {
  std::vector<std::string> commands{encode_command({"TIME"}), encode_command({"INFO", "replication"}),
                                    encode_command({"INFO", "server"})};
  if (resource_) {
    commands.push_back(encode_command({"GET", key_}));
    commands.push_back(encode_command({"PTTL", key_}));
  }
  wall_before_ = std::chrono::system_clock::now();
  sent_ns_ = now_ns();
  const std::uint64_t deadline = deadline_after(sent_ns_, timeout_);
  auto sink = std::make_shared<MasterSink>(shared_from_this());
  for (std::uint32_t i = 0; i < masters_.size(); ++i) {
    Pending& master = pending_[i];
    master.connected_before = masters_.ready(i);
    for (const auto& command : commands) {
      // Past the deadline nobody needs the reply: a silent master then keeps no sink.
      if (!masters_.send(i, command, sink, deadline)) {
        // Replies come in send order, so what was sent still lines up; nothing more is sent.
        // shown(): a handshake's failure may quote the server's echo of the password.
        if (master.sent == 0) master.failure = diagnostics_.shown(masters_.last_error(i));
        break;
      }
      ++master.sent;
    }
  }
  sink.reset();
  if (everyone_answered()) {
    finish();
    return;
  }
  auto self = shared_from_this();
  deadline_timer_ = loop_.schedule_at(deadline, [self] {
    self->deadline_timer_ = 0;
    // Replies already waiting in the sockets count: read them before timing anyone out.
    self->loop_.after_io([self] { self->finish(); });
  });
}

bool StatusQuery::everyone_answered() const {
  for (const auto& master : pending_) {
    if (master.answered < master.sent) return false;
  }
  return true;
}

void StatusQuery::on_reply(std::uint32_t index, const redisReply* reply, std::string_view failure) {
  if (finished_ || index >= pending_.size()) return;
  Pending& master = pending_[index];
  const auto command = static_cast<Command>(master.answered);
  ++master.answered;
  if (reply == nullptr) {
    if (master.failure.empty()) master.failure = diagnostics_.shown(failure);
  } else {
    if (master.first_reply_ns == 0) {
      master.first_reply_ns = now_ns();
      master.wall_after = std::chrono::system_clock::now();
    }
    read(index, command, *reply);
  }
  if (everyone_answered()) finish();
}

void StatusQuery::read(std::uint32_t index, Command command, const redisReply& reply) {
  MasterReport& report = pending_[index].report;
  const bool error = reply.type == REDIS_REPLY_ERROR;
  switch (command) {
    case kTime: {
      if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 2 || reply.element[0]->type != REDIS_REPLY_STRING ||
          reply.element[1]->type != REDIS_REPLY_STRING) {
        report.warnings.push_back("TIME failed: " +
                                  (error ? diagnostics_.shown(text_of(reply)) : std::string("unexpected reply")));
        return;
      }
      const auto seconds = number<long long>(text_of(*reply.element[0]));
      const auto micros = number<long long>(text_of(*reply.element[1]));
      // Checked before the sum (a hostile 2^63 - 1 microseconds overflowed it).
      if (!seconds || !micros || *seconds < 0 || *seconds > 1'000'000'000'000LL || *micros < 0 || *micros > 999'999) {
        // shown(): a master may echo the password it was sent, here as anywhere.
        report.warnings.push_back(diagnostics_.shown("TIME said " + std::string(text_of(*reply.element[0])) + " s and " +
                                                     std::string(text_of(*reply.element[1])) + " us: not a time"));
        return;
      }
      const microseconds server{*seconds * 1'000'000LL + *micros};
      const auto before = std::chrono::duration_cast<microseconds>(wall_before_.time_since_epoch());
      const auto after = std::chrono::duration_cast<microseconds>(pending_[index].wall_after.time_since_epoch());
      report.clock_offset = server - (before + (after - before) / 2);
      report.clock_uncertainty = (after - before) / 2;
      return;
    }
    case kInfoReplication: {
      ServerInfo read;
      read_info_replication(reply, read);
      if (read.role.empty()) {
        report.role_error = diagnostics_.shown(read.role_error);
      } else {
        report.role = read.role;
        report.replica_of = diagnostics_.shown(read.replica_of);
      }
      return;
    }
    case kInfoServer: {
      if (reply.type != REDIS_REPLY_STRING) return;
      if (auto seconds = number<long long>(info_field(text_of(reply), "uptime_in_seconds"))) {
        report.uptime = std::chrono::seconds(*seconds);
      }
      return;
    }
    case kGet:
      if (reply.type == REDIS_REPLY_NIL) {
        report.holder = "";
      } else if (reply.type == REDIS_REPLY_STRING) {
        // Never the whole token: whoever reads a status must not be able to release the lock.
        tokens_[index] = std::string(text_of(reply));
        report.holder_is_token = !check_token(tokens_[index]).has_value();
        report.holder = report.holder_is_token ? tokens_[index].substr(0, 8) : std::string("?");
      } else {
        report.resource_error = "GET: " + (error ? diagnostics_.shown(text_of(reply)) : std::string("unexpected reply"));
      }
      return;
    case kPttl:
      if (reply.type == REDIS_REPLY_INTEGER) {
        if (reply.integer >= -1) report.pttl = milliseconds(reply.integer);  // -2: no key
      } else if (report.resource_error.empty()) {
        report.resource_error = "PTTL: " + (error ? diagnostics_.shown(text_of(reply)) : std::string("unexpected reply"));
      }
      return;
  }
}

void StatusQuery::finish() {
  if (finished_) return;
  finished_ = true;
  if (deadline_timer_ != 0) loop_.cancel(std::exchange(deadline_timer_, 0));
  FleetStatus status;
  status.size = masters_.size();
  status.quorum = masters_.quorum();
  std::string why_not;
  for (std::uint32_t i = 0; i < masters_.size(); ++i) {
    MasterReport report = std::move(pending_[i].report);
    assess(i, status.masters, report);
    if (report.can_vote) {
      ++status.voters;
    } else {
      std::string why = !report.reachable                    ? "unreachable (" + report.error + ")"
                        : report.role == "replica"           ? std::string("a replica")
                        : !report.role                       ? "role unknown (" + report.role_error + ")"
                        : !report.not_permitted.empty()      ? "not permitted (" + report.not_permitted + ")"
                        : !report.not_counted_reason.empty() ? report.not_counted_reason
                                                             : std::string("the same server as another master");
      why_not += "; " + report.endpoint + ": " + why;
    }
    status.masters.push_back(std::move(report));
  }
  status.can_grant = status.voters >= status.quorum;
  if (!status.can_grant) {
    status.reason = "only " + std::to_string(status.voters) + " of " + std::to_string(status.size) +
                    " masters can vote now, " + std::to_string(status.quorum) + " needed" + why_not;
  }
  if (resource_) summarize_resource(status);
  Done done = std::move(done_);
  done_ = nullptr;
  if (done) done(std::move(status));
}

// Everything about master `index` that is not a reply: the connection, the handshake's
// ServerInfo, permissions, the restart guard; then whether it can vote and what to warn about.
void StatusQuery::assess(std::uint32_t index, const std::vector<MasterReport>& earlier, MasterReport& report) const {
  const Pending& master = pending_[index];
  report.endpoint = masters_.names()[index];
  report.connected_before = master.connected_before;
  report.reachable = master.sent > 0 && master.answered == master.sent && master.failure.empty() &&
                     master.first_reply_ns != 0;
  if (!report.reachable) {
    if (!master.failure.empty()) {
      report.error = master.failure;
    } else {
      report.error = "no reply within the " + std::to_string(timeout_.count()) + " ms command timeout";
      if (!masters_.ready(index)) report.error += " (not connected: " + diagnostics_.shown(masters_.last_error(index)) + ")";
    }
    // Half-read answers of a master that did not finish in time are not reported.
    MasterReport bare;
    bare.endpoint = std::move(report.endpoint);
    bare.error = std::move(report.error);
    bare.connected_before = report.connected_before;
    report = std::move(bare);
  } else {
    report.round_trip = std::chrono::duration_cast<microseconds>(std::chrono::nanoseconds(master.first_reply_ns - sent_ns_));
  }

  if (masters_.ready(index)) {
    const ServerInfo& info = masters_.server_info(index);
    report.appendonly = diagnostics_.shown(info.appendonly);
    report.appendfsync = diagnostics_.shown(info.appendfsync);
    // As the restart guard judges it: durability switched off since the handshake (read again
    // every second with the guard on) or switched on after this incarnation was first seen.
    // With INFO denied the guard knows no incarnation: the handshake's reading alone.
    const Incarnation& incarnation = masters_.incarnation(index);
    report.durable = info.durable() && (incarnation.run_id.empty() || incarnation.durable);
    report.maxmemory_policy = diagnostics_.shown(info.maxmemory_policy);
    report.not_permitted = diagnostics_.shown(info.not_permitted);
    report.fence_not_permitted = diagnostics_.shown(info.fence_not_permitted);
  }
  if (auto why = masters_.not_counted(index, false)) {
    report.not_counted_reason = diagnostics_.shown(*why);
    if (auto in_ns = masters_.counted_in_ns(index)) {
      report.counted_after = milliseconds((*in_ns + 999'999) / 1'000'000);
    }
  } else {
    report.counted = true;
    if (auto because = masters_.counted_because(index)) report.counted_because = *because;
  }

  bool twin_counted = false;
  std::string twin;
  for (std::uint32_t other = 0; other < index; ++other) {
    if (masters_.same_server(index, other)) {
      twin = earlier[other].endpoint;
      twin_counted = twin_counted || earlier[other].can_vote;
    }
  }
  // A master only when INFO replication says so: a replica refuses every SET (READONLY), and
  // without INFO (an ACL, a timeout) nothing here can tell one from the other.
  report.can_vote = report.reachable && report.role == "master" && report.not_permitted.empty() && report.counted &&
                    !twin_counted;
  report.fence_caught_up = masters_.fence_caught_up(index);

  auto& warnings = report.warnings;
  if (report.role == "replica") {
    warnings.push_back(MasterSet::replica_reason(report.replica_of));
  }
  if (report.reachable && !report.role) {
    warnings.push_back("role unknown (" + report.role_error +
                       "): a replica would refuse the lock's SET, so no vote is promised from it; allow INFO to the "
                       "lock user (docs/permissions.md)");
  }
  if (auto risk = eviction_risk(report.maxmemory_policy, fence_key_); !risk.empty()) warnings.push_back(std::move(risk));
  if (!report.not_permitted.empty()) {
    warnings.push_back("the lock user may not run the lock's commands here: " + report.not_permitted +
                       " (docs/permissions.md)");
  }
  if (!twin.empty()) warnings.push_back("the same server as " + twin + ": one vote between them; list every server once");
  if (report.reachable && !masters_.restart_guard_enabled() && !report.durable) {
    warnings.push_back("not durable (needs appendonly yes, appendfsync always, no-appendfsync-on-rewrite no) and the restart guard is off: a "
                       "restart makes it forget held locks");
  }
  if (report.clock_offset && report.clock_uncertainty) {
    const auto off = report.clock_offset->count() < 0 ? -*report.clock_offset : *report.clock_offset;
    if (off - *report.clock_uncertainty > kClockWarning) {
      warnings.push_back("its clock is " + offset_text(*report.clock_offset) +
                         " off this host's: a wall clock that steps misleads the restart guard (uptime); slew clocks "
                         "with NTP");
    }
  }
  if (report.holder && !report.holder_is_token) {
    warnings.push_back("key '" + diagnostics_.shown(key_) + "' holds a value that is not a lock token");
  }
}

void StatusQuery::summarize_resource(FleetStatus& status) const {
  ResourceReport resource;
  resource.resource = *resource_;
  resource.key = key_;
  std::map<std::string, std::size_t> counts;  // whole token -> masters holding it
  std::size_t answered = 0;
  for (std::uint32_t i = 0; i < status.masters.size(); ++i) {
    const MasterReport& report = status.masters[i];
    if (!report.reachable || !report.holder) continue;
    ++answered;
    if (!report.holder->empty() && report.holder_is_token) ++counts[tokens_[i]];
  }
  std::string best;
  for (const auto& [token, count] : counts) {
    if (count > resource.holders) {
      resource.holders = count;
      best = token;
    }
  }
  const std::string of = " of " + std::to_string(status.size) + " masters";
  if (resource.holders >= status.quorum) {
    resource.quorum_holder = best.substr(0, 8);
    resource.summary = "held by token " + best.substr(0, 8) + "... on " + std::to_string(resource.holders) + of +
                       " (a quorum)";
  } else if (!best.empty()) {
    resource.summary = "no quorum agrees: token " + best.substr(0, 8) + "... is on " +
                       std::to_string(resource.holders) + of + ", " + std::to_string(status.quorum) + " needed";
  } else {
    resource.summary = "not held on any of the " + std::to_string(answered) + " masters that answered";
  }
  status.resource = std::move(resource);
}

// --- ClientImpl's part: validate, post to the loop, call back at the library boundary.

void ClientImpl::status_async(std::optional<std::string> resource, StatusCallback done) {
  std::string key;
  if (resource) {
    if (auto why = check_resource(*resource)) throw UsageError("status: " + *why);
    key = options_.key_prefix + *resource;
  }
  auto shared_done = std::make_shared<StatusCallback>(std::move(done));
  auto call = [this, shared_done](FleetStatus status) {
    run_as_callback([&] {
      try {
        if (*shared_done) (*shared_done)(std::move(status));
      } catch (...) {
      }
    });
  };
  const bool posted = loop_->post([this, resource = std::move(resource), key = std::move(key), call]() mutable {
    if (shutting_down_) {
      FleetStatus status;
      status.size = masters_.size();
      status.quorum = masters_.quorum();
      status.reason = "the client is shutting down";
      call(std::move(status));
      return;
    }
    auto query = std::make_shared<StatusQuery>(*loop_, masters_, diagnostics_, options_.command_timeout,
                                               std::move(resource), std::move(key), options_.fence_key, call);
    sweep_when_doubled(status_queries_, status_queries_sweep_at_, 64,
                       [](const std::weak_ptr<StatusQuery>& weak) { return weak.expired(); });
    status_queries_.push_back(query);
    query->start();
  });
  if (!posted) {
    FleetStatus status;
    status.size = size();
    status.quorum = quorum();
    status.reason = forked() ? kMadeBeforeFork : "the client is shutting down";
    try {
      if (*shared_done) (*shared_done)(std::move(status));
    } catch (...) {
    }
  }
}

FleetStatus ClientImpl::status(std::optional<std::string> resource) {
  if (loop_->in_loop_thread()) {
    throw UsageError("a blocking redlock call on the client's loop thread would wait for itself forever; "
                     "use status_async in callbacks");
  }
  auto promise = std::make_shared<std::promise<FleetStatus>>();
  auto future = promise->get_future();
  status_async(std::move(resource), [promise](FleetStatus status) { promise->set_value(std::move(status)); });
  return future.get();
}

}  // namespace redlock::detail

namespace redlock {

void Client::status_async(std::optional<std::string> resource, StatusCallback done) {
  impl_->status_async(std::move(resource), std::move(done));
}

FleetStatus Client::status(std::optional<std::string> resource) { return impl_->status(std::move(resource)); }

}  // namespace redlock

// SPDX-License-Identifier: Apache-2.0
#include "checker.h"

#include <algorithm>
#include <iterator>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

namespace redlock::chaos {
namespace {

struct Grant {
  int process = -1;
  std::string resource;
  std::string token;
  std::uint64_t fence = 0;
  std::int64_t started_ns = 0;  // when its acquire began (0: unknown)
  bool binds_later = true;       // false: held by fewer than --min-holders masters
  std::int64_t granted_ns = 0;
  std::int64_t deadline_ns = kNever;
  std::int64_t release_ns = kNever;
  // Leases: kept from lease_start on; the deadlines as the lease moved them; the loss signal
  // (kNever: none) and its reason.
  struct Sighting {
    std::int64_t seen_ns;     // when the holder saw it (or on_lost reported it)
    std::int64_t deadline_ns;
    std::int64_t started_ns;  // when the round that made it was sent (0: unknown)
  };
  bool leased = false;
  std::vector<Sighting> sightings;
  std::int64_t loss_ns = kNever;
  std::string loss_reason;
  [[nodiscard]] std::int64_t end() const { return std::min(release_ns, deadline_ns); }
  void learn_deadline(const Event& e) {
    if (e.deadline_ns == 0) return;
    sightings.push_back({e.t_ns, e.deadline_ns, e.started_ns});
    deadline_ns = deadline_ns == kNever ? e.deadline_ns : std::max(deadline_ns, e.deadline_ns);
  }
  // The lease's deadline as a step function: (from, deadline in force from then on), both
  // non-decreasing. A deadline counts from when it was seen, except that one made by a
  // round sent before the deadline then in force runs on from it without a gap: that round
  // found the key on a quorum before it expired anywhere, and its validity counts from its
  // own start, so the holder seeing it late (its thread not scheduled) is no lapse of the
  // lease. A round sent after the deadline leaves a gap, and so does an unknown start.
  [[nodiscard]] std::vector<std::pair<std::int64_t, std::int64_t>> steps() const {
    std::vector<Sighting> by_time = sightings;
    std::stable_sort(by_time.begin(), by_time.end(),
                     [](const Sighting& a, const Sighting& b) { return a.seen_ns < b.seen_ns; });
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const Sighting& s : by_time) {
      if (out.empty()) {
        out.emplace_back(s.seen_ns, s.deadline_ns);
        continue;
      }
      const auto [from, current] = out.back();
      if (s.deadline_ns <= current) continue;
      const bool seamless = s.started_ns != 0 && s.started_ns < current;
      out.emplace_back(std::max(from, seamless ? std::min(s.seen_ns, current) : s.seen_ns), s.deadline_ns);
    }
    return out;
  }
  // The deadline in force at `t` (kNever before the first one).
  [[nodiscard]] std::int64_t deadline_at(std::int64_t t) const {
    std::int64_t d = kNever;
    for (const auto& [from, deadline] : steps()) {
      if (from <= t) d = deadline;
    }
    return d;
  }
};

struct Occupancy {
  int process = -1;
  std::string resource;
  std::string token;
  std::uint64_t fence = 0;
  std::int64_t enter_ns = 0;
  std::int64_t leave_ns = kNever;
};

struct FaultSpan {
  std::int64_t id = 0;
  std::string what;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = kNever;
};

struct Write {
  int process = -1;
  std::string resource;
  std::string token;
  std::uint64_t fence = 0;
  std::int64_t invoke_ns = 0;
  std::int64_t done_ns = 0;
};

// Ends the span opened under `key` (index into `items`) at `t`; unknown keys are ignored.
template <class Key, class Item>
void close_span(std::map<Key, std::size_t>& open, const Key& key, std::vector<Item>& items, std::int64_t Item::*end,
                std::int64_t t) {
  const auto it = open.find(key);
  if (it == open.end()) return;
  items[it->second].*end = t;
  open.erase(it);
}

std::vector<std::string> active_faults(const std::vector<FaultSpan>& faults, std::int64_t from, std::int64_t to) {
  std::vector<std::string> names;
  for (const auto& f : faults) {
    if (f.start_ns <= to && f.end_ns >= from) names.push_back(f.what);
  }
  return names;
}

std::string ms(std::int64_t ns) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

// Pairs of intervals [start, end] per resource overlapping by more than the tolerance.
template <class T, class Start, class End, class Emit>
void overlapping_pairs(std::vector<T> items, Start start, End end, std::int64_t tolerance, Emit emit) {
  std::stable_sort(items.begin(), items.end(), [&](const T& a, const T& b) {
    if (a.resource != b.resource) return a.resource < b.resource;
    return start(a) < start(b);
  });
  for (std::size_t i = 0; i < items.size(); ++i) {
    for (std::size_t j = i + 1; j < items.size(); ++j) {
      if (items[j].resource != items[i].resource) break;
      if (start(items[j]) >= end(items[i])) break;  // sorted by start: no later one overlaps i
      const std::int64_t from = start(items[j]);
      const std::int64_t to = std::min(end(items[i]), end(items[j]));
      if (to - from > tolerance) emit(items[i], items[j], from, to);
    }
  }
}

// A violation between two records of one resource (grants or oracle occupancies), both of
// which carry resource, process, token and fence.
template <class Record>
Violation pair_violation(ViolationKind kind, const Record& a, const Record& b, std::int64_t from, std::int64_t to) {
  Violation v;
  v.kind = kind;
  v.resource = a.resource;
  v.process_a = a.process;
  v.process_b = b.process;
  v.token_a = a.token;
  v.token_b = b.token;
  v.fence_a = a.fence;
  v.fence_b = b.fence;
  v.overlap_start_ns = from;
  v.overlap_end_ns = to;
  return v;
}

// Per resource: the longest stretch after its first grant with no grant in force, counting
// the tail up to the last acquire attempt.
std::int64_t longest_no_grant(std::vector<Grant> grants, const std::map<std::string, std::int64_t>& last_acquire_ns) {
  std::stable_sort(grants.begin(), grants.end(), [](const Grant& a, const Grant& b) {
    if (a.resource != b.resource) return a.resource < b.resource;
    return a.granted_ns < b.granted_ns;
  });
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < grants.size();) {
    const std::string& resource = grants[i].resource;
    std::int64_t covered_until = grants[i].end();
    for (++i; i < grants.size() && grants[i].resource == resource; ++i) {
      longest = std::max(longest, grants[i].granted_ns - covered_until);
      covered_until = std::max(covered_until, grants[i].end());
    }
    const auto last = last_acquire_ns.find(resource);
    if (last != last_acquire_ns.end() && covered_until != kNever) longest = std::max(longest, last->second - covered_until);
  }
  return longest;
}

}  // namespace

std::string_view to_string(ViolationKind kind) noexcept {
  switch (kind) {
    case ViolationKind::mutual_exclusion: return "mutual_exclusion";
    case ViolationKind::oracle: return "oracle";
    case ViolationKind::fencing: return "fencing";
    case ViolationKind::unsignalled_overrun: return "unsignalled_overrun";
    case ViolationKind::late_loss_signal: return "late_loss_signal";
  }
  return "unknown";
}

namespace {
// The counter of `kind` in `report` (const or not).
template <class Report>
auto& counter_of(Report& report, ViolationKind kind) {
  switch (kind) {
    case ViolationKind::mutual_exclusion: return report.mutual_exclusion_violations;
    case ViolationKind::oracle: return report.oracle_violations;
    case ViolationKind::fencing: return report.fencing_violations;
    case ViolationKind::unsignalled_overrun: return report.unsignalled_overrun_violations;
    case ViolationKind::late_loss_signal: return report.late_loss_signal_violations;
  }
  return report.fencing_violations;  // not reached: every kind is listed
}
}  // namespace

std::size_t CheckReport::count(ViolationKind kind) const { return counter_of(*this, kind); }
std::size_t& CheckReport::count(ViolationKind kind) { return counter_of(*this, kind); }

CheckReport check_history(const std::vector<Event>& unsorted, const CheckOptions& options) {
  std::vector<Event> history = unsorted;
  std::stable_sort(history.begin(), history.end(), [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });

  CheckReport report;
  std::vector<Grant> grants;
  std::vector<Occupancy> occupancies;
  std::vector<FaultSpan> faults;
  std::vector<Write> writes;
  std::map<std::pair<int, std::string>, std::size_t> open_grant;  // (process, token) -> index
  std::map<std::pair<int, std::string>, std::size_t> any_grant;   // ... released or not
  std::map<int, std::size_t> open_occupancy;                      // process -> index
  std::map<std::pair<int, std::string>, std::size_t> occupancy_of;  // (process, token) -> last index
  std::map<std::int64_t, std::size_t> open_fault;
  std::set<int> processes;
  std::map<std::string, std::int64_t> last_acquire_ns;  // resource -> last acquire event

  if (!history.empty()) {
    report.first_ns = history.front().t_ns;
    report.last_ns = history.back().t_ns;
  }
  for (const Event& e : history) {
    if (e.process >= 0) processes.insert(e.process);
    switch (e.type) {
      case EventType::acquire_invoke:
        ++report.acquires;
        last_acquire_ns[e.resource] = e.t_ns;
        break;
      case EventType::acquire_fail:
        ++report.failures;
        last_acquire_ns[e.resource] = e.t_ns;
        break;
      case EventType::acquire_ok: {
        Grant g;
        g.binds_later = e.detail.rfind(kBelowMinHoldersPrefix, 0) != 0;
        ++(g.binds_later ? report.grants : report.grants_below_min_holders);
        if (e.deadline_ns != 0 && e.deadline_ns <= e.t_ns) ++report.grants_expired_at_return;
        g.process = e.process;
        g.resource = e.resource;
        g.token = e.token;
        g.fence = e.fence;
        g.started_ns = e.started_ns;
        g.granted_ns = e.t_ns;
        g.deadline_ns = kNever;
        g.learn_deadline(e);
        open_grant[{e.process, e.token}] = grants.size();
        any_grant[{e.process, e.token}] = grants.size();
        grants.push_back(std::move(g));
        break;
      }
      case EventType::release:
        ++report.releases;
        close_span(open_grant, {e.process, e.token}, grants, &Grant::release_ns, e.t_ns);
        break;
      case EventType::enter: {
        Occupancy o;
        o.process = e.process;
        o.resource = e.resource;
        o.token = e.token;
        o.fence = e.fence;
        o.enter_ns = e.t_ns;
        open_occupancy[e.process] = occupancies.size();
        occupancy_of[{e.process, e.token}] = occupancies.size();
        occupancies.push_back(std::move(o));
        break;
      }
      case EventType::leave: close_span(open_occupancy, e.process, occupancies, &Occupancy::leave_ns, e.t_ns); break;
      case EventType::oracle_conflict: ++report.live_oracle_conflicts; break;
      case EventType::write_accepted:
      case EventType::write_rejected: {
        const bool accepted = e.type == EventType::write_accepted;
        if (!accepted && e.detail.rfind(kStoreErrorPrefix, 0) == 0) {  // not refused: never judged
          ++report.store_errors;
          break;
        }
        const bool late = e.deadline_ns != 0 && e.invoke_ns > e.deadline_ns;
        ++(accepted ? report.writes_accepted : report.writes_rejected);
        if (late) ++(accepted ? report.late_writes_accepted : report.late_writes_rejected);
        if (accepted && e.fence != 0) {
          writes.push_back({e.process, e.resource, e.token, e.fence, e.invoke_ns != 0 ? e.invoke_ns : e.t_ns, e.t_ns});
        }
        break;
      }
      case EventType::fault_start: {
        ++report.faults;
        open_fault[e.fault_id] = faults.size();
        faults.push_back({e.fault_id, e.detail, e.t_ns, kNever});
        break;
      }
      case EventType::fault_end: close_span(open_fault, e.fault_id, faults, &FaultSpan::end_ns, e.t_ns); break;
      case EventType::lease_start:
      case EventType::lease_renewed:
      case EventType::lease_lost: {
        if (e.type == EventType::lease_start) ++report.leases;
        if (e.type == EventType::lease_renewed) ++report.lease_renewals;
        if (e.type == EventType::lease_lost) {
          ++report.losses_signalled;
          ++report.losses_by_reason[e.detail.empty() ? "?" : e.detail];
        }
        // A loss may be signalled while the release is under way: look among released grants too.
        const auto it = any_grant.find({e.process, e.token});
        if (it == any_grant.end()) break;
        Grant& g = grants[it->second];
        g.leased = true;
        g.learn_deadline(e);
        if (e.type == EventType::lease_lost && g.loss_ns == kNever) {
          g.loss_ns = e.t_ns;
          g.loss_reason = e.detail;
        }
        break;
      }
    }
  }
  report.processes = processes.size();
  // A holder still inside at the end of the history is inside until then.
  for (auto& o : occupancies) {
    if (o.leave_ns == kNever) o.leave_ns = report.last_ns;
  }

  // Grants below --min-holders were released unused: nobody held the resource through them.
  std::vector<Grant> used;
  std::copy_if(grants.begin(), grants.end(), std::back_inserter(used), [](const Grant& g) { return g.binds_later; });
  report.longest_no_grant_ns = longest_no_grant(std::move(used), last_acquire_ns);

  auto add = [&](Violation v) {
    ++report.count(v.kind);
    if (!v.faults.empty()) ++report.during_faults[static_cast<std::size_t>(v.kind)];
    if (report.violations.size() < options.max_listed) report.violations.push_back(std::move(v));
  };

  // Leases: overruns and late loss signals, one grant at a time.
  for (const Grant& g : grants) {
    if (!g.leased) continue;
    if (g.loss_ns != kNever) {
      const std::int64_t deadline = g.deadline_at(g.loss_ns);
      if (deadline != kNever && g.loss_ns - deadline > options.tolerance_ns) {
        Violation v;
        v.kind = ViolationKind::late_loss_signal;
        v.resource = g.resource;
        v.process_a = g.process;
        v.token_a = g.token;
        v.fence_a = g.fence;
        v.overlap_start_ns = deadline;
        v.overlap_end_ns = g.loss_ns;
        v.faults = active_faults(faults, g.granted_ns, g.loss_ns);
        v.description = "process " + std::to_string(g.process) + "'s lease loss (" + g.loss_reason +
                        ") was signalled " + ms(g.loss_ns - deadline) + " after its deadline";
        add(std::move(v));
      }
    }
    const auto occupancy = occupancy_of.find({g.process, g.token});
    if (occupancy == occupancy_of.end()) continue;
    const Occupancy& o = occupancies[occupancy->second];
    // The holder's deadline is a step function of the time it learned each one; it overran
    // when it was inside past the deadline in force until the next step (or until it left).
    const auto steps = g.steps();
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const std::int64_t deadline = steps[k].second;
      const std::int64_t next = k + 1 < steps.size() ? steps[k + 1].first : kNever;
      const std::int64_t from = std::max({deadline, o.enter_ns, steps[k].first});
      const std::int64_t to = std::min(o.leave_ns, next);
      if (to - from <= options.tolerance_ns) continue;
      if (g.loss_ns <= deadline) {
        ++report.overruns_after_signal;
        break;
      }
      Violation v;
      v.kind = ViolationKind::unsignalled_overrun;
      v.resource = g.resource;
      v.process_a = g.process;
      v.token_a = g.token;
      v.fence_a = g.fence;
      v.overlap_start_ns = from;
      v.overlap_end_ns = to;
      v.faults = active_faults(faults, g.granted_ns, to);
      v.description = "process " + std::to_string(g.process) + " kept working " + ms(to - from) +
                      " past its lease deadline with no loss signal by then" +
                      (g.loss_ns == kNever ? std::string(" (none at all)")
                                           : " (signalled " + ms(g.loss_ns - deadline) + " after it)");
      add(std::move(v));
      break;  // one per grant
    }
  }

  // A grant below --min-holders is judged without the tolerance: its window (the read-back,
  // well under a millisecond) bounds its overlap, which the tolerance would always excuse.
  overlapping_pairs(
      grants, [](const Grant& g) { return g.granted_ns; }, [](const Grant& g) { return g.end(); }, 0,
      [&](const Grant& a, const Grant& b, std::int64_t from, std::int64_t to) {
        if (!a.binds_later) return;  // the earlier one was held by too few masters to promise anything
        if (b.binds_later && to - from <= options.tolerance_ns) return;
        Violation v = pair_violation(ViolationKind::mutual_exclusion, a, b, from, to);
        v.faults = active_faults(faults, a.granted_ns, to);
        v.description = "process " + std::to_string(b.process) + " was granted '" + b.resource + "' while process " +
                        std::to_string(a.process) + "'s grant was still valid and unreleased (overlap " +
                        ms(to - from) + ")";
        add(std::move(v));
      });

  overlapping_pairs(
      occupancies, [](const Occupancy& o) { return o.enter_ns; }, [](const Occupancy& o) { return o.leave_ns; },
      options.tolerance_ns, [&](const Occupancy& a, const Occupancy& b, std::int64_t from, std::int64_t to) {
        Violation v = pair_violation(ViolationKind::oracle, a, b, from, to);
        v.faults = active_faults(faults, a.enter_ns, to);
        v.description = "processes " + std::to_string(a.process) + " and " + std::to_string(b.process) +
                        " were both inside the oracle resource '" + a.resource + "' for " + ms(to - from);
        add(std::move(v));
      });

  // Fencing: per resource, by reply time; a write sent after another was acknowledged must
  // not carry a lower token.
  std::map<std::string, std::vector<Write>> by_resource;
  for (const auto& w : writes) by_resource[w.resource].push_back(w);
  for (auto& [resource, list] : by_resource) {
    std::vector<Write> by_done = list;
    std::sort(by_done.begin(), by_done.end(), [](const Write& a, const Write& b) { return a.done_ns < b.done_ns; });
    std::sort(list.begin(), list.end(), [](const Write& a, const Write& b) { return a.invoke_ns < b.invoke_ns; });
    std::size_t next = 0;
    const Write* highest = nullptr;
    for (const Write& w : list) {
      while (next < by_done.size() && by_done[next].done_ns < w.invoke_ns) {
        if (highest == nullptr || by_done[next].fence > highest->fence) highest = &by_done[next];
        ++next;
      }
      if (highest != nullptr && w.fence < highest->fence) {
        Violation v;
        v.kind = ViolationKind::fencing;
        v.resource = resource;
        v.process_a = highest->process;
        v.process_b = w.process;
        v.token_a = highest->token;
        v.token_b = w.token;
        v.fence_a = highest->fence;
        v.fence_b = w.fence;
        v.overlap_start_ns = highest->done_ns;
        v.overlap_end_ns = w.invoke_ns;
        v.faults = active_faults(faults, highest->invoke_ns, w.done_ns);
        v.description = "the store accepted fence " + std::to_string(w.fence) + " (process " +
                        std::to_string(w.process) + ") after it had accepted fence " + std::to_string(highest->fence) +
                        " (process " + std::to_string(highest->process) + ")";
        add(std::move(v));
      }
    }
  }

  // Fencing, at the grants: per resource, a grant whose acquire began after another grant was
  // handed out must carry a higher token (docs/fencing.md).
  std::map<std::string, std::vector<const Grant*>> fenced_by_resource;
  for (const auto& g : grants) {
    if (g.fence != 0) fenced_by_resource[g.resource].push_back(&g);
  }
  for (auto& [resource, list] : fenced_by_resource) {
    std::vector<const Grant*> by_start = list;
    std::sort(list.begin(), list.end(), [](const Grant* a, const Grant* b) { return a->granted_ns < b->granted_ns; });
    std::sort(by_start.begin(), by_start.end(),
              [](const Grant* a, const Grant* b) { return a->started_ns < b->started_ns; });
    std::size_t next = 0;
    const Grant* highest = nullptr;  // the highest token handed out before b's acquire began
    for (const Grant* b : by_start) {
      if (b->started_ns == 0) continue;
      while (next < list.size() && list[next]->granted_ns < b->started_ns) {
        if (highest == nullptr || list[next]->fence > highest->fence) highest = list[next];
        ++next;
      }
      if (highest == nullptr || b->fence > highest->fence) continue;
      Violation v = pair_violation(ViolationKind::fencing, *highest, *b, highest->granted_ns, b->started_ns);
      v.faults = active_faults(faults, highest->granted_ns, b->granted_ns);
      v.description = "process " + std::to_string(b->process) + " was granted token " + std::to_string(b->fence) +
                      " by an acquire begun after process " + std::to_string(highest->process) +
                      " had been granted token " + std::to_string(highest->fence);
      add(std::move(v));
    }
  }

  std::stable_sort(report.violations.begin(), report.violations.end(),
                   [](const Violation& a, const Violation& b) { return a.overlap_start_ns < b.overlap_start_ns; });
  return report;
}

nlohmann::json CheckReport::to_json() const {
  nlohmann::json j;
  j["acquires"] = acquires;
  j["grants"] = grants;
  j["failures"] = failures;
  j["releases"] = releases;
  j["writes_accepted"] = writes_accepted;
  j["writes_rejected"] = writes_rejected;
  j["store_errors"] = store_errors;
  j["grants_below_min_holders"] = grants_below_min_holders;
  j["grants_expired_at_return"] = grants_expired_at_return;
  j["late_writes_accepted"] = late_writes_accepted;
  j["late_writes_rejected"] = late_writes_rejected;
  j["live_oracle_conflicts"] = live_oracle_conflicts;
  j["faults"] = faults;
  j["processes"] = processes;
  j["duration_ms"] = static_cast<double>(last_ns - first_ns) / 1e6;
  j["longest_no_grant_ms"] = static_cast<double>(longest_no_grant_ns) / 1e6;
  j["leases"] = leases;
  j["lease_renewals"] = lease_renewals;
  j["losses_signalled"] = losses_signalled;
  j["losses_by_reason"] = losses_by_reason;
  j["overruns_after_signal"] = overruns_after_signal;
  j["violations"] = {{"mutual_exclusion", mutual_exclusion_violations},
                     {"oracle", oracle_violations},
                     {"fencing", fencing_violations},
                     {"unsignalled_overrun", unsignalled_overrun_violations},
                     {"late_loss_signal", late_loss_signal_violations},
                     {"total", total_violations()}};
  nlohmann::json list = nlohmann::json::array();
  for (const auto& v : violations) {
    list.push_back({{"kind", to_string(v.kind)},
                    {"resource", v.resource},
                    {"process_a", v.process_a},
                    {"process_b", v.process_b},
                    {"token_a", v.token_a},
                    {"token_b", v.token_b},
                    {"fence_a", v.fence_a},
                    {"fence_b", v.fence_b},
                    {"overlap_start_ns", v.overlap_start_ns},
                    {"overlap_end_ns", v.overlap_end_ns},
                    {"overlap_ms", static_cast<double>(v.overlap_ns()) / 1e6},
                    {"faults", v.faults},
                    {"description", v.description}});
  }
  j["listed_violations"] = std::move(list);
  return j;
}

std::string CheckReport::table(std::size_t lines) const {
  std::ostringstream out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-26s %10s\n", "", "count");
  out << buf;
  auto row = [&](const char* name, std::size_t n) {
    std::snprintf(buf, sizeof buf, "%-26s %10zu\n", name, n);
    out << buf;
  };
  row("client processes", processes);
  row("acquires invoked", acquires);
  row("grants", grants);
  if (grants_below_min_holders != 0) row("grants below --min-holders (released unused)", grants_below_min_holders);
  if (grants_expired_at_return != 0) row("grants already past their deadline when returned", grants_expired_at_return);
  row("failed acquires", failures);
  row("releases", releases);
  row("writes accepted", writes_accepted);
  row("writes rejected", writes_rejected);
  row("late writes accepted", late_writes_accepted);
  row("late writes rejected", late_writes_rejected);
  row("store errors", store_errors);
  row("faults injected", faults);
  std::snprintf(buf, sizeof buf, "%-26s %10.0f\n", "longest no-grant gap (ms)", static_cast<double>(longest_no_grant_ns) / 1e6);
  out << buf;
  row("live oracle conflicts", live_oracle_conflicts);
  if (leases != 0) {
    row("leases", leases);
    row("lease renewals seen", lease_renewals);
    for (const auto& [reason, n] : losses_by_reason) {
      std::snprintf(buf, sizeof buf, "%-26s %10zu\n", ("losses signalled: " + reason).c_str(), n);
      out << buf;
    }
    row("overruns after a signal", overruns_after_signal);
  }
  row("VIOLATIONS mutual excl.", mutual_exclusion_violations);
  row("VIOLATIONS oracle", oracle_violations);
  row("VIOLATIONS fencing", fencing_violations);
  row("VIOLATIONS unsig. overrun", unsignalled_overrun_violations);
  row("VIOLATIONS late loss sig.", late_loss_signal_violations);
  std::size_t shown = 0;
  for (const auto& v : violations) {
    if (shown++ == lines) {
      out << "  ... (" << (total_violations() - lines) << " more; see the JSON report)\n";
      break;
    }
    out << "  [" << to_string(v.kind) << "] " << v.description << "; faults active: ";
    if (v.faults.empty()) out << "none";
    for (std::size_t i = 0; i < v.faults.size(); ++i) out << (i ? ", " : "") << v.faults[i];
    out << '\n';
  }
  return out.str();
}

}  // namespace redlock::chaos

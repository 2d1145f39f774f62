// SPDX-License-Identifier: Apache-2.0
#include "checker.h"

#include <algorithm>
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
  std::int64_t granted_ns = 0;
  std::int64_t deadline_ns = kNever;
  std::int64_t release_ns = kNever;
  [[nodiscard]] std::int64_t end() const { return std::min(release_ns, deadline_ns); }
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
  }
  return "unknown";
}

std::size_t CheckReport::count(ViolationKind kind) const {
  switch (kind) {
    case ViolationKind::mutual_exclusion: return mutual_exclusion_violations;
    case ViolationKind::oracle: return oracle_violations;
    case ViolationKind::fencing: return fencing_violations;
  }
  return 0;
}

CheckReport check_history(const std::vector<Event>& unsorted, const CheckOptions& options) {
  std::vector<Event> history = unsorted;
  std::stable_sort(history.begin(), history.end(), [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });

  CheckReport report;
  std::vector<Grant> grants;
  std::vector<Occupancy> occupancies;
  std::vector<FaultSpan> faults;
  std::vector<Write> writes;
  std::map<std::pair<int, std::string>, std::size_t> open_grant;  // (process, token) -> index
  std::map<int, std::size_t> open_occupancy;                      // process -> index
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
        ++report.grants;
        Grant g;
        g.process = e.process;
        g.resource = e.resource;
        g.token = e.token;
        g.fence = e.fence;
        g.granted_ns = e.t_ns;
        g.deadline_ns = e.deadline_ns != 0 ? e.deadline_ns : kNever;
        open_grant[{e.process, e.token}] = grants.size();
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
        occupancies.push_back(std::move(o));
        break;
      }
      case EventType::leave: close_span(open_occupancy, e.process, occupancies, &Occupancy::leave_ns, e.t_ns); break;
      case EventType::oracle_conflict: ++report.live_oracle_conflicts; break;
      case EventType::write_accepted:
      case EventType::write_rejected: {
        const bool accepted = e.type == EventType::write_accepted;
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
    }
  }
  report.processes = processes.size();
  // A holder still inside at the end of the history is inside until then.
  for (auto& o : occupancies) {
    if (o.leave_ns == kNever) o.leave_ns = report.last_ns;
  }

  report.longest_no_grant_ns = longest_no_grant(grants, last_acquire_ns);

  auto add = [&](Violation v) {
    switch (v.kind) {
      case ViolationKind::mutual_exclusion: ++report.mutual_exclusion_violations; break;
      case ViolationKind::oracle: ++report.oracle_violations; break;
      case ViolationKind::fencing: ++report.fencing_violations; break;
    }
    if (report.violations.size() < options.max_listed) report.violations.push_back(std::move(v));
  };

  overlapping_pairs(
      grants, [](const Grant& g) { return g.granted_ns; }, [](const Grant& g) { return g.end(); },
      options.tolerance_ns, [&](const Grant& a, const Grant& b, std::int64_t from, std::int64_t to) {
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
  j["late_writes_accepted"] = late_writes_accepted;
  j["late_writes_rejected"] = late_writes_rejected;
  j["live_oracle_conflicts"] = live_oracle_conflicts;
  j["faults"] = faults;
  j["processes"] = processes;
  j["duration_ms"] = static_cast<double>(last_ns - first_ns) / 1e6;
  j["longest_no_grant_ms"] = static_cast<double>(longest_no_grant_ns) / 1e6;
  j["violations"] = {{"mutual_exclusion", mutual_exclusion_violations},
                     {"oracle", oracle_violations},
                     {"fencing", fencing_violations},
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
  row("failed acquires", failures);
  row("releases", releases);
  row("writes accepted", writes_accepted);
  row("writes rejected", writes_rejected);
  row("late writes accepted", late_writes_accepted);
  row("late writes rejected", late_writes_rejected);
  row("faults injected", faults);
  std::snprintf(buf, sizeof buf, "%-26s %10.0f\n", "longest no-grant gap (ms)", static_cast<double>(longest_no_grant_ns) / 1e6);
  out << buf;
  row("live oracle conflicts", live_oracle_conflicts);
  row("VIOLATIONS mutual excl.", mutual_exclusion_violations);
  row("VIOLATIONS oracle", oracle_violations);
  row("VIOLATIONS fencing", fencing_violations);
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

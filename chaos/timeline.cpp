// SPDX-License-Identifier: Apache-2.0
#include "timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <utility>

namespace redlock::chaos {
namespace {

constexpr std::int64_t kMsNs = 1'000'000;
constexpr std::size_t kDenseGrants = 2000;  // above this many grants in the window: no titles, merged bars

// ---- what the history says, per lane ----

struct Span {  // a lease window or a stay inside the oracle
  int process = -1;
  std::int64_t start = 0;
  std::int64_t end = kNever;
  std::int64_t deadline = kNever;
  std::string token;
  std::uint64_t fence = 0;
};

struct StoreWrite {
  int process = -1;
  std::int64_t sent = 0;
  bool accepted = false;
  bool late = false;
  std::uint64_t fence = 0;
};

struct FaultBand {
  std::int64_t start = 0;
  std::int64_t end = kNever;  // kNever: still active when the history ends
  std::string what;
};

struct Timeline {
  std::int64_t first = 0;
  std::int64_t last = 0;
  int lanes = 0;
  std::vector<Span> leases;  // end = min(release, deadline)
  std::vector<Span> stays;   // [enter, leave], deadline = the lease's
  std::vector<StoreWrite> writes;
  std::vector<FaultBand> faults;
};

Timeline read_timeline(const std::vector<Event>& history) {
  std::vector<std::size_t> order(history.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return history[a].t_ns < history[b].t_ns; });
  Timeline t;
  if (history.empty()) return t;
  t.first = history[order.front()].t_ns;
  t.last = history[order.back()].t_ns;
  std::map<std::pair<int, std::string>, std::size_t> open_lease;
  std::map<int, std::size_t> open_stay;
  std::map<std::int64_t, std::size_t> open_fault;
  for (const std::size_t i : order) {
    const Event& e = history[i];
    t.lanes = std::max(t.lanes, e.process + 1);
    switch (e.type) {
      case EventType::acquire_ok:
        open_lease[{e.process, e.token}] = t.leases.size();
        t.leases.push_back({e.process, e.t_ns, kNever, e.deadline_ns != 0 ? e.deadline_ns : kNever, e.token, e.fence});
        break;
      case EventType::release:
        if (const auto it = open_lease.find({e.process, e.token}); it != open_lease.end()) {
          t.leases[it->second].end = e.t_ns;
          open_lease.erase(it);
        }
        break;
      case EventType::enter: {
        std::int64_t deadline = e.deadline_ns != 0 ? e.deadline_ns : kNever;
        if (const auto it = open_lease.find({e.process, e.token}); it != open_lease.end()) {
          deadline = t.leases[it->second].deadline;
        }
        open_stay[e.process] = t.stays.size();
        t.stays.push_back({e.process, e.t_ns, kNever, deadline, e.token, e.fence});
        break;
      }
      case EventType::leave:
        if (const auto it = open_stay.find(e.process); it != open_stay.end()) {
          t.stays[it->second].end = e.t_ns;
          open_stay.erase(it);
        }
        break;
      case EventType::write_accepted:
      case EventType::write_rejected: {
        const std::int64_t sent = e.invoke_ns != 0 ? e.invoke_ns : e.t_ns;
        t.writes.push_back({e.process, sent, e.type == EventType::write_accepted,
                            e.deadline_ns != 0 && sent > e.deadline_ns, e.fence});
        break;
      }
      case EventType::lease_start:
      case EventType::lease_renewed:
      case EventType::lease_lost:
        // A renewed lease's deadline moves on: the grant's bar and its holder's stay with it.
        if (e.deadline_ns == 0) break;
        if (const auto it = open_lease.find({e.process, e.token}); it != open_lease.end()) {
          Span& lease = t.leases[it->second];
          lease.deadline = lease.deadline == kNever ? e.deadline_ns : std::max(lease.deadline, e.deadline_ns);
        }
        if (const auto it = open_stay.find(e.process); it != open_stay.end() && t.stays[it->second].token == e.token) {
          Span& stay = t.stays[it->second];
          stay.deadline = stay.deadline == kNever ? e.deadline_ns : std::max(stay.deadline, e.deadline_ns);
        }
        break;
      case EventType::fault_start:
        open_fault[e.fault_id] = t.faults.size();
        t.faults.push_back({e.t_ns, kNever, e.detail});
        break;
      case EventType::fault_end:
        if (const auto it = open_fault.find(e.fault_id); it != open_fault.end()) {
          t.faults[it->second].end = e.t_ns;
          open_fault.erase(it);
        }
        break;
      default:
        break;
    }
  }
  // Unreleased leases end at their deadline; anything still open ends with the history.
  for (Span& s : t.leases) s.end = std::min(std::min(s.end, s.deadline), t.last);
  for (Span& s : t.stays) s.end = std::min(s.end, t.last);
  return t;
}

TimelineWindow clamped(std::int64_t from, std::int64_t length, const Timeline& t) {
  from = std::max(from, t.first);
  const std::int64_t to = std::min(from + length, t.last);
  return {std::max(t.first, to - length), to};
}

TimelineWindow pick_window(const Timeline& t, const CheckReport& report, const TimelineOptions& options) {
  if (options.from_ns != 0 || options.to_ns != 0) return {options.from_ns, options.to_ns != 0 ? options.to_ns : t.last};
  if (!report.violations.empty()) {
    const Violation& v = report.violations.front();
    const std::int64_t length = std::max(1500 * kMsNs, v.overlap_ns() + 1000 * kMsNs);
    return clamped(v.overlap_start_ns + v.overlap_ns() / 2 - length / 2, length, t);
  }
  const std::int64_t length = 3000 * kMsNs;
  std::int64_t from = t.leases.empty() ? t.first : t.leases.front().start - 100 * kMsNs;
  const auto later = std::find_if(t.faults.begin(), t.faults.end(), [&](const FaultBand& f) { return f.end >= from; });
  if (later != t.faults.end()) {
    if (later->start > from + length - 500 * kMsNs) from = later->start - 1000 * kMsNs;
  } else if (!t.faults.empty()) {
    from = t.faults.front().start - 500 * kMsNs;  // every fault came before the first grant
  }
  return clamped(from, length, t);
}

// ---- SVG text ----

std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const char* entity = c == '&'    ? "&amp;"
                         : c == '<'  ? "&lt;"
                         : c == '>'  ? "&gt;"
                         : c == '"'  ? "&quot;"
                         : c == '\'' ? "&apos;"
                                     : nullptr;
    if (entity != nullptr) {
      out += entity;
    } else {
      out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string rect(const std::string& css, double x, double y, double w, double h, const std::string& title = {}) {
  const std::string r = "<rect class=\"" + css + "\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) +
                        "\" height=\"" + num(h) + "\"";
  return r + (title.empty() ? "/>\n" : "><title>" + escaped(title) + "</title></rect>\n");
}

std::string line(const std::string& css, double x1, double y1, double x2, double y2) {
  return "<line class=\"" + css + "\" x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
         num(y2) + "\"/>";
}

std::string text(const std::string& css, double x, double y, const std::string& content, const char* anchor = "start") {
  return "<text class=\"" + css + "\" x=\"" + num(x) + "\" y=\"" + num(y) + "\" text-anchor=\"" + anchor + "\">" +
         escaped(content) + "</text>\n";
}

// At most `n` bytes of `text`, not cutting a UTF-8 sequence, with "..." when shortened.
std::string shortened(const std::string& text, std::size_t n) {
  if (text.size() <= n) return text;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + "...";
}

double text_width(const std::string& text) { return 6.3 * static_cast<double>(text.size()); }  // 11 px sans

// Rows of labels above the lanes (row 0 nearest). A label goes into the first row where it
// overlaps nothing; a label with a connector (a line from it down to the lanes at x = `line`)
// also needs that x free in the rows below it, and then keeps it free.
class LabelRows {
 public:
  explicit LabelRows(int rows) : used_(static_cast<std::size_t>(rows)) {}
  [[nodiscard]] int place(double x0, double x1, bool connector = false, double line = 0) {
    const auto free = [&](std::size_t r, double a, double b, double margin) {
      return std::none_of(used_[r].begin(), used_[r].end(),
                          [&](const auto& u) { return a < u.second + margin && u.first < b + margin; });
    };
    for (std::size_t r = 0; r < used_.size(); ++r) {
      if (connector && r > 0 && !free(r - 1, line, line, 0)) return -1;  // the line would cross a label below
      if (!free(r, x0, x1, 8)) continue;
      used_[r].emplace_back(x0, x1);
      for (std::size_t below = 0; connector && below < r; ++below) used_[below].emplace_back(line, line);
      return static_cast<int>(r);
    }
    return -1;
  }

 private:
  std::vector<std::vector<std::pair<double, double>>> used_;
};

// Violations between the same two lanes whose overlaps intersect or nearly touch (closer than
// `gap`: mutual_exclusion and oracle over one episode, or a paused holder overlapping a run of
// short grants) are drawn as one band.
struct ViolationBand {
  int lane_a = 0;  // lane_a <= lane_b
  int lane_b = 0;
  std::int64_t start = 0;
  std::int64_t end = 0;
  std::int64_t longest = 0;
  std::size_t count = 0;     // separate episodes
  std::string kinds;         // "mutual excl.+oracle"
  std::string descriptions;  // one a line
};

std::vector<ViolationBand> violation_bands(const CheckReport& report, std::int64_t from, std::int64_t to,
                                           std::int64_t gap) {
  std::vector<ViolationBand> bands;
  for (const Violation& v : report.violations) {
    if (v.overlap_start_ns > to || v.overlap_end_ns < from) continue;
    const int a = std::max(0, std::min(v.process_a, v.process_b)), b = std::max(v.process_a, v.process_b);
    const std::string kind =
        v.kind == ViolationKind::mutual_exclusion ? std::string("mutual excl.") : std::string(to_string(v.kind));
    const auto same = std::find_if(bands.begin(), bands.end(), [&](const ViolationBand& g) {
      return g.lane_a == a && g.lane_b == b && v.overlap_start_ns <= g.end + gap && v.overlap_end_ns + gap >= g.start;
    });
    if (same == bands.end()) {
      bands.push_back({a, b, v.overlap_start_ns, v.overlap_end_ns, v.overlap_ns(), 1, kind, v.description});
      continue;
    }
    if (v.overlap_start_ns > same->end || v.overlap_end_ns < same->start) ++same->count;  // a separate episode
    same->start = std::min(same->start, v.overlap_start_ns);
    same->end = std::max(same->end, v.overlap_end_ns);
    same->longest = std::max(same->longest, v.overlap_ns());
    if (same->kinds.find(kind) == std::string::npos) same->kinds += "+" + kind;
    same->descriptions += "\n" + v.description;
  }
  return bands;
}

struct Bar {
  double x0 = 0;
  double x1 = 0;
  std::string title;
};

// One lane's bars of one kind. Dense: bars less than a pixel apart are merged, no titles.
void emit_bars(std::string& out, std::vector<Bar> bars, const char* css, double y, double h, bool dense) {
  std::sort(bars.begin(), bars.end(), [](const Bar& a, const Bar& b) { return a.x0 < b.x0; });
  std::vector<Bar> merged;
  for (Bar& b : bars) {
    if (dense && !merged.empty() && b.x0 <= merged.back().x1 + 1.0) {
      merged.back().x1 = std::max(merged.back().x1, b.x1);
    } else {
      merged.push_back(std::move(b));
    }
  }
  for (const Bar& b : merged) out += rect(css, b.x0, y, std::max(1.0, b.x1 - b.x0), h, dense ? "" : b.title);
}

constexpr const char* kStyle = R"svg(<style>
text{font-family:'DejaVu Sans',Arial,Helvetica,sans-serif;font-size:11px;fill:#343a40}
.title{font-size:15px;font-weight:bold;fill:#212529}
.sub{fill:#5c636a}
.lanebg{fill:#f1f3f5}
.grid{stroke:#dee2e6;stroke-width:1}
.axis{stroke:#868e96;stroke-width:1}
.lease{fill:#a5d8ff;stroke:#1c7ed6;stroke-width:0.6}
.stay{fill:#1b3a5c}
.expired{fill:url(#hatch);stroke:#c92a2a;stroke-width:0.6}
.wa{stroke:#2b8a3e;stroke-width:1.6}
.wr{stroke:#e8590c;stroke-width:1.6}
.fault{fill:#fcc419;fill-opacity:0.3}
.fedge{stroke:#f08c00;stroke-width:1}
.flabel{fill:#9c5700}
.viol{fill:#fa5252;fill-opacity:0.3;stroke:#e03131;stroke-width:1}
.vlabel{fill:#c92a2a;font-weight:bold}
</style>
<defs><pattern id="hatch" width="5" height="5" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">
<rect width="5" height="5" fill="#ffc9c9"/><rect width="2.5" height="5" fill="#e03131"/></pattern></defs>
<rect width="100%" height="100%" fill="white"/>
)svg";

// The legend: swatch markup drawn at (0, 0) = the text's baseline start, and its text.
constexpr std::pair<const char*, const char*> kLegend[] = {
    {R"svg(<rect y="-9" width="18" height="11" fill="#a5d8ff" stroke="#1c7ed6"/>)svg",
     "lease: grant to min(release, deadline)"},
    {R"svg(<rect y="-6" width="18" height="5" fill="#1b3a5c"/>)svg", "inside the oracle"},
    {R"svg(<rect y="-8" width="18" height="9" fill="url(#hatch)"/>)svg", "inside after its lease expired"},
    {R"svg(<line x1="9" x2="9" y1="-9" y2="2" stroke="#2b8a3e" stroke-width="1.6"/>)svg", "write accepted"},
    {R"svg(<line x1="9" x2="9" y1="-9" y2="2" stroke="#e8590c" stroke-width="1.6"/>)svg", "write rejected"},
    {R"svg(<line x1="9" x2="9" y1="-8" y2="2" stroke="#2b8a3e" stroke-width="1.6"/>)svg"
     R"svg(<circle cx="9" cy="-8" r="3" fill="#2b8a3e" stroke="white"/>)svg",
     "late write (sent after deadline)"},
    {R"svg(<rect y="-9" width="18" height="11" fill="#fcc419" fill-opacity="0.3"/>)svg", "fault active"},
    {R"svg(<rect y="-9" width="18" height="11" fill="#fa5252" fill-opacity="0.3" stroke="#e03131"/>)svg",
     "violation: kinds, clients a/b, overlap"}};

}  // namespace

TimelineWindow choose_timeline_window(const std::vector<Event>& merged_history, const CheckReport& report,
                                      const TimelineOptions& options) {
  return pick_window(read_timeline(merged_history), report, options);
}

std::string render_timeline_svg(const std::vector<Event>& merged_history, const CheckReport& report,
                                const TimelineOptions& options, TimelineWindow* chosen) {
  const Timeline t = read_timeline(merged_history);
  const TimelineWindow window = pick_window(t, report, options);
  if (chosen != nullptr) *chosen = window;
  const std::int64_t from = window.from_ns;
  const std::int64_t to = std::max(window.to_ns, from + kMsNs);  // never an empty window

  // Layout: title, label rows, lanes, axis, legend.
  const double width = std::max(600, options.width_px), left = 84, plot_w = width - left - 24;
  constexpr double kLaneH = 34, kLaneGap = 6, kRowH = 14;
  constexpr int kLabelRows = 4;
  const int lanes = std::max(1, t.lanes);
  const double lanes_top = 52 + kLabelRows * kRowH + 6;
  const double lanes_bottom = lanes_top + lanes * (kLaneH + kLaneGap) - kLaneGap;
  double column = 0;  // the legend is a grid of equal columns
  for (const auto& item : kLegend) column = std::max(column, 26 + text_width(item.second) + 16);
  const auto columns = static_cast<std::size_t>(std::max(1.0, std::floor((width - left - 12) / column)));
  const double legend_top = lanes_bottom + 56;
  const double height =
      merged_history.empty() ? 80 : legend_top + static_cast<double>((std::size(kLegend) - 1) / columns) * 18 + 14;

  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                    num(width) + "\" height=\"" + num(height) + "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
                    "\" data-from-ns=\"" + std::to_string(from) + "\" data-to-ns=\"" + std::to_string(to) + "\">\n" +
                    kStyle + text("title", 12, 24, options.title.empty() ? "chaos timeline" : options.title);
  if (merged_history.empty()) return out + text("sub", 12, 50, "no events") + "</svg>\n";

  const auto lane_y = [&](int p) { return lanes_top + std::clamp(p, 0, lanes - 1) * (kLaneH + kLaneGap); };
  const auto x_of = [&](std::int64_t ns) {
    return left + plot_w * static_cast<double>(std::clamp(ns, from, to) - from) / static_cast<double>(to - from);
  };
  const auto ms_of = [&](std::int64_t ns) { return static_cast<double>(ns - t.first) / 1e6; };
  const auto ms_text = [&](std::int64_t ns) { return ns == kNever ? std::string("-") : num(ms_of(ns)); };
  const auto in_window = [&](std::int64_t a, std::int64_t b) { return a <= to && b >= from; };
  const auto lease_count = static_cast<std::size_t>(
      std::count_if(t.leases.begin(), t.leases.end(), [&](const Span& s) { return in_window(s.start, s.end); }));
  const bool dense = lease_count > kDenseGrants;

  char buf[256];
  std::snprintf(buf, sizeof buf,
                "window %.1f - %.1f ms of %.1f ms | %d clients | %zu grants (%zu here) | %zu faults | violations: "
                "%zu mutual exclusion, %zu oracle, %zu fencing",
                ms_of(from), ms_of(to), ms_of(t.last), lanes, t.leases.size(), lease_count, t.faults.size(),
                report.mutual_exclusion_violations, report.oracle_violations, report.fencing_violations);
  out += text("sub", 12, 42, buf);

  // Lanes and the time grid (ticks at 1, 2 or 5 x 10^k ms).
  for (int p = 0; p < lanes; ++p) {
    out += rect("lanebg", left, lane_y(p), plot_w, kLaneH) +
           text("lane", left - 10, lane_y(p) + 21, "client " + std::to_string(p), "end");
  }
  const double span_ms = static_cast<double>(to - from) / 1e6;
  const double magnitude = std::pow(10.0, std::floor(std::log10(span_ms / 10)));
  double step = magnitude;
  for (const double m : {2.0, 5.0, 10.0}) {
    if (span_ms / step > 12) step = magnitude * m;
  }
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step))));
  out += line("axis", left, lanes_bottom + 4, left + plot_w, lanes_bottom + 4) + "\n";
  for (double m = std::ceil(ms_of(from) / step) * step; m <= ms_of(to) + 1e-9; m += step) {
    const double x = x_of(t.first + static_cast<std::int64_t>(std::llround(m * 1e6)));
    std::snprintf(buf, sizeof buf, "%.*f", decimals, m);
    out += line("grid", x, lanes_top, x, lanes_bottom + 8) + text("tick", x, lanes_bottom + 20, buf, "middle");
  }
  out += text("sub", left + plot_w / 2, lanes_bottom + 36, "time since the run's first event (ms)", "middle");

  // Faults: bands under the bars; their labels go first into the rows above the lanes.
  LabelRows rows(kLabelRows);
  const auto label_y = [&](int row) { return lanes_top - 8 - row * kRowH; };
  const auto place_label = [&](double x, const std::string& label, int& row, bool connector) {
    const double x0 = std::clamp(x + 3, left, left + plot_w - text_width(label));
    row = rows.place(x0, x0 + text_width(label), connector, x);
    return x0;
  };
  for (const FaultBand& f : t.faults) {
    const std::int64_t end = f.end == kNever ? to : f.end;
    if (!in_window(f.start, end)) continue;
    const double x0 = x_of(f.start), x1 = std::max(x_of(end), x0 + 1);
    const std::string label = shortened(f.what, 40);
    int row = -1;
    const double tx = place_label(x0, label, row, true);
    out += rect("fault", x0, lanes_top - 4, x1 - x0, lanes_bottom - lanes_top + 8,
                f.what + " (" + ms_text(f.start) + " - " + ms_text(f.end) + " ms)") +
           line("fedge", x0, row >= 0 ? label_y(row) + 3 : lanes_top - 4, x0, lanes_bottom + 4) + "\n";
    if (row >= 0) out += text("flabel", tx, label_y(row), label);
  }

  // Per lane: leases, stays inside the oracle, the part of a stay past the lease's deadline.
  for (int p = 0; p < lanes; ++p) {
    const std::string who = "client " + std::to_string(p);
    std::vector<Bar> leases, stays, expired;
    for (const Span& s : t.leases) {
      if (s.process != p || !in_window(s.start, s.end)) continue;
      leases.push_back({x_of(s.start), x_of(s.end),
                        who + ", token " + s.token.substr(0, 6) +
                            (s.fence != 0 ? ", fence " + std::to_string(s.fence) : "") + ", lease " + ms_text(s.start) +
                            " - " + ms_text(s.end) + " ms"});
    }
    for (const Span& s : t.stays) {
      if (s.process != p || !in_window(s.start, s.end)) continue;
      stays.push_back(
          {x_of(s.start), x_of(s.end), who + " inside " + ms_text(s.start) + " - " + ms_text(s.end) + " ms"});
      const std::int64_t expiry = std::max(s.start, s.deadline);
      if (s.end > expiry && in_window(expiry, s.end)) {
        expired.push_back({x_of(expiry), x_of(s.end),
                           who + " still inside " + num(static_cast<double>(s.end - expiry) / 1e6) +
                               " ms after its lease expired (deadline " + ms_text(s.deadline) + " ms)"});
      }
    }
    emit_bars(out, std::move(leases), "lease", lane_y(p) + 5, 20, dense);
    emit_bars(out, std::move(stays), "stay", lane_y(p) + 12, 6, dense);
    emit_bars(out, std::move(expired), "expired", lane_y(p) + 10, 10, dense);
  }

  // Store writes: ticks under the bars; late ones full height, with a dot on top.
  std::set<std::tuple<int, int, bool, bool>> drawn;  // dense: one tick per pixel, lane and kind
  for (const StoreWrite& w : t.writes) {
    if (w.process < 0 || !in_window(w.sent, w.sent)) continue;
    const double x = x_of(w.sent), y = lane_y(w.process);
    if (dense && !drawn.emplace(w.process, static_cast<int>(x), w.accepted, w.late).second) continue;
    out += "<g>" + line(w.accepted ? "wa" : "wr", x, y + (w.late ? 3 : 26), x, y + kLaneH - 1);
    if (w.late) {
      out += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y + 3) + "\" r=\"3\" stroke=\"white\" fill=\"" +
             (w.accepted ? "#2b8a3e" : "#e8590c") + "\"/>";
    }
    if (!dense) {
      out += "<title>" + std::string(w.late ? "late " : "") + "write " + (w.accepted ? "accepted" : "rejected") +
             (w.fence != 0 ? ", fence " + std::to_string(w.fence) : "") + ", sent at " + ms_text(w.sent) +
             " ms</title>";
    }
    out += "</g>\n";
  }

  // Violations: red bands over the two lanes involved, on top; labels where rows have room.
  for (const ViolationBand& v : violation_bands(report, from, to, (to - from) / static_cast<std::int64_t>(plot_w))) {
    const double x0 = x_of(v.start), y0 = lane_y(v.lane_a) - 2;
    out += rect("viol", x0, y0, std::max(x_of(v.end) - x0, 2.0), lane_y(v.lane_b) + kLaneH + 2 - y0, v.descriptions);
    const double longest_ms = static_cast<double>(v.longest) / 1e6;
    if (v.count > 1) {
      std::snprintf(buf, sizeof buf, "%s %d/%d: %zu overlaps, longest %.1f ms", v.kinds.c_str(), v.lane_a, v.lane_b,
                    v.count, longest_ms);
    } else {
      std::snprintf(buf, sizeof buf, "%s %d/%d %.1f ms", v.kinds.c_str(), v.lane_a, v.lane_b, longest_ms);
    }
    int row = -1;
    const double tx = place_label(x0, buf, row, false);
    if (row >= 0) out += text("vlabel", tx, label_y(row), buf);
  }

  for (std::size_t i = 0; i < std::size(kLegend); ++i) {
    out += "<g transform=\"translate(" + num(left + static_cast<double>(i % columns) * column) + "," +
           num(legend_top + static_cast<double>(i / columns) * 18) + ")\">" + kLegend[i].first +
           text("legend", 26, 0, kLegend[i].second) + "</g>\n";
  }
  return out + "</svg>\n";
}

}  // namespace redlock::chaos

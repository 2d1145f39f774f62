// SPDX-License-Identifier: Apache-2.0
// The timeline picture on synthetic histories: well-formed SVG, one bar per grant, bands for
// faults and violations, the automatic window, and a bounded size for long runs.
#include "timeline.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace redlock::chaos {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// `process` is granted at `granted` ms (lease valid until `deadline` ms), is inside the
// oracle until just before `release` ms, releases then and writes once while inside.
void grant(std::vector<Event>& h, int process, const std::string& token, std::int64_t granted, std::int64_t deadline,
           std::int64_t release, bool write_accepted = true) {
  Event e;
  e.process = process;
  e.resource = "r";
  e.token = token;
  e.deadline_ns = deadline * kMs;
  const auto add = [&](EventType type, std::int64_t t_ns) {
    e.type = type;
    e.t_ns = t_ns;
    h.push_back(e);
  };
  add(EventType::acquire_invoke, granted * kMs - kMs / 2);
  add(EventType::acquire_ok, granted * kMs);
  add(EventType::enter, granted * kMs + 1);
  e.invoke_ns = (release - 1) * kMs;
  add(write_accepted ? EventType::write_accepted : EventType::write_rejected, release * kMs - kMs / 2);
  e.invoke_ns = 0;
  add(EventType::leave, release * kMs - 1);
  e.deadline_ns = 0;
  add(EventType::release, release * kMs);
}

void fault(std::vector<Event>& h, std::int64_t id, const std::string& what, std::int64_t start, std::int64_t end) {
  Event e;
  e.type = EventType::fault_start;
  e.fault_id = id;
  e.detail = what;
  e.t_ns = start * kMs;
  h.push_back(e);
  if (end >= 0) {
    e.type = EventType::fault_end;
    e.t_ns = end * kMs;
    h.push_back(e);
  }
}

std::string render(std::vector<Event> h, const TimelineOptions& options = {}, TimelineWindow* window = nullptr) {
  h = merge_histories({h});
  return render_timeline_svg(h, check_history(h), options, window);
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Well-formed XML as far as this output goes: one root element, start and end tags nest, attribute
// quotes pair up, '<' and '&' only start markup and entities, no '>' in text.
::testing::AssertionResult well_formed(const std::string& x) {
  std::vector<std::string> open;
  std::size_t roots = 0;
  std::size_t i = x.rfind("<?xml", 0) == 0 ? x.find("?>") + 2 : 0;
  for (; i < x.size(); ++i) {
    if (x[i] == '&') {
      const std::size_t semi = x.find(';', i);
      const std::string entity = semi == std::string::npos ? "" : x.substr(i, semi - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" && entity != "&apos;") {
        return ::testing::AssertionFailure() << "bad entity at " << i << ": " << x.substr(i, 12);
      }
    } else if (x[i] == '>') {
      return ::testing::AssertionFailure() << "raw '>' in text at " << i;
    } else if (x[i] == '<') {
      const std::size_t close = x.find('>', i);
      if (close == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
      const std::string tag = x.substr(i + 1, close - i - 1);
      if (count(tag, "\"") % 2 != 0 || tag.find('<') != std::string::npos) {
        return ::testing::AssertionFailure() << "bad tag: <" << tag << ">";
      }
      const std::string name = tag.substr(0, tag.find_first_of(" /\n"));
      if (tag.front() == '/') {
        if (open.empty() || open.back() != tag.substr(1)) return ::testing::AssertionFailure() << "stray </" << tag;
        open.pop_back();
      } else {
        if (open.empty()) ++roots;
        if (tag.back() != '/') open.push_back(name);
      }
      i = close;
    }
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> never closed";
  if (roots != 1) return ::testing::AssertionFailure() << roots << " root elements";
  return ::testing::AssertionSuccess();
}

// The numeric attribute `name` of the first element at or after `from` that has it.
double attribute(const std::string& svg, std::size_t from, const std::string& name) {
  const std::size_t at = svg.find(" " + name + "=\"", from);
  return at == std::string::npos ? -1.0 : std::atof(svg.c_str() + at + name.size() + 3);
}

TEST(Timeline, WellFormedWithOneLeaseBarPerGrantInTheWindow) {
  std::vector<Event> h;
  grant(h, 0, "aaaaaaaaaa", 10, 1000, 20);
  grant(h, 1, "bbbbbbbbbb", 21, 1000, 30, false);
  grant(h, 2, "cccccccccc", 31, 1000, 40);
  grant(h, 0, "dddddddddd", 100, 1000, 110);  // outside the window
  TimelineOptions options;
  options.from_ns = 5 * kMs;
  options.to_ns = 35 * kMs;
  options.title = "three grants";
  const std::string svg = render(h, options);
  EXPECT_TRUE(well_formed(svg)) << svg;
  EXPECT_EQ(count(svg, "<svg"), 1u);
  EXPECT_EQ(count(svg, "</svg>"), 1u);
  EXPECT_EQ(count(svg, "class=\"lease\""), 3u);
  EXPECT_NE(svg.find("token aaaaaa,"), std::string::npos);  // the token's first 6 chars in the title
  EXPECT_EQ(svg.find("aaaaaaa"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"wa\""), 1u);  // c's write (39 ms) is outside
  EXPECT_EQ(count(svg, "class=\"wr\""), 1u);
  for (const char* lane : {">client 0<", ">client 1<", ">client 2<"}) EXPECT_NE(svg.find(lane), std::string::npos);
  EXPECT_NE(svg.find("three grants"), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"viol\""), 0u);
}

TEST(Timeline, FaultTextIsEscapedAndTheFaultIsAShadedBand) {
  std::vector<Event> h;
  grant(h, 0, "a", 10, 1000, 20);
  grant(h, 1, "b", 30, 1000, 40);
  fault(h, 1, "freeze <&> \"master\" 'x'", 12, 25);
  const std::string svg = render(h);
  EXPECT_TRUE(well_formed(svg)) << svg;
  EXPECT_EQ(svg.find("<&>"), std::string::npos);
  EXPECT_NE(svg.find("<title>freeze &lt;&amp;&gt; &quot;master&quot; &apos;x&apos; ("), std::string::npos);
  EXPECT_EQ(count(svg, "class=\"fault\""), 1u);
  EXPECT_EQ(count(svg, "class=\"flabel\""), 1u);
}

TEST(Timeline, FaultWithoutAnEndExtendsToTheWindowEndAndLabelsAreShort) {
  std::vector<Event> h;
  grant(h, 0, "a", 10, 1000, 20);
  grant(h, 1, "b", 4000, 5000, 4010);
  const std::string long_text(100, 'x');
  fault(h, 1, long_text, 100, -1);
  TimelineWindow window;
  const std::string svg = render(h, {}, &window);
  EXPECT_TRUE(well_formed(svg));
  const std::size_t band = svg.find("class=\"fault\"");
  ASSERT_NE(band, std::string::npos);
  const std::size_t lane = svg.find("class=\"lanebg\"");
  EXPECT_NEAR(attribute(svg, band, "x") + attribute(svg, band, "width"),
              attribute(svg, lane, "x") + attribute(svg, lane, "width"), 0.2);
  EXPECT_NE(svg.find(">" + std::string(40, 'x') + "...</text>"), std::string::npos);
  EXPECT_NE(svg.find("<title>" + long_text), std::string::npos);
  EXPECT_LE(window.to_ns - window.from_ns, 3000 * kMs);
  EXPECT_LE(window.from_ns, 100 * kMs);
}

TEST(Timeline, ViolationIsARedBandOverBothLanes) {
  std::vector<Event> h;
  grant(h, 0, "a", 10, 1000, 100);
  grant(h, 2, "b", 50, 1000, 60);
  const CheckReport report = check_history(merge_histories({h}));
  ASSERT_EQ(report.mutual_exclusion_violations, 1u);
  const std::string svg = render_timeline_svg(merge_histories({h}), report);
  EXPECT_TRUE(well_formed(svg));
  // mutual_exclusion and oracle over the same episode: one band, both kinds named.
  ASSERT_EQ(count(svg, "class=\"viol\""), 1u);
  EXPECT_NE(svg.find("mutual excl.+oracle 0/2"), std::string::npos);
  EXPECT_NE(svg.find("process 2 was granted"), std::string::npos);  // the description, as a title
  const std::size_t band = svg.find("class=\"viol\"");
  const std::size_t lane0 = svg.find("class=\"lanebg\"");
  const std::size_t lane2 = svg.find("class=\"lanebg\"", svg.find("class=\"lanebg\"", lane0 + 1) + 1);
  EXPECT_LE(attribute(svg, band, "y"), attribute(svg, lane0, "y"));
  EXPECT_GE(attribute(svg, band, "y") + attribute(svg, band, "height"),
            attribute(svg, lane2, "y") + attribute(svg, lane2, "height"));
}

TEST(Timeline, PausedHolderPastItsDeadlineIsHatched) {
  std::vector<Event> h;
  grant(h, 0, "a", 10, 100, 400);  // inside until 400 ms, lease valid until 100 ms
  grant(h, 1, "b", 150, 1000, 200);
  fault(h, 1, "SIGSTOP client 0", 20, 390);
  const std::string svg = render(h);
  EXPECT_TRUE(well_formed(svg));
  EXPECT_EQ(count(svg, "class=\"expired\""), 1u);
  EXPECT_NE(svg.find("after its lease expired"), std::string::npos);
  EXPECT_NE(svg.find("oracle 0/1"), std::string::npos);
}

TEST(Timeline, AutomaticWindowCentresOnTheFirstViolation) {
  std::vector<Event> h;
  for (int i = 0; i < 100; ++i) grant(h, i % 3, "t" + std::to_string(i), 100 * i + 10, 100 * i + 1000, 100 * i + 90);
  grant(h, 0, "x", 5020, 6000, 5080);  // overlaps t50 (5010-5090): the first violation
  grant(h, 1, "y", 8020, 9000, 8080);  // a later one
  const std::vector<Event> merged = merge_histories({h});
  const CheckReport report = check_history(merged);
  ASSERT_GE(report.violations.size(), 2u);
  const Violation& first = report.violations.front();
  TimelineWindow window;
  const std::string svg = render_timeline_svg(merged, report, {}, &window);
  EXPECT_TRUE(well_formed(svg));
  EXPECT_NEAR(static_cast<double>(window.from_ns + window.to_ns) / 2,
              static_cast<double>(first.overlap_start_ns + first.overlap_end_ns) / 2, 1.0 * kMs);
  EXPECT_NEAR(static_cast<double>(window.to_ns - window.from_ns), 1500.0 * kMs, 1.0 * kMs);
  EXPECT_NE(svg.find("data-from-ns=\"" + std::to_string(window.from_ns) + "\""), std::string::npos);
  const TimelineWindow again = choose_timeline_window(merged, report);
  EXPECT_EQ(again.from_ns, window.from_ns);
  EXPECT_EQ(again.to_ns, window.to_ns);
  EXPECT_EQ(count(svg, "class=\"viol\""), 1u);  // the 8 s one is outside
}

TEST(Timeline, WithoutViolationsTheWindowHoldsAFault) {
  std::vector<Event> h;
  for (int i = 0; i < 100; ++i) grant(h, i % 3, "t" + std::to_string(i), 100 * i + 10, 100 * i + 1000, 100 * i + 90);
  TimelineWindow window;
  (void)render(h, {}, &window);
  EXPECT_EQ(window.to_ns - window.from_ns, 3000 * kMs);  // no fault: the first 3 s
  EXPECT_LE(window.from_ns, 10 * kMs);
  fault(h, 1, "late fault", 7000, 7200);
  const std::string svg = render(h, {}, &window);
  EXPECT_LE(window.from_ns, 7000 * kMs);
  EXPECT_GE(window.to_ns, 7200 * kMs);
  EXPECT_EQ(count(svg, "class=\"fault\""), 1u);
}

TEST(Timeline, EmptyHistorySaysNoEvents) {
  const std::string svg = render_timeline_svg({}, CheckReport{});
  EXPECT_TRUE(well_formed(svg)) << svg;
  EXPECT_NE(svg.find("no events"), std::string::npos);
}

TEST(Timeline, ManyGrantsStayCompact) {
  std::vector<Event> h;
  for (int i = 0; i < 12'000; ++i) grant(h, i % 4, "t" + std::to_string(i), 10 * i + 1, 10 * i + 100, 10 * i + 9);
  TimelineOptions options;
  options.from_ns = 1;
  options.to_ns = 120'000 * kMs;
  const std::string svg = render(h, options);
  EXPECT_TRUE(well_formed(svg));
  EXPECT_LT(svg.size(), 2'000'000u);
  EXPECT_GE(count(svg, "class=\"lease\""), 4u);
  EXPECT_LE(count(svg, "class=\"lease\""), 4u * 1200);
  EXPECT_NE(svg.find("12000 grants (12000 here)"), std::string::npos);
}

}  // namespace
}  // namespace redlock::chaos

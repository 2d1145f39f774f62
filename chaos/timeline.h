// SPDX-License-Identifier: Apache-2.0
// chaos/timeline.h — a timeline picture (SVG) of a chaos run: who held the lock when.
//
// x = time (ms since the run's first event), one lane per client process. In each lane:
// each grant's lease window [acquire_ok, min(release, deadline)] as a bar, the time its
// holder was inside the oracle [enter, leave] as a thinner dark bar on top (hatched where it
// is past the lease deadline), and the store writes as ticks. Faults are translucent bands
// across all lanes; the checker's violations are red bands over the two lanes involved.
// Hover titles carry the details (tokens, fault texts, violation descriptions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checker.h"
#include "history.h"

namespace redlock::chaos {

struct TimelineOptions {
  // The window, in CLOCK_MONOTONIC ns (the history's own scale, like Event::t_ns).
  // 0, 0 = automatic (see choose_timeline_window); to_ns = 0 alone = up to the run's end.
  std::int64_t from_ns = 0, to_ns = 0;
  int width_px = 1200;
  std::string title;  // e.g. "quorum N=5, minority-freeze, seed 4"
};

struct TimelineWindow {
  std::int64_t from_ns = 0;
  std::int64_t to_ns = 0;
};

// The window render_timeline_svg draws. When options.from_ns and options.to_ns are both 0:
// if the report lists violations, about 1.5 s centred on the first listed one (longer if
// its overlap is long), clamped to the run; otherwise 3 s from the first grant, or around
// the first fault if that starts later (so the window holds a fault when the run has one).
[[nodiscard]] TimelineWindow choose_timeline_window(const std::vector<Event>& merged_history, const CheckReport& report,
                                                    const TimelineOptions& options = {});

// A standalone SVG document. `chosen`, if given, receives the window drawn. The window is
// also in the root element's data-from-ns / data-to-ns attributes. Above ~2000 grants in
// the window the bars lose their hover titles and bars closer than a pixel are merged, so
// the file stays small (it is bounded by width x lanes, not by the history's length).
[[nodiscard]] std::string render_timeline_svg(const std::vector<Event>& merged_history, const CheckReport& report,
                                              const TimelineOptions& options = {}, TimelineWindow* chosen = nullptr);

}  // namespace redlock::chaos

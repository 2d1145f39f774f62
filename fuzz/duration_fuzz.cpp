// SPDX-License-Identifier: Apache-2.0
// fuzz/duration_fuzz.cpp — the command-line tool's durations: redlock_cli::parse_duration
// (cli/args.h: "500ms", "10s", "1.5s", "2m", "1h"; a plain number is milliseconds).
// Checked against the documented grammar, evaluated here in exact integer arithmetic:
//   - never a crash (the sanitizers); the only failure is a UsageError;
//   - it accepts exactly the texts of the grammar that are a whole number of milliseconds
//     between 0 and a year (366 days, the parser's bound), with the value the text says;
//   - every error names the option and quotes the text (control bytes shown as '?'), and
//     says "longer than a year" exactly when the text is a well-formed duration over it.
//
// Input layout: the whole input is the text.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "args.h"
#include "fuzz_check.h"

namespace {

constexpr long long kYearMs = 366LL * 24 * 3600 * 1000;
// Exact arithmetic for up to 12 + 9 digits times 3.6e6 (__extension__: -Wpedantic).
__extension__ typedef __int128 Wide;

struct Expected {
  bool well_formed = false;  // digits, an optional fraction, a known unit
  bool whole_ms = false;     // ... naming a whole number of milliseconds
  bool too_long = false;     // ... over a year (as an exact value)
  long long ms = 0;
};

// The grammar: [0-9]+ ("." [0-9]{1,9})? ("" | "ms" | "s" | "m" | "h").
Expected expected(std::string_view text) {
  Expected e;
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  if (i == 0) return e;
  std::string_view whole = text.substr(0, i);
  std::string_view fraction;
  if (i < text.size() && text[i] == '.') {
    const std::size_t start = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    fraction = text.substr(start, i - start);
    if (fraction.empty() || fraction.size() > 9) return e;
  }
  const std::string_view unit = text.substr(i);
  long long per_unit = 0;
  if (unit.empty() || unit == "ms") per_unit = 1;
  if (unit == "s") per_unit = 1000;
  if (unit == "m") per_unit = 60'000;
  if (unit == "h") per_unit = 3'600'000;
  if (per_unit == 0) return e;
  e.well_formed = true;
  // value = (whole * 10^f + fraction) / 10^f units, exactly, in 128 bits; it is a whole
  // number of ms when fraction * per_unit is a multiple of 10^f.
  Wide scale = 1;
  Wide parts = 0;
  for (const char c : fraction) {
    parts = parts * 10 + (c - '0');
    scale *= 10;
  }
  e.whole_ms = parts * per_unit % scale == 0;
  while (whole.size() > 1 && whole.front() == '0') whole.remove_prefix(1);
  if (whole.size() > 12) {  // over 10^12 units of at least 1 ms: over a year
    e.too_long = true;
    return e;
  }
  Wide units = 0;
  for (const char c : whole) units = units * 10 + (c - '0');
  const Wide scaled = (units * scale + parts) * per_unit;
  const Wide ms = scaled / scale;
  e.too_long = ms > kYearMs || (ms == kYearMs && scaled % scale != 0);
  e.ms = static_cast<long long>(ms);
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Expected e = expected(text);
  std::optional<long long> parsed;
  std::string error;
  try {
    parsed = redlock_cli::parse_duration(text, "--ttl").count();
  } catch (const redlock_cli::UsageError& usage) {
    error = usage.what();
  }
  if (parsed) {
    FUZZ_CHECK(e.well_formed && e.whole_ms && !e.too_long, "accepted a text outside the grammar or its bounds");
    FUZZ_CHECK(*parsed == e.ms, "parsed to a value the text does not say");
    FUZZ_CHECK(*parsed >= 0 && *parsed <= kYearMs, "parsed outside 0 .. a year");
    return 0;
  }
  FUZZ_CHECK(!(e.well_formed && e.whole_ms && !e.too_long), "refused a valid duration");
  const std::string head = "invalid duration '" + redlock_cli::printable(text) + "' for --ttl: ";
  FUZZ_CHECK(error.compare(0, head.size(), head) == 0, "an error that does not quote the text and name the option");
  const std::string_view reason = std::string_view(error).substr(head.size());
  // Over a year and not a whole number of ms: either reason is true.
  const bool says_too_long = reason == "longer than a year";
  if (says_too_long) FUZZ_CHECK(e.well_formed && e.too_long, "'longer than a year' for a text that is not a duration");
  if (e.well_formed && e.whole_ms) FUZZ_CHECK(says_too_long, "a duration over a year refused for another reason");
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// chaos/history.h — the events a chaos run records, one JSON object per line.
//
// Every client process writes its own file (no locking between processes); the harness
// writes the faults to another. All times are CLOCK_MONOTONIC nanoseconds (std::chrono::
// steady_clock on Linux), which every process on the machine shares, so the files can be
// merged by time. A lock's validity deadline is stored on the same clock: Lock::deadline
// converted with to_ns().
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace redlock::chaos {

// The detail of a write_rejected that the store never judged (an error, not a refusal).
inline constexpr std::string_view kStoreErrorPrefix = "store error: ";
// The detail of an acquire_ok held by fewer masters than --min-holders asks (released unused):
// no later grant is bound by it, but it may not overlap an earlier grant held on enough masters.
inline constexpr std::string_view kBelowMinHoldersPrefix = "below --min-holders: ";

enum class EventType : std::uint8_t {
  acquire_invoke,   // an acquire call starts
  acquire_ok,       // granted: token, fence, deadline_ns (validity end), started_ns (detail:
                    // kBelowMinHoldersPrefix... when held by too few masters to be used)
  acquire_fail,     // not granted: detail says why
  enter,            // the holder entered the harness-owned resource (the oracle)
  leave,            // ... and left it
  oracle_conflict,  // live detection: entered while someone else was inside (detail: who)
  write_accepted,   // a write to the (fenced) store was accepted: fence, invoke_ns, t_ns = done
  write_rejected,   // ... refused (stale token), or failed at the store: detail kStoreErrorPrefix...
  release,          // release invoked (t_ns) : detail = outcome
  fault_start,      // fault_id, detail = what
  fault_end,        // fault_id
  // Leases (strategy lease). All carry the grant's token; older histories have none of them.
  lease_start,      // Client::keep returned: renewed from here on; deadline_ns as of then
  lease_renewed,    // the holder saw the lease's deadline move: deadline_ns = the new one,
                    // started_ns = when the renewing round was sent, t_ns = when it was seen
  lease_lost,       // the loss signal (on_lost) ran: t_ns = then, detail = reason,
                    // deadline_ns = the lock's deadline as of its last renewal
};

[[nodiscard]] std::string_view to_string(EventType type) noexcept;
[[nodiscard]] std::optional<EventType> parse_event_type(std::string_view text) noexcept;

struct Event {
  EventType type = EventType::acquire_invoke;
  std::int64_t t_ns = 0;       // when it happened (for writes: when the reply came)
  int process = -1;            // client index; -1 = the harness (faults)
  std::string resource;        // lock resource
  std::string token;           // lock owner token
  std::uint64_t fence = 0;     // fencing token (0 = none)
  std::int64_t deadline_ns = 0;  // acquire_ok, writes, lease_*: the lease's validity deadline
  std::int64_t started_ns = 0;   // acquire_ok: when the granting round started
  std::int64_t invoke_ns = 0;    // writes: when the write was sent
  std::int64_t fault_id = 0;     // fault_start / fault_end
  std::string detail;            // free text
};

// Now on CLOCK_MONOTONIC, in ns.
[[nodiscard]] std::int64_t monotonic_ns() noexcept;
// A steady_clock instant (e.g. Lock::deadline) on the same scale.
[[nodiscard]] std::int64_t to_ns(std::chrono::steady_clock::time_point t) noexcept;

// One line of JSON, without the newline. parse_event throws std::runtime_error on bad input.
[[nodiscard]] std::string format_event(const Event& event);
[[nodiscard]] Event parse_event(std::string_view line);

// Appends events to a file, one line each, written out with one write() per event so a
// process that is stopped or killed leaves only whole lines behind.
class HistoryWriter {
 public:
  explicit HistoryWriter(const std::string& path);  // truncates; throws on failure
  ~HistoryWriter();
  HistoryWriter(const HistoryWriter&) = delete;
  HistoryWriter& operator=(const HistoryWriter&) = delete;
  void write(const Event& event);

 private:
  int fd_ = -1;
};

// Reads one history file (skipping blank lines; a truncated last line is ignored).
[[nodiscard]] std::vector<Event> read_history(const std::string& path);
// Concatenates and sorts by t_ns (stable).
[[nodiscard]] std::vector<Event> merge_histories(const std::vector<std::vector<Event>>& parts);

}  // namespace redlock::chaos

// SPDX-License-Identifier: Apache-2.0
#include "history.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

namespace redlock::chaos {
namespace {

constexpr std::array<std::pair<EventType, std::string_view>, 14> kNames{{
    {EventType::acquire_invoke, "acquire_invoke"},
    {EventType::acquire_ok, "acquire_ok"},
    {EventType::acquire_fail, "acquire_fail"},
    {EventType::enter, "enter"},
    {EventType::leave, "leave"},
    {EventType::oracle_conflict, "oracle_conflict"},
    {EventType::write_accepted, "write_accepted"},
    {EventType::write_rejected, "write_rejected"},
    {EventType::release, "release"},
    {EventType::fault_start, "fault_start"},
    {EventType::fault_end, "fault_end"},
    {EventType::lease_start, "lease_start"},
    {EventType::lease_renewed, "lease_renewed"},
    {EventType::lease_lost, "lease_lost"},
}};

}  // namespace

std::string_view to_string(EventType type) noexcept {
  for (const auto& [t, name] : kNames) {
    if (t == type) return name;
  }
  return "unknown";
}

std::optional<EventType> parse_event_type(std::string_view text) noexcept {
  for (const auto& [t, name] : kNames) {
    if (name == text) return t;
  }
  return std::nullopt;
}

std::int64_t monotonic_ns() noexcept { return to_ns(std::chrono::steady_clock::now()); }

std::int64_t to_ns(std::chrono::steady_clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::string format_event(const Event& e) {
  nlohmann::json j;
  j["type"] = to_string(e.type);
  j["t_ns"] = e.t_ns;
  j["process"] = e.process;
  if (!e.resource.empty()) j["resource"] = e.resource;
  if (!e.token.empty()) j["token"] = e.token;
  if (e.fence != 0) j["fence"] = e.fence;
  if (e.deadline_ns != 0) j["deadline_ns"] = e.deadline_ns;
  if (e.started_ns != 0) j["started_ns"] = e.started_ns;
  if (e.invoke_ns != 0) j["invoke_ns"] = e.invoke_ns;
  if (e.fault_id != 0) j["fault_id"] = e.fault_id;
  if (!e.detail.empty()) j["detail"] = e.detail;
  return j.dump();
}

Event parse_event(std::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw std::runtime_error("history: not a JSON object: " + std::string(line));
  const auto type = parse_event_type(j.value("type", std::string()));
  if (!type) throw std::runtime_error("history: unknown event type in: " + std::string(line));
  Event e;
  e.type = *type;
  e.t_ns = j.value("t_ns", std::int64_t{0});
  e.process = j.value("process", -1);
  e.resource = j.value("resource", std::string());
  e.token = j.value("token", std::string());
  e.fence = j.value("fence", std::uint64_t{0});
  e.deadline_ns = j.value("deadline_ns", std::int64_t{0});
  e.started_ns = j.value("started_ns", std::int64_t{0});
  e.invoke_ns = j.value("invoke_ns", std::int64_t{0});
  e.fault_id = j.value("fault_id", std::int64_t{0});
  e.detail = j.value("detail", std::string());
  return e;
}

HistoryWriter::HistoryWriter(const std::string& path)
    : fd_(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644)) {
  if (fd_ < 0) throw std::runtime_error("history: cannot open " + path + ": " + std::strerror(errno));
}

HistoryWriter::~HistoryWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void HistoryWriter::write(const Event& event) {
  std::string line = format_event(event);
  line.push_back('\n');
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("history: write failed: ") + std::strerror(errno));
    }
    done += static_cast<std::size_t>(n);
  }
}

std::vector<Event> read_history(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("history: cannot read " + path);
  std::vector<Event> events;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (in.eof() && line.back() != '}') break;  // a torn last line
    events.push_back(parse_event(line));
  }
  return events;
}

std::vector<Event> merge_histories(const std::vector<std::vector<Event>>& parts) {
  std::vector<Event> all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  std::stable_sort(all.begin(), all.end(), [](const Event& a, const Event& b) { return a.t_ns < b.t_ns; });
  return all;
}

}  // namespace redlock::chaos

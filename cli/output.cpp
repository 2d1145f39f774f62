// SPDX-License-Identifier: Apache-2.0
#include "output.h"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "args.h"
#include "secrets.h"

namespace redlock_cli {
namespace {

double to_ms(std::chrono::microseconds value) { return static_cast<double>(value.count()) / 1000.0; }

bool write_now(std::FILE* stream, const std::string& text) {
  const bool written = std::fwrite(text.data(), 1, text.size(), stream) == text.size() &&
                       std::fputc('\n', stream) != EOF;
  return std::fflush(stream) == 0 && written && std::ferror(stream) == 0;
}

// QueuedStderr's queue and writer thread (null while there is none).
struct StderrQueue {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> lines;  // guarded by mutex
  std::size_t bytes = 0;          // guarded by mutex: of the lines
  std::size_t dropped = 0;        // guarded by mutex: lines not queued since the last were written
  bool closing = false;           // guarded by mutex
  std::thread writer;

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      changed.wait(lock, [&] { return closing || !lines.empty() || dropped > 0; });
      if (lines.empty() && dropped == 0) return;  // closing, and all written
      std::string line;
      if (!lines.empty()) {
        line = std::move(lines.front());
        lines.pop_front();
        bytes -= line.size();
      } else {
        line = "redlock: " + std::to_string(dropped) + (dropped == 1 ? " line" : " lines") +
               " of diagnostics dropped: stderr was not being read";
        dropped = 0;
      }
      lock.unlock();
      write_now(stderr, line);  // the one place that may wait on stderr
      lock.lock();
    }
  }
};

std::mutex queue_owner_mutex;
StderrQueue* queue = nullptr;  // guarded by queue_owner_mutex

// Every line the tool prints goes through here: command-line words that may carry a password
// (a -m URI quoted in a usage error, say) are masked on the way out.
// False if the line could not be written (a full disk, a closed pipe); a line queued for
// stderr (QueuedStderr) counts as written. `keep`: queued even past the bound (a --json report).
bool write_line(std::FILE* stream, std::string_view raw, bool keep = false) {
  std::string text = mask_secrets(raw);
  if (stream == stderr) {
    const std::lock_guard owner(queue_owner_mutex);
    if (queue != nullptr) {
      const std::lock_guard guard(queue->mutex);
      if (!keep && queue->bytes + text.size() > QueuedStderr::kMaxQueuedBytes) {
        ++queue->dropped;
      } else {
        queue->bytes += text.size();
        queue->lines.push_back(std::move(text));
      }
      queue->changed.notify_one();
      return true;
    }
  }
  return write_now(stream, text);
}

}  // namespace

Json result_json(const redlock::Result& result, std::string_view command, std::string_view resource,
                 std::string_view key, std::string_view token) {
  Json object;
  object["command"] = std::string(command);
  object["resource"] = std::string(resource);
  object["key"] = result.lock ? result.lock->key : std::string(key);
  object["outcome"] = std::string(redlock::to_string(result.outcome));
  object["ok"] = result.ok();
  if (result.lock) {
    object["token"] = result.lock->token;
  } else if (!token.empty()) {
    object["token"] = std::string(token);
  } else {
    object["token"] = nullptr;
  }
  // Lock::fence is 0 unless the acquire asked for one (the library's fences start at 1).
  object["fence"] = result.lock && result.lock->fence != 0 ? Json(result.lock->fence) : Json(nullptr);
  object["ttl_ms"] = result.lock ? Json(result.lock->ttl.count()) : Json(nullptr);
  object["validity_ms"] = to_ms(result.validity);
  object["attempts"] = result.attempts;
  object["message"] = in_cli_terms(result.message);
  Json masters = Json::array();
  for (const auto& master : result.masters) {
    Json entry;
    entry["endpoint"] = master.endpoint;
    entry["status"] = std::string(redlock::to_string(master.status));
    entry["latency_ms"] = to_ms(master.latency);
    entry["error"] = in_cli_terms(master.error);
    masters.push_back(std::move(entry));
  }
  object["masters"] = std::move(masters);
  object["notes"] = Json::array();
  object["exit_code"] = nullptr;
  return object;
}

Json error_json(std::string_view command, std::string_view outcome, std::string_view message, int exit_code) {
  Json object;
  object["command"] = command.empty() ? Json(nullptr) : Json(std::string(command));
  object["resource"] = nullptr;
  object["key"] = nullptr;
  object["outcome"] = std::string(outcome);
  object["ok"] = false;
  object["token"] = nullptr;
  object["fence"] = nullptr;
  object["ttl_ms"] = nullptr;
  object["validity_ms"] = 0.0;
  object["attempts"] = 0;
  object["message"] = std::string(message);
  object["masters"] = Json::array();
  object["notes"] = Json::array();
  object["exit_code"] = exit_code;
  if (command == "run") add_run_keys(object);
  return object;
}

void add_run_keys(Json& object) {
  object["extends"] = 0;
  object["lock_lost"] = false;
  object["lost_reason"] = nullptr;
  object["child"] = {{"pid", nullptr}, {"pgid", nullptr}, {"exit_status", nullptr}, {"signal", nullptr}};
  object["forwarded_signals"] = Json::object();  // signal name -> how many were forwarded
  object["lease"] = nullptr;
  object["left_group_running"] = false;
  object["release"] = nullptr;
  object["error"] = nullptr;
  object["interrupted_by"] = nullptr;
  object["scheduling"] = nullptr;  // "realtime", or "normal (why)"; null before run got that far
  object["ran_past_deadline"] = false;
}

void Output::note(std::string_view text) const {
  if (quiet_) return;
  write_line(stderr, "redlock: " + std::string(text));
}

void Output::failure(std::string_view headline, const redlock::Result& result) const {
  if (quiet_) return;
  std::string text = "redlock: " + std::string(headline) + "\n";
  // format_result: the outcome line, then one row per master; indent it under the headline.
  const std::string table = in_cli_terms(redlock::format_result(result));
  std::size_t start = 0;
  while (start < table.size()) {
    auto end = table.find('\n', start);
    if (end == std::string::npos) end = table.size();
    text += "  " + table.substr(start, end - start) + "\n";
    start = end + 1;
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  write_line(stderr, text);
}

bool Output::emit(std::FILE* stream, const Json& object) {
  // Replace, never throw, on bytes that are not UTF-8 (resource names are binary-safe).
  return write_line(stream, object.dump(-1, ' ', false, Json::error_handler_t::replace), true);
}

void print_error(std::string_view text) { write_line(stderr, "redlock: " + std::string(text)); }

QueuedStderr::QueuedStderr() {
  auto made = std::make_unique<StderrQueue>();
  made->writer = std::thread([raw = made.get()] { raw->run(); });
  const std::lock_guard owner(queue_owner_mutex);
  queue = made.release();
}

QueuedStderr::~QueuedStderr() {
  StderrQueue* own = nullptr;
  {
    const std::lock_guard owner(queue_owner_mutex);
    own = std::exchange(queue, nullptr);  // later lines are written at once, after these
  }
  {
    const std::lock_guard guard(own->mutex);
    own->closing = true;
  }
  own->changed.notify_one();
  own->writer.join();
  delete own;
}

}  // namespace redlock_cli

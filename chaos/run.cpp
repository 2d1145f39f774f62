// SPDX-License-Identifier: Apache-2.0
#include "run.h"

#include <signal.h>

#include <algorithm>
#include <csignal>
#include <cinttypes>
#include <cstdio>
#include <numeric>
#include <thread>

namespace redlock::chaos {

using namespace std::chrono_literals;

namespace {
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) { g_interrupted = 1; }
}  // namespace

void end_runs_on_interrupt() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

Run::Run(const Config& config, Shared& shared, HistoryWriter& faults)
    : config_(config), shared_(shared), faults_(faults), rng_(config.seed), start_(std::chrono::steady_clock::now()),
      end_(start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        std::chrono::duration<double>(config.duration_s))) {}

bool Run::over() const {
  return g_interrupted != 0 || std::chrono::steady_clock::now() >= end_ || (config_.grants > 0 && shared_.grants.load() >= config_.grants);
}

void Run::sleep(std::chrono::steady_clock::duration d) {
  const auto until = std::min(std::chrono::steady_clock::now() + d, end_);
  while (std::chrono::steady_clock::now() < until && !over()) {
    progress();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(until - std::chrono::steady_clock::now(), 20ms));
  }
  progress();
}

void Run::sleep_exactly(std::chrono::steady_clock::duration d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    progress();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(until - std::chrono::steady_clock::now(), 20ms));
  }
}

std::int64_t Run::fault_start(const std::string& what) {
  Event e;
  e.type = EventType::fault_start;
  e.t_ns = monotonic_ns();
  e.fault_id = ++fault_ids_;
  e.detail = what;
  faults_.write(e);
  active_.push_back(e.fault_id);
  return e.fault_id;
}

void Run::fault_end(std::int64_t id) {
  Event e;
  e.type = EventType::fault_end;
  e.t_ns = monotonic_ns();
  e.fault_id = id;
  faults_.write(e);
  active_.erase(std::remove(active_.begin(), active_.end(), id), active_.end());
}

std::vector<std::size_t> Run::pick(std::size_t n, std::size_t k) {
  std::vector<std::size_t> all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  std::shuffle(all.begin(), all.end(), rng_);
  all.resize(std::min(k, n));
  return all;
}

void Run::progress() {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_progress_) return;
  next_progress_ = now + 1s;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  std::printf("[%6.1fs] grants %ld, failed acquires %ld, faults %" PRId64 " (%zu active), live oracle conflicts %ld\n",
              elapsed, shared_.grants.load(), shared_.failures.load(), fault_ids_, active_.size(),
              shared_.live_conflicts.load());
  std::fflush(stdout);
}

}  // namespace redlock::chaos

// SPDX-License-Identifier: Apache-2.0
#include "clock_control.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "clock_shim/clock_file.h"

#ifndef REDLOCK_CLOCK_SHIM_PATH
#error "REDLOCK_CLOCK_SHIM_PATH must name the built redlock_clock_shim (see chaos/clock_shim/CMakeLists.txt)"
#endif

namespace redlock::chaos {
namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// The clock the shim calls "real": CLOCK_REALTIME, read without the shim (this process is
// never preloaded).
std::int64_t real_now_ns() {
  timespec now{};
  if (::clock_gettime(CLOCK_REALTIME, &now) != 0) throw_errno("clock_gettime(CLOCK_REALTIME)");
  return static_cast<std::int64_t>(now.tv_sec) * kNsPerSecond + static_cast<std::int64_t>(now.tv_nsec);
}

template <class T>
void store_relaxed(T& field, T value) {
  std::atomic_ref<T>(field).store(value, std::memory_order_relaxed);
}

}  // namespace

std::string clock_shim_path() { return REDLOCK_CLOCK_SHIM_PATH; }

ClockControl::ClockControl(std::string path) : path_(std::filesystem::absolute(std::move(path)).string()) {
  const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_errno("open " + path_);
  // Sized, never emptied first: a server that still maps an older file at this path must
  // not fault on a read beyond its end.
  if (::ftruncate(fd, static_cast<off_t>(sizeof(redlock_clock_file))) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    throw_errno("ftruncate " + path_);
  }
  void* mapped = ::mmap(nullptr, sizeof(redlock_clock_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  ::close(fd);
  if (mapped == MAP_FAILED) {
    errno = saved;
    throw_errno("mmap " + path_);
  }
  file_ = static_cast<redlock_clock_file*>(mapped);
  for (auto& byte : file_->reserved) store_relaxed<std::uint8_t>(byte, 0);
  store_relaxed<std::uint32_t>(file_->magic, REDLOCK_CLOCK_MAGIC);
  store_relaxed<std::uint32_t>(file_->version, REDLOCK_CLOCK_VERSION);
  reset();
}

ClockControl::~ClockControl() {
  ::munmap(file_, sizeof(redlock_clock_file));
  ::unlink(path_.c_str());
}

std::string ClockControl::env_entry() const { return std::string(REDLOCK_CLOCK_FILE_ENV) + "=" + path_; }

std::vector<std::string> ClockControl::server_environment() const {
  return {"LD_PRELOAD=" + clock_shim_path(), env_entry()};
}

void ClockControl::jump(std::chrono::nanoseconds forward) {
  const std::int64_t real = real_now_ns();
  const redlock_clock_params params{anchor_real_ns_, anchor_fake_ns_, rate_};
  anchor_real_ns_ = real;
  anchor_fake_ns_ = redlock_clock_fake_ns(&params, real) + static_cast<std::int64_t>(forward.count());
  publish();
}

void ClockControl::set_rate(double rate) {
  if (!std::isfinite(rate) || rate <= 0.0) {
    throw std::invalid_argument("ClockControl::set_rate: rate must be positive and finite, got " +
                                std::to_string(rate));
  }
  const std::int64_t real = real_now_ns();
  const redlock_clock_params params{anchor_real_ns_, anchor_fake_ns_, rate_};
  anchor_real_ns_ = real;
  anchor_fake_ns_ = redlock_clock_fake_ns(&params, real);
  rate_ = rate;
  publish();
}

void ClockControl::reset_rate() { set_rate(1.0); }

void ClockControl::reset() {
  anchor_real_ns_ = real_now_ns();
  anchor_fake_ns_ = anchor_real_ns_;
  rate_ = 1.0;
  publish();
}

std::chrono::nanoseconds ClockControl::offset() const {
  const std::int64_t real = real_now_ns();
  const redlock_clock_params params{anchor_real_ns_, anchor_fake_ns_, rate_};
  return std::chrono::nanoseconds(redlock_clock_fake_ns(&params, real) - real);
}

// The writer half of the seqlock described in clock_file.h.
void ClockControl::publish() {
  std::atomic_ref<std::uint64_t> sequence(file_->sequence);
  std::uint64_t before = sequence.load(std::memory_order_relaxed);
  before += before & 1U;  // a writer that died mid-update left it odd
  sequence.store(before + 1, std::memory_order_relaxed);
  // Release stores (not a release fence, which ThreadSanitizer does not support): a reader
  // whose acquire fence follows a load of any new field value also sees the odd sequence
  // stored before it, and retries.
  std::atomic_ref<std::int64_t>(file_->anchor_real_ns).store(anchor_real_ns_, std::memory_order_release);
  std::atomic_ref<std::int64_t>(file_->anchor_fake_ns).store(anchor_fake_ns_, std::memory_order_release);
  std::atomic_ref<double>(file_->rate).store(rate_, std::memory_order_release);
  sequence.store(before + 2, std::memory_order_release);
}

}  // namespace redlock::chaos

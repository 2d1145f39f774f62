// SPDX-License-Identifier: Apache-2.0
// cli/interrupt.cpp — see interrupt.h.
#include "interrupt.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>

#include "commands.h"

namespace redlock_cli {
namespace {

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

}  // namespace

int poll_timeout(std::chrono::steady_clock::time_point now, std::chrono::steady_clock::time_point when) {
  if (when <= now) return 0;
  const auto wait = std::chrono::ceil<std::chrono::milliseconds>(when - now).count();
  return static_cast<int>(std::min<long long>(wait, 60'000));
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Mailbox::Mailbox() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd_.get() < 0) throw_errno("eventfd");
}

redlock::Callback Mailbox::callback(const std::shared_ptr<Mailbox>& mailbox) {
  return [mailbox](redlock::Result result) { mailbox->post(std::move(result)); };
}

void Mailbox::post(redlock::Result result) {
  {
    const std::lock_guard guard(mutex_);
    results_.push_back(std::move(result));
  }
  notify();
}

void Mailbox::notify() {
  const std::uint64_t one = 1;
  if (::write(fd_.get(), &one, sizeof(one)) < 0) {
    // Only EAGAIN is possible (counter saturated), and then a wake-up is pending anyway.
  }
}

std::deque<redlock::Result> Mailbox::take() {
  std::uint64_t count = 0;
  if (::read(fd_.get(), &count, sizeof(count)) < 0) {
    // EAGAIN: nothing posted since the last take.
  }
  const std::lock_guard guard(mutex_);
  return std::exchange(results_, {});
}

sigset_t BlockedSignals::block(const std::vector<int>& signals, sigset_t& original) {
  sigset_t set;
  sigemptyset(&set);
  for (const int signal : signals) sigaddset(&set, signal);
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &set, &original); rc != 0) {
    errno = rc;
    throw_errno("pthread_sigmask");
  }
  return set;
}

namespace {

// Signal 32, the kernel's first real-time signal, is glibc's own (SIGCANCEL: its SIGRTMIN
// is 34): sigaction, sigaddset and pthread_sigmask refuse it, and a thread glibc starts has it
// unblocked. Its handler is installed only by pthread_cancel, which redlock never calls, so its
// action is the default one, which ended the tool where it landed: `kill -32` mid-round left
// the key held with nobody knowing the token, and run's command running on without a lease
// (review 35). It is ignored through the system call itself, process-wide. (33, glibc's
// SIGSETXID, has glibc's handler, which ignores a signal sent from outside.) A command that
// run starts gets it ignored too: glibc's posix_spawn sets its own signals so in the child.
void ignore_glibc_cancel_signal() {
#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
  struct KernelSigaction {  // the kernel's struct sigaction on these architectures
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    std::uint64_t mask;
  } ignore{SIG_IGN, 0, nullptr, 0};
  constexpr long kGlibcCancelSignal = 32;
  if (::syscall(SYS_rt_sigaction, kGlibcCancelSignal, &ignore, nullptr, sizeof ignore.mask) != 0) {
    throw_errno("rt_sigaction(32, SIG_IGN)");
  }
#endif
}

}  // namespace

BlockedSignals::BlockedSignals(const std::vector<int>& signals)
    : fd_([&] {
        ignore_glibc_cancel_signal();
        const sigset_t set = block(signals, original_);
        const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        if (fd < 0) throw_errno("signalfd");
        return fd;
      }()) {}

std::vector<signalfd_siginfo> BlockedSignals::read_all() const {
  std::vector<signalfd_siginfo> out;
  for (;;) {
    signalfd_siginfo info{};
    const auto got = ::read(fd_.get(), &info, sizeof(info));
    if (got == static_cast<ssize_t>(sizeof(info))) {
      out.push_back(info);
    } else if (got < 0 && errno == EINTR) {
      continue;
    } else {
      return out;  // EAGAIN: drained
    }
  }
}

std::vector<int> not_ignored(const std::vector<int>& signals) {
  std::vector<int> out;
  for (const int signal : signals) {
    struct sigaction current {};
    if (::sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    out.push_back(signal);
  }
  return out;
}

void die_of(int signal) {
  std::fflush(nullptr);
  ::prctl(PR_SET_DUMPABLE, 0);  // SIGQUIT dumps no core (it would hold the masters' passwords)
  std::signal(signal, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);  // pending copies of it are delivered here
  std::raise(signal);
  std::_Exit(128 + signal);  // a signal whose default is not to end the process
}

std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  if (signal == SIGRTMIN) return "SIGRTMIN";
  if (signal > SIGRTMIN && signal <= SIGRTMAX) return "SIGRTMIN+" + std::to_string(signal - SIGRTMIN);
  return "signal " + std::to_string(signal);
}

void wait_for_either(const BlockedSignals& signals, const Mailbox& mailbox, int timeout_ms) {
  pollfd fds[2] = {{signals.fd(), POLLIN, 0}, {mailbox.fd(), POLLIN, 0}};
  if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) throw_errno("poll");
}

redlock::Result acquire_interruptibly(redlock::Client& client, const Settings& settings, const BlockedSignals& signals,
                                      const std::shared_ptr<Mailbox>& mailbox,
                                      const std::function<int(const signalfd_siginfo&)>& on_signal, int& interrupted) {
  interrupted = 0;
  const auto read_signals = [&] {
    for (const auto& info : signals.read_all()) {
      if (interrupted == 0) interrupted = on_signal(info);
    }
  };
  // One acquire call, cancelled at an interrupting signal.
  const auto attempt = [&](const redlock::AcquireOptions& options) {
    read_signals();  // one that came before (during the warm-up): no attempt is sent
    if (interrupted != 0) {
      redlock::Result none;
      none.outcome = redlock::Outcome::cancelled;
      none.message = "cancelled by the caller";
      return none;
    }
    const auto id = client.acquire_async(settings.resource, Mailbox::callback(mailbox), options);
    std::optional<redlock::Result> result;
    bool cancelled = false;
    while (!result) {
      wait_for_either(signals, *mailbox, -1);
      read_signals();
      if (interrupted != 0 && !cancelled) {
        cancelled = true;
        client.cancel(id);
      }
      for (auto& mail : mailbox->take()) result = std::move(mail);
    }
    // As the library's blocking calls report it: what is left now, not at the decision.
    if (result->lock && result->validity > std::chrono::microseconds::zero()) {
      result->validity = std::min(result->validity, client.remaining(*result->lock));
    }
    return std::move(*result);
  };
  const auto start = client.now();
  redlock::Result result = attempt(first_attempt(settings.acquire));
  if (interrupted == 0) {
    if (const auto rest = rest_of_acquire(result, settings.acquire, client.options(), client.now() - start)) {
      const auto until = client.now() + rest->pause;
      for (auto now = client.now(); interrupted == 0 && now < until; now = client.now()) {
        wait_for_either(signals, *mailbox, poll_timeout(now, until));
        read_signals();
      }
      if (interrupted == 0) {
        const int earlier = result.attempts;
        result = attempt(rest->options);
        result.attempts += earlier;
      } else {
        result.outcome = redlock::Outcome::cancelled;
        result.message = "cancelled by the caller";
      }
    }
  }
  // A grant that came before the cancel took effect.
  if (interrupted != 0 && result.ok()) result = released_at_signal(client, std::move(result));
  return result;
}

redlock::Result released_at_signal(redlock::Client& client, redlock::Result granted) {
  const redlock::Result released = client.release(*granted.lock);
  granted.outcome = redlock::Outcome::cancelled;
  granted.validity = {};  // given up: not the caller's to act under, whatever the release did
  if (released.ok()) {
    granted.message = "granted as the signal came, and released";
    granted.lock.reset();
  } else {
    granted.message =
        "granted as the signal came; its release failed (" + std::string(redlock::to_string(released.outcome)) +
        "): its key may stay on some masters until its ttl ends; release it with token " + granted.lock->token;
  }
  return granted;
}

}  // namespace redlock_cli

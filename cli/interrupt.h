// SPDX-License-Identifier: Apache-2.0
// cli/interrupt.h — signals read from a file descriptor instead of ending the tool where they
// land, and an acquire they interrupt cleanly: a signal while an attempt is out cancels it (the
// library releases what it was granted) instead of leaving a key that nobody has the token of
// for its whole ttl. Used by `acquire` and `run`.
#pragma once

#include <signal.h>
#include <sys/signalfd.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "args.h"
#include "redlock/client.h"

namespace redlock_cli {

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// Lock results, and wake-ups (run: the lease's loss signal), handed from the library's loop
// thread to the main thread through an eventfd. Shared with the callbacks, so a late callback
// never touches freed memory.
class Mailbox {
 public:
  Mailbox();
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  static redlock::Callback callback(const std::shared_ptr<Mailbox>& mailbox);
  void post(redlock::Result result);
  // Only wakes the main thread up. Never blocks.
  void notify();
  std::deque<redlock::Result> take();

 private:
  Fd fd_;
  std::mutex mutex_;
  std::deque<redlock::Result> results_;
};

// Blocks `signals` in the calling thread, and so in every thread started after it (construct
// it before the Client, whose loop thread inherits the mask), and reads them from a signalfd.
// Also ignores signal 32, glibc's own, which cannot be blocked through glibc (interrupt.cpp).
class BlockedSignals {
 public:
  explicit BlockedSignals(const std::vector<int>& signals);
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  // The mask the thread had before.
  [[nodiscard]] const sigset_t& original_mask() const noexcept { return original_; }
  [[nodiscard]] std::vector<signalfd_siginfo> read_all() const;

 private:
  static sigset_t block(const std::vector<int>& signals, sigset_t& original);
  sigset_t original_{};
  Fd fd_;
};

// The signals whose default action ends the tool and that come from outside it: Ctrl-C,
// timeout(1) (whatever its -s), a supervisor, the kernel's RLIMIT_CPU and RLIMIT_FSIZE
// (SIGXCPU, SIGXFSZ), a real-time signal. `run` forwards them to its command, `acquire` stops
// at them; left to their default action they ended the tool where they landed, an acquire's
// key held for its whole ttl with nobody knowing the token, and `run`'s command running on
// without a lease (review 34: SIGALRM). Not among them: those of faults and debugging
// (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS), which the process raises itself,
// and SIGPIPE, which each command ignores.
inline const std::vector<int> kStopSignals = [] {
  std::vector<int> signals = {SIGINT,    SIGTERM, SIGHUP,  SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM,
                              SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO,   SIGPWR,  SIGSTKFLT};
  for (int signal = SIGRTMIN; signal <= SIGRTMAX; ++signal) signals.push_back(signal);
  return signals;
}();

// Those of `signals` the tool was not started ignoring. A blocked signal is queued even when
// ignored, so one the parent set to be ignored (nohup's SIGHUP, SIGINT and SIGQUIT of a
// script's background job) must not be blocked: it stays ignored, as without redlock.
[[nodiscard]] std::vector<int> not_ignored(const std::vector<int>& signals);

// Ends the process as if `signal` had killed it (default disposition, unblocked, raised), so
// that a shell running a script stops there as it does for a command killed by Ctrl-C
// (a script goes on after a command that exits 130). Call it after everything is cleaned up.
[[noreturn]] void die_of(int signal);

// "SIGTERM", "SIGRTMIN+3", or "signal N".
[[nodiscard]] std::string signal_name(int signal);

// Milliseconds from now until `when`, rounded up and at most a minute, for poll(); 0 if it
// has passed.
[[nodiscard]] int poll_timeout(std::chrono::steady_clock::time_point now, std::chrono::steady_clock::time_point when);

// Waits up to `timeout_ms` (-1: no limit) for a signal or a mailbox post.
void wait_for_either(const BlockedSignals& signals, const Mailbox& mailbox, int timeout_ms);

// `granted`, released because a signal came with it: Outcome::cancelled, and a message saying
// whether the release went through; the lock is kept only when it did not (its token is then
// the caller's only way to release it).
[[nodiscard]] redlock::Result released_at_signal(redlock::Client& client, redlock::Result granted);

// The acquire of settings.resource with settings.acquire, sent as first_attempt and then
// rest_of_acquire (commands.h), on the Client's async API. Each signal read meanwhile goes to
// `on_signal`, which returns it if it ends the acquire (0 if not; it may act on it: run's
// Ctrl-Z stops the tool). The attempt out is then cancelled (the library releases it), and a
// grant that came before the cancel is released here (released_at_signal). `interrupted`: that
// signal, or 0.
[[nodiscard]] redlock::Result acquire_interruptibly(redlock::Client& client, const Settings& settings,
                                                    const BlockedSignals& signals,
                                                    const std::shared_ptr<Mailbox>& mailbox,
                                                    const std::function<int(const signalfd_siginfo&)>& on_signal,
                                                    int& interrupted);

}  // namespace redlock_cli

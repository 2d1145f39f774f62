// cli/run.cpp — `redlock run RESOURCE -- command...`: acquire, run the command as a child
// process, extend the lease every ttl/3 while it runs, release when it exits.
//
// One thread supervises everything. SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked before
// the Client starts its event-loop thread (which inherits the mask) and are read from a
// signalfd; lock results come back from the loop thread through an eventfd. The main
// thread polls the two and keeps time against the lock's deadline, so it always notices
// a lost lock, a signal or the child's exit without waiting on anything else.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "commands.h"
#include "exit_codes.h"

extern char** environ;

namespace redlock_cli {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

std::string signal_name(int signal) {
  if (const char* abbrev = ::sigabbrev_np(signal)) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(signal);
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// Lock results handed from the library's loop thread to the main thread. Shared with the
// callbacks, so a late callback never touches freed memory.
class Mailbox {
 public:
  Mailbox() : fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd_.get() < 0) throw_errno("eventfd");
  }
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }

  static redlock::Callback callback(const std::shared_ptr<Mailbox>& mailbox) {
    return [mailbox](redlock::Result result) { mailbox->post(std::move(result)); };
  }

  void post(redlock::Result result) {
    {
      const std::lock_guard guard(mutex_);
      results_.push_back(std::move(result));
    }
    const std::uint64_t one = 1;
    if (::write(fd_.get(), &one, sizeof(one)) < 0) {
      // Only EAGAIN is possible (counter saturated), and then a wake-up is pending anyway.
    }
  }

  std::deque<redlock::Result> take() {
    std::uint64_t count = 0;
    if (::read(fd_.get(), &count, sizeof(count)) < 0) {
      // EAGAIN: nothing posted since the last take.
    }
    const std::lock_guard guard(mutex_);
    return std::exchange(results_, {});
  }

 private:
  Fd fd_;
  std::mutex mutex_;
  std::deque<redlock::Result> results_;
};

// Blocks the signals run handles (in this thread, and so in every thread started later)
// and reads them from a signalfd.
class SignalChannel {
 public:
  SignalChannel() : fd_(open()) {}
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  // The mask the process started with: what the child gets.
  [[nodiscard]] const sigset_t& original_mask() const noexcept { return original_; }

  std::vector<signalfd_siginfo> read_all() const {
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

 private:
  int open() {
    sigset_t set;
    sigemptyset(&set);
    for (const int signal : kForwardedSignals) sigaddset(&set, signal);
    sigaddset(&set, SIGCHLD);
    if (const int rc = ::pthread_sigmask(SIG_BLOCK, &set, &original_); rc != 0) {
      errno = rc;
      throw_errno("pthread_sigmask");
    }
    // An inherited SIG_IGN for SIGCHLD would make the kernel reap the child behind our back.
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    if (::sigaction(SIGCHLD, &action, nullptr) != 0) throw_errno("sigaction(SIGCHLD)");
    const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (fd < 0) throw_errno("signalfd");
    return fd;
  }

  sigset_t original_{};
  Fd fd_;
};

// posix_spawnp with the original signal mask and SIGCHLD back at its default. Returns the
// pid, or -errno when the command could not be started (not found, not executable, ...).
pid_t spawn(const std::vector<std::string>& program, const sigset_t& mask) {
  std::vector<char*> argv;
  argv.reserve(program.size() + 1);
  for (const auto& arg : program) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  posix_spawnattr_t attr;
  if (const int rc = ::posix_spawnattr_init(&attr); rc != 0) return -rc;
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGCHLD);
  ::posix_spawnattr_setsigmask(&attr, &mask);
  ::posix_spawnattr_setsigdefault(&attr, &defaults);
  ::posix_spawnattr_setflags(&attr, static_cast<short>(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF));
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), environ);
  ::posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -rc;
}

int spawn_failure_exit_code(int error) {
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return kExitNotFound;
    case EACCES:
    case EPERM:
    case ENOEXEC:
    case EISDIR:
    case ETXTBSY:
      return kExitCannotExecute;
    default:
      return kExitOsError;
  }
}

// Milliseconds from now until `when`, rounded up, for poll(); 0 if it has passed.
int poll_timeout(TimePoint now, TimePoint when) {
  if (when <= now) return 0;
  const auto wait = std::chrono::ceil<milliseconds>(when - now).count();
  return static_cast<int>(std::min<long long>(wait, 60'000));
}

class RunSession {
 public:
  RunSession(const Settings& settings, const Output& out) : settings_(settings), out_(out) {}
  int run();

 private:
  void poll_once(int timeout_ms) const;
  std::optional<int> acquire();  // the exit status if the lock was not acquired
  void supervise();
  void on_signal(const signalfd_siginfo& info);
  void on_extend(redlock::Result result);
  void reap();
  void lose(const std::string& why, const redlock::Result* result);
  int child_exit_code() const;
  void report(int code, const redlock::Result* release) const;
  std::string resource() const { return "'" + printable(settings_.resource) + "'"; }

  const Settings& settings_;
  const Output& out_;
  SignalChannel signals_;
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
  std::optional<redlock::Client> client_;  // last: built after the signals are blocked

  redlock::Result acquired_;
  redlock::Lock lock_;
  TimePoint next_extend_{};
  bool extend_in_flight_ = false;
  int extends_ = 0;
  bool lost_ = false;
  std::string lost_reason_;
  pid_t child_ = -1;
  std::optional<int> child_status_;  // waitpid status once it has exited
  std::vector<std::string> forwarded_;
};

void RunSession::poll_once(int timeout_ms) const {
  pollfd fds[2] = {{signals_.fd(), POLLIN, 0}, {mailbox_->fd(), POLLIN, 0}};
  if (::poll(fds, 2, timeout_ms) < 0 && errno != EINTR) throw_errno("poll");
}

int RunSession::run() {
  client_.emplace(settings_.client);  // its loop thread inherits the blocked signals
  warm_up(*client_);
  if (const auto failed = acquire()) return *failed;

  child_ = spawn(settings_.program, signals_.original_mask());
  if (child_ < 0) {
    const int error = -child_;
    const int code = spawn_failure_exit_code(error);
    const auto released = client_->release(lock_);
    if (!out_.json()) {
      out_.note("cannot run '" + printable(settings_.program.front()) + "': " + std::strerror(error));
    } else {
      auto object = result_json(acquired_, "run", settings_.resource, settings_.key);
      object["exit_code"] = code;
      object["error"] = std::string("cannot run '") + settings_.program.front() + "': " + std::strerror(error);
      object["release"] = result_json(released, "release", settings_.resource, settings_.key, lock_.token);
      Output::emit(stderr, object);
    }
    return code;
  }

  supervise();

  // The lock is released even after a loss: compare-and-delete removes only our own token.
  const redlock::Result released = client_->release(lock_);
  if (!released.ok() && !lost_ && !out_.json()) {
    out_.failure("could not release " + resource() + "; it expires by itself within the ttl", released);
  }
  const int code = lost_ ? kExitLost : child_exit_code();
  report(code, &released);
  return code;
}

std::optional<int> RunSession::acquire() {
  const auto id = client_->acquire_async(settings_.resource, Mailbox::callback(mailbox_), settings_.acquire);
  std::optional<redlock::Result> result;
  int interrupted = 0;
  while (!result) {
    poll_once(-1);
    for (const auto& info : signals_.read_all()) {
      const int signal = static_cast<int>(info.ssi_signo);
      if (signal != SIGCHLD && interrupted == 0) {
        interrupted = signal;
        client_->cancel(id);
      }
    }
    for (auto& mail : mailbox_->take()) result = std::move(mail);
  }
  acquired_ = std::move(*result);
  if (interrupted != 0) {
    if (acquired_.ok()) client_->release(*acquired_.lock);  // granted just before the cancel
    const int code = 128 + interrupted;
    if (!out_.json()) {
      out_.note("interrupted by " + signal_name(interrupted) + " while acquiring " + resource());
    } else {
      auto object = result_json(acquired_, "run", settings_.resource, settings_.key);
      object["exit_code"] = code;
      object["interrupted_by"] = signal_name(interrupted);
      Output::emit(stderr, object);
    }
    return code;
  }
  if (!acquired_.ok()) {
    const int code = exit_code_for(acquired_);
    if (out_.json()) {
      auto object = result_json(acquired_, "run", settings_.resource, settings_.key);
      object["exit_code"] = code;
      Output::emit(stderr, object);
    } else {
      out_.failure("could not acquire " + resource() + "; the command was not run", acquired_);
    }
    return code;
  }
  lock_ = *acquired_.lock;
  next_extend_ = lock_.started + lock_.ttl / 3;
  return std::nullopt;
}

void RunSession::supervise() {
  while (!child_status_) {
    int timeout = -1;
    if (!lost_) {
      const auto now = client_->now();
      timeout = extend_in_flight_ ? -1 : poll_timeout(now, lock_.deadline);
      if (!settings_.no_extend && !extend_in_flight_) timeout = std::min(timeout, poll_timeout(now, next_extend_));
    }
    poll_once(timeout);
    for (const auto& info : signals_.read_all()) on_signal(info);
    for (auto& result : mailbox_->take()) on_extend(std::move(result));
    if (child_status_ || lost_ || extend_in_flight_) continue;

    const auto now = client_->now();
    if (now >= lock_.deadline) {
      // No extend in flight, so nothing can renew the lease any more.
      lose(settings_.no_extend ? "the lease ran out while the command was still running (--no-extend)"
                               : "the lease ran out before an extend succeeded",
           nullptr);
    } else if (!settings_.no_extend && now >= next_extend_) {
      extend_in_flight_ = true;
      client_->extend_async(lock_, Mailbox::callback(mailbox_));
    }
  }
}

void RunSession::on_signal(const signalfd_siginfo& info) {
  const int signal = static_cast<int>(info.ssi_signo);
  if (signal == SIGCHLD) {
    reap();
    return;
  }
  // A signal from the kernel to the whole foreground process group (Ctrl-C, terminal
  // hangup) has reached the command already: forwarding it would deliver it twice.
  if (info.ssi_code == SI_KERNEL || child_status_) return;
  forwarded_.push_back(signal_name(signal));
  ::kill(child_, signal);
}

void RunSession::reap() {
  int status = 0;
  pid_t got = 0;
  do {
    got = ::waitpid(child_, &status, WNOHANG);
  } while (got < 0 && errno == EINTR);
  if (got == child_) child_status_ = status;
}

void RunSession::on_extend(redlock::Result result) {
  extend_in_flight_ = false;
  if (lost_) return;
  if (result.ok()) {
    lock_ = *result.lock;
    ++extends_;
    next_extend_ = lock_.started + lock_.ttl / 3;
    return;
  }
  if (result.outcome == redlock::Outcome::lost) {
    lose("an extend was refused: the key is gone or owned by another, or the masters that granted it restarted",
         &result);
    return;
  }
  // Transient (no quorum answered, or too late): retry soon while the current lease lasts.
  const auto left = std::chrono::duration_cast<milliseconds>(client_->remaining(lock_));
  next_extend_ = client_->now() + std::max(lock_.ttl / 10, milliseconds(10));
  if (!out_.json()) {
    out_.note("warning: extending " + resource() + " failed (" + std::string(redlock::to_string(result.outcome)) +
              (result.message.empty() ? "" : ": " + result.message) + "); retrying, " +
              std::to_string(left.count()) + " ms of the lease left");
  }
}

void RunSession::lose(const std::string& why, const redlock::Result* result) {
  lost_ = true;
  lost_reason_ = why;
  const bool alive = !child_status_.has_value();
  if (alive) ::kill(child_, SIGTERM);
  if (out_.json()) return;
  std::string text = "lost the lock on " + resource() + ": " + why;
  if (alive) text += "; sent SIGTERM to the command (pid " + std::to_string(child_) + "), will exit 75";
  if (result != nullptr) {
    out_.failure(text, *result);
  } else {
    out_.note(text);
  }
}

int RunSession::child_exit_code() const {
  const int status = child_status_.value_or(0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitSoftware;
}

void RunSession::report(int code, const redlock::Result* release) const {
  if (!out_.json()) return;
  auto object = result_json(acquired_, "run", settings_.resource, settings_.key);
  object["exit_code"] = code;
  object["extends"] = extends_;
  object["lock_lost"] = lost_;
  object["lost_reason"] = lost_ ? Json(lost_reason_) : Json(nullptr);
  const int status = child_status_.value_or(0);
  object["child"] = {
      {"pid", child_},
      {"exit_status", WIFEXITED(status) ? Json(WEXITSTATUS(status)) : Json(nullptr)},
      {"signal", WIFSIGNALED(status) ? Json(signal_name(WTERMSIG(status))) : Json(nullptr)},
  };
  object["forwarded_signals"] = forwarded_;
  if (release != nullptr) {
    object["release"] = result_json(*release, "release", settings_.resource, settings_.key, lock_.token);
  }
  Output::emit(stderr, object);
}

}  // namespace

int run_command(const Settings& settings, const Output& out) {
  RunSession session(settings, out);
  return session.run();
}

}  // namespace redlock_cli

// SPDX-License-Identifier: Apache-2.0
// cli/run.cpp — `redlock run RESOURCE -- command...`: acquire, run the command in a process
// group of its own, keep the lock with the library's lease (redlock::Lease, Client::keep:
// renewed every ttl/3 on the Client's loop thread) while any process of that group is left,
// release once the whole group is gone.
//
// One thread supervises everything. The signals run handles are blocked before the Client
// starts its event-loop thread (which inherits the mask) and are read from a signalfd; the
// acquire's result and the lease's loss signal (its on_lost callback) come from the loop
// thread through an eventfd. The main thread polls the two and keeps time against the
// lease's current deadline (Lease::deadline(), which moves on with each renewal), so it
// always notices a lost lock, a signal or the command's exit without waiting on anything else.
//
// Loss. Another client may take the lock from the moment its validity ends (the deadline),
// so the command's whole process group must be gone by then:
//   SIGTERM (then SIGCONT) to the group at  deadline - kill_after - margin  at the latest
//   (at once when the lease is lost: LossReason::taken, a renewal found the key gone or
//   someone else's; LossReason::restarted, the restart guard),
//   SIGKILL to the group at  min(SIGTERM + kill_after, deadline - margin),
// and redlock exits 75 only when no process of the group is left. The margin covers the
// kernel tearing the processes down and this thread waking up late. The lease's loss_margin
// is kill_after + margin, so its LossReason::deadline comes at the SIGTERM point; this thread
// also checks that point itself against Lease::deadline(), so the schedule holds even when it
// wakes before the loop thread has run the lease's timer (e.g. both continued after SIGSTOP).
//
// Priority. The command may keep every CPU busy; redlock's threads run at real-time priority
// where they may (take_realtime_priority), so that they wake at these points on time; the
// command runs at the normal policy. A kill sent at or after the deadline anyway (no
// privilege, or redlock was stopped) is reported as such (ran_past_deadline).
//
// Processes that leave the group (setsid, setpgid) are not covered: a process group is the
// unit the kernel lets us signal. redlock is a child subreaper, so such processes come back
// to it when their parents die; if any is still running at the end, it says so.
//
// Terminal. When redlock is a job of its own in the terminal's foreground (an interactive
// shell started it), the command's group is made the foreground group, as a shell does for a
// job: it reads the terminal and gets Ctrl-C / Ctrl-Z itself. When the command stops (Ctrl-Z),
// redlock SIGSTOPs the whole group (a process that ignores SIGTSTP must not run on unrenewed),
// takes the terminal back and stops too, so the shell sees the job stop; when it is
// continued (fg/bg) it continues the command. The lease is not renewed while redlock is
// stopped: SIGSTOP stops every thread of the process, the Client's loop thread (where the
// lease renews) included. If the lease ran out meanwhile, the group is killed before it runs
// again; if someone else continues the command meanwhile, a watchdog process kills the group
// at the deadline's SIGKILL point (stop_self).
//
// redlock gone. Killed while the command runs (SIGKILL, the OOM killer, a fault of its own),
// redlock renews and releases nothing any more, and the command would run on while the lock
// expires. A guardian process, forked as the command starts, kills the group as soon as
// redlock is gone without having said the group is done (start_guardian).
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "commands.h"
#include "exit_codes.h"
#include "interrupt.h"
#include "redlock/lease.h"
#include "secrets.h"

namespace redlock_cli {
namespace {

using std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;
using namespace std::chrono_literals;

// kStopSignals (interrupt.h) are forwarded to the command's process group. SIGTSTP and SIGCONT
// are forwarded too (job control).
// Blocked and read from the signalfd as well. SIGTTIN/SIGTTOU are only blocked: redlock never
// reads the terminal, a blocked SIGTTOU lets it write there from the background, and
// tcsetpgrp() from the background needs it blocked.
constexpr int kJobControlSignals[] = {SIGTSTP, SIGCONT, SIGTTIN, SIGTTOU};

// While the group still has processes whose exit redlock may not hear of (their parent is
// another process of the group), the group is checked this often.
constexpr milliseconds kGroupCheckInterval{100};

// The SIGKILL point's margin before the lock's deadline: ttl/20 within these bounds. It is the
// room for the kernel to tear the group down and for redlock to reap it. 100 busy loops on 2
// cores took 6 to 10 ms from SIGKILL to the group's end on a quiet machine, 6 to 15 ms beside a
// niced build and 20 ms in a CI run (ASan); with the 10 ms floor this had, a 300 ms ttl's 15 ms
// margin let the group outlive the lock (CliCpuLoadTest).
constexpr milliseconds kMinMargin{50};
constexpr milliseconds kMaxMargin{500};

[[noreturn]] void throw_errno(const char* what) { throw std::system_error(errno, std::generic_category(), what); }

// SIGKILL to a process group, then every thread of it raised to nice -20. A killed process
// runs no more of its own code, but the kernel tears it down only when the scheduler picks
// it, and a busy loop that had its share already waits behind the processes it starved:
// beside a niced build, groups of 100 busy loops ended 25 to 110 ms after SIGKILL in 5 of
// 50 runs (the last loop sat runnable for 84 ms while a nice-10 compiler ran); raised, at
// most 18 ms in 45. Needs CAP_SYS_NICE or RLIMIT_NICE (root has it); says whether the raise
// took. Only after the SIGKILL: never a running command at a raised priority. Async-signal-
// safe (the watchdog and the guardian call it in forked children).
bool kill_group(pid_t group) noexcept {
  ::kill(-group, SIGKILL);
  return ::setpriority(PRIO_PGRP, static_cast<id_t>(group), -20) == 0;
}

// When a forked watchdog sent its SIGKILL (CLOCK_MONOTONIC ns, 0: not yet), on a page shared
// with it: the report's sigkill_ns, which was the due time before (a review: a watchdog at the
// normal priority killed 129 to 170 ms after the deadline, reported as 30 ms before it).
class SharedKillTime {
 public:
  SharedKillTime() {
    void* page = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page != MAP_FAILED) ns_ = static_cast<std::int64_t*>(page);
  }
  SharedKillTime(const SharedKillTime&) = delete;
  SharedKillTime& operator=(const SharedKillTime&) = delete;
  ~SharedKillTime() {
    if (ns_ != nullptr) ::munmap(ns_, sizeof(std::int64_t));
  }
  void clear() noexcept {
    if (ns_ != nullptr) std::atomic_ref<std::int64_t>(*ns_).store(0);
  }
  // In the watchdog: async-signal-safe.
  void set_now() noexcept {
    if (ns_ == nullptr) return;
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    std::atomic_ref<std::int64_t>(*ns_).store(now.tv_sec * 1'000'000'000LL + now.tv_nsec);
  }
  [[nodiscard]] std::optional<std::chrono::steady_clock::time_point> get() const noexcept {
    if (ns_ == nullptr) return std::nullopt;
    const std::int64_t ns = std::atomic_ref<std::int64_t>(*ns_).load();
    if (ns <= 0) return std::nullopt;
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
  }

 private:
  std::int64_t* ns_ = nullptr;
};

// The command may keep every CPU busy (make -j): at the normal priority redlock then wakes up
// at its SIGKILL point only when the scheduler gets round to it (an outside review: 100 busy
// loops on 2 cores, the group killed 31 to 82 ms after the lock's deadline, 3 of 3, and not
// much better with the command at nice 19). Real-time priority (SCHED_FIFO, the lowest level)
// runs redlock's threads before any normal process whenever they wake; they sleep otherwise.
// Threads made after it (the Client's loop thread, which renews; the stderr writer) and the
// watchdog inherit it; the command is spawned at SCHED_OTHER, its nice value kept
// (spawn_command; not SCHED_RESET_ON_FORK, which would reset the loop thread too, and the nice
// value). Needs CAP_SYS_NICE or an RLIMIT_RTPRIO above 0 (root has it; systemd:
// LimitRTPRIO=1). A redlock started at real-time priority P gives the command P and takes P + 1
// (SCHED_OTHER for the command with SCHED_RESET_ON_FORK, as the flag asks); one started at
// SCHED_BATCH or SCHED_IDLE is left so, with the command.
struct Scheduling {
  std::string text;            // "realtime", "realtime (...)", or "normal (why)"
  bool above_command = false;  // redlock's threads preempt the command whatever it does
  bool command_set = false;    // spawn the command with command_policy/command_param
  int command_policy = SCHED_OTHER;
  sched_param command_param{};
};

std::string policy_text(int policy, int priority) {
  return std::string(policy == SCHED_RR ? "RR " : "FIFO ") + std::to_string(priority);
}

Scheduling take_realtime_priority() {
  Scheduling scheduling;
  sched_param current_param{};
  const int current = ::sched_getscheduler(0);
  if (current < 0 || ::sched_getparam(0, &current_param) != 0) {
    scheduling.text = std::string("normal (sched_getscheduler: ") + std::strerror(errno) + ")";
    return scheduling;
  }
  // chrt -R, systemd's CPUSchedulingResetOnFork: the policy comes with the flag (a review:
  // compared raw, FIFO 5 read as "started at SCHED_IDLE").
  const bool reset_on_fork = (current & SCHED_RESET_ON_FORK) != 0;
  const int policy = current & ~SCHED_RESET_ON_FORK;
  if (policy == SCHED_BATCH || policy == SCHED_IDLE) {
    // Chosen by whoever started us: posix_spawn could not give it back to the command (glibc
    // takes only OTHER, FIFO and RR), so both keep it.
    scheduling.text = "normal (started at " + std::string(policy == SCHED_BATCH ? "SCHED_BATCH" : "SCHED_IDLE") +
                      ", left so for the command)";
    return scheduling;
  }
  const bool realtime = policy == SCHED_FIFO || policy == SCHED_RR;
  // The command: at the normal policy, unless redlock was started real-time without
  // SCHED_RESET_ON_FORK: then it keeps that policy and priority, and redlock's threads go one
  // level above it (a review: both at FIFO 1, a command busy on every CPU starved redlock, and
  // its SIGKILL came 3.5 s after the deadline).
  scheduling.command_set = true;
  if (realtime && !reset_on_fork) {
    scheduling.command_policy = policy;
    scheduling.command_param = current_param;
  }
  sched_param param{};
  param.sched_priority = !realtime       ? ::sched_get_priority_min(SCHED_FIFO)
                         : reset_on_fork ? current_param.sched_priority
                                         : current_param.sched_priority + 1;
  const std::string started = realtime ? policy_text(policy, current_param.sched_priority) : "";
  if (realtime && !reset_on_fork && current_param.sched_priority >= ::sched_get_priority_max(SCHED_FIFO)) {
    scheduling.command_set = false;  // it inherits ours
    scheduling.text = "realtime (as started, " + started + ", which the command shares: nothing is above it)";
    return scheduling;
  }
  // Set without SCHED_RESET_ON_FORK, so that the loop thread made next inherits it.
  if (::sched_setscheduler(0, SCHED_FIFO, &param) != 0) {
    const std::string why = std::strerror(errno);
    scheduling.command_set = false;  // as started: it inherits ours, or the flag resets it
    scheduling.text = realtime ? "realtime (as started, " + started + "; could not go " +
                                     (reset_on_fork ? "without SCHED_RESET_ON_FORK, so the loop thread that renews "
                                                      "runs at the normal priority"
                                                    : "above the command, which shares it") +
                                     ": " + why + ")"
                               : "normal (sched_setscheduler SCHED_FIFO: " + why + ")";
    return scheduling;
  }
  scheduling.above_command = true;
  scheduling.text = !realtime ? "realtime"
                              : "realtime (" + policy_text(SCHED_FIFO, param.sched_priority) +
                                    ", above the command's " + (reset_on_fork ? "normal policy" : started) + ")";
  return scheduling;
}

bool is_forwarded(int signal) {
  return std::find(kStopSignals.begin(), kStopSignals.end(), signal) != kStopSignals.end();
}

std::string ms_text(std::chrono::nanoseconds value) {
  return std::to_string(std::chrono::duration_cast<milliseconds>(value).count()) + " ms";
}

std::int64_t monotonic_ns(TimePoint when) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
}

Json time_json(const std::optional<TimePoint>& when) { return when ? Json(monotonic_ns(*when)) : Json(nullptr); }

// The signals run handles: kStopSignals (forwarded to the command's group), job control
// and SIGCHLD, blocked (in this thread, and so in every thread started later) and read from a
// signalfd. Ignores SIGPIPE: a closed stderr must not kill redlock while the command runs on
// without a lease.
std::vector<int> run_signals() {
  std::vector<int> signals = not_ignored(kStopSignals);
  signals.insert(signals.end(), std::begin(kJobControlSignals), std::end(kJobControlSignals));
  signals.push_back(SIGCHLD);
  return signals;
}

class SignalChannel : public BlockedSignals {
 public:
  SignalChannel() : BlockedSignals(run_signals()) {
    sigemptyset(&defaults_);
    sigaddset(&defaults_, SIGCHLD);
    // An inherited SIG_IGN for SIGCHLD would make the kernel reap the children behind our back.
    struct sigaction action {};
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    if (::sigaction(SIGCHLD, &action, nullptr) != 0) throw_errno("sigaction(SIGCHLD)");
    struct sigaction previous {};
    action.sa_handler = SIG_IGN;
    if (::sigaction(SIGPIPE, &action, &previous) != 0) throw_errno("sigaction(SIGPIPE)");
    if (previous.sa_handler != SIG_IGN) sigaddset(&defaults_, SIGPIPE);  // an inherited SIG_IGN stays
  }
  // Signals whose disposition redlock changed from the default: the command gets the default.
  [[nodiscard]] const sigset_t& changed_to_default() const noexcept { return defaults_; }

 private:
  sigset_t defaults_{};
};

// The controlling terminal, if redlock has one.
class Terminal {
 public:
  Terminal() : fd_(::open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY)) {}
  [[nodiscard]] bool present() const noexcept { return fd_.get() >= 0; }
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] pid_t foreground() const { return present() ? ::tcgetpgrp(fd_.get()) : -1; }
  [[nodiscard]] bool ours() const { return present() && foreground() == ::getpgrp(); }
  // SIGTTOU is blocked, so this works from the background too.
  bool give_to(pid_t pgid) const { return present() && ::tcsetpgrp(fd_.get(), pgid) == 0; }

 private:
  Fd fd_;
};

// Whether redlock is the only (running) process of its process group: a job of its own, as
// an interactive shell starts it. In a script (the shell shares the group) or a pipeline
// (`redlock run ... | less`), the others in the group keep the terminal.
bool alone_in_process_group() {
  const pid_t group = ::getpgrp();
  const pid_t self = ::getpid();
  std::error_code error;
  for (std::filesystem::directory_iterator it("/proc", error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(name));
    if (pid == self) continue;
    const int fd = ::open(("/proc/" + name + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char buffer[1024];
    const ssize_t got = ::read(fd, buffer, sizeof(buffer) - 1);
    ::close(fd);
    if (got <= 0) continue;
    const std::string_view stat(buffer, static_cast<std::size_t>(got));
    const auto close = stat.rfind(')');  // the command name may contain anything
    if (close == std::string_view::npos || close + 2 >= stat.size()) continue;
    char state = 0;
    long ppid = 0;
    long pgrp = 0;
    if (std::sscanf(std::string(stat.substr(close + 2)).c_str(), "%c %ld %ld", &state, &ppid, &pgrp) != 3) continue;
    if (state != 'Z' && static_cast<pid_t>(pgrp) == group) return false;
  }
  return true;
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

// Reaps `pid`, a helper process of ours (the stop watchdog, the guardian) that has been told
// to exit: it does so at once, unless someone stopped it; after a second it gets SIGKILL, as
// it must not act later. Its wait status, or nullopt if it is not ours to reap.
std::optional<int> reap_helper(pid_t pid) noexcept {
  for (int waited_ms = 0;; waited_ms += 5) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, waited_ms <= 1000 ? WNOHANG : 0);
    if (got == pid) return status;
    if (got < 0 && errno != EINTR) return std::nullopt;
    if (waited_ms < 1000) {
      std::this_thread::sleep_for(milliseconds(5));
    } else if (waited_ms == 1000) {
      ::kill(pid, SIGKILL);
    }
  }
}

class RunSession {
 public:
  RunSession(const Settings& settings, const Output& out) : settings_(settings), out_(out) {}
  ~RunSession() { finish_guardian(); }
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;
  int run();
  // The signal that ended the acquire (run() then returned 128 + it), or 0.
  [[nodiscard]] int interrupted_while_acquiring() const noexcept { return interrupted_; }

 private:
  void check_kill_after();
  void poll_once(int timeout_ms) const;
  std::optional<int> acquire();  // the exit status if the lock was not acquired
  // A signal while acquiring: the signal that ends the acquire, or 0 (acquire_interruptibly).
  static int on_signal_while_acquiring(const signalfd_siginfo& info);
  // Hands the acquired lock to the library's lease, which renews it from now on (not with
  // --no-extend).
  void keep_lock();
  int spawn_command();           // 0, or the errno of a failed spawn
  void supervise();
  int next_timeout() const;
  void check_lease();
  void keep_time();
  void on_signal(const signalfd_siginfo& info);
  void reap();
  void on_command_stopped(int signal);
  void stop_self();
  int start_watchdog();
  void finish_watchdog();
  void note_watchdog_exit(int status);
  static constexpr int kWatchdogKilled = 3;  // the watchdog's exit status when it killed the group
  void start_guardian();
  void finish_guardian() noexcept;
  void continue_command();
  void check_group();
  void signal_group(int signal);
  void lose(const std::string& why);
  void check_still_held();
  void restore_terminal();
  redlock::Result release();
  // The lock's current deadline: the lease's (it moves on with each renewal), or with
  // --no-extend the acquire's.
  [[nodiscard]] TimePoint deadline() const { return lease_ ? lease_->deadline() : lock_.deadline; }
  [[nodiscard]] TimePoint sigterm_due() const { return deadline() - kill_after_ - margin_; }
  int child_exit_code() const;
  // The group may have run after the lock's deadline: killed only then (redlock stopped or
  // not scheduled), or its end noticed only then.
  [[nodiscard]] bool ran_past_deadline() const;
  void report(int code, const redlock::Result* release) const;
  std::string resource() const { return "'" + printable(settings_.resource) + "'"; }

  const Settings& settings_;
  const Output& out_;
  SignalChannel signals_;
  // Before every thread of ours: they inherit it (the stderr writer's lock is taken by the
  // supervisor too: at a lower priority, starved while holding it, it would hold that up).
  Scheduling scheduling_ = take_realtime_priority();
  // After signals_: its writer thread starts with them blocked. Destroyed after client_, whose
  // loop thread writes warnings through it.
  QueuedStderr stderr_queue_;
  Terminal terminal_;
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
  std::optional<redlock::Client> client_;  // last: built after the signals are blocked

  redlock::Result acquired_;
  std::vector<std::string> notes_;  // acquire_notes(): printed at once, or in the --json report
  int interrupted_ = 0;             // the signal that cancelled the acquire
  std::string error_;               // why the command could not be started
  redlock::Lock lock_;                   // as acquired (token and fence never change)
  std::optional<redlock::Lease> lease_;  // renews lock_ (none with --no-extend)
  milliseconds kill_after_{};
  milliseconds margin_{};
  // Successful renewals, counted by the lease's on_renewed on the loop thread.
  std::shared_ptr<std::atomic<int>> extends_ = std::make_shared<std::atomic<int>>(0);

  // The command: its first process, whose pid is also the process group's id.
  pid_t child_ = -1;
  std::optional<int> child_status_;  // waitpid status once it has exited (reaped)
  bool child_stopped_ = false;
  bool resume_after_stop_ = false;  // redlock was stopped with the command and has been continued
  pid_t watchdog_ = -1;              // the watchdog of the current stop, until reaped (stop_self)
  TimePoint watchdog_kill_at_{};     // when it was to SIGKILL the group (the Client's clock)
  SharedKillTime watchdog_killed_at_;  // when it did (steady_clock)
  bool watchdog_killed_ = false;     // a watchdog killed the group: the lock was lost
  pid_t guardian_ = -1;              // kills the group if redlock is gone (start_guardian), until reaped
  int guardian_pipe_ = -1;           // its pipe's write end: 'done', or its end when redlock is gone
  std::optional<TimePoint> group_gone_;
  bool job_control_ = false;     // redlock is a job of its own on its controlling terminal
  bool handed_terminal_ = false;  // the command's group was made the terminal's foreground group
  bool strays_ = false;           // processes that left the group still ran at the end

  bool lost_ = false;
  std::string lost_reason_;
  TimePoint kill_at_{};
  std::optional<TimePoint> sigterm_at_;
  std::optional<TimePoint> sigkill_at_;
  std::optional<bool> raised_after_sigkill_;  // the group was raised to nice -20 after redlock's SIGKILL (kill_group)
  // How many of each signal were forwarded to the command, by number: a count, not a list, so
  // that a signal sent again and again (a supervisor's SIGHUP; an outside review sent 757,783
  // SIGUSR1 in 20 s, 25 MB of names) costs no memory.
  std::array<std::uint64_t, NSIG> forwarded_{};
};

void RunSession::check_kill_after() {
  const auto ttl = client_->options().ttl;
  margin_ = std::clamp(ttl / 20, kMinMargin, kMaxMargin);
  kill_after_ = settings_.kill_after.value_or(ttl / 10);
  // SIGTERM must not come before the first renewal is even tried (ttl/3 after the grant),
  // and a grant or renewal lasts at most ttl - drift: kill_after + margin < 2/3 ttl - drift.
  // That is also the lease's rule for its loss_margin (kill_after + margin, keep_lock()),
  // checked here before anything is acquired so that a bad --kill-after is a usage error
  // naming it. In whole milliseconds it is never looser than the lease's (which takes ttl/3
  // in microseconds, rounded up: less than 1 ms more than ttl/3 here).
  const auto drift = std::chrono::ceil<milliseconds>(client_->drift(ttl));
  const milliseconds limit = ttl - drift - ttl / 3 - margin_;
  if (kill_after_ < limit) return;
  const std::string rule = "SIGTERM comes kill-after + " + std::to_string(margin_.count()) +
                           " ms (the margin) before the lock's deadline, which is at most " +
                           std::to_string((ttl - drift).count()) + " ms after each extend, and not before the first extend (" +
                           std::to_string((ttl / 3).count()) + " ms)";
  if (limit <= milliseconds(0)) {
    throw UsageError("--ttl " + std::to_string(ttl.count()) + "ms is too short for run: " + rule);
  }
  const std::string value = settings_.kill_after ? "'" + settings_.kill_after_text + "'"
                                                 : std::to_string(kill_after_.count()) + "ms (the default, ttl/10)";
  throw UsageError("--kill-after " + value + " is too long for --ttl " + std::to_string(ttl.count()) + "ms: " + rule +
                   "; with this ttl it can be at most " + std::to_string(limit.count() - 1) + "ms");
}

void RunSession::poll_once(int timeout_ms) const { wait_for_either(signals_, *mailbox_, timeout_ms); }

int RunSession::run() {
  client_.emplace(settings_.client);  // its loop thread inherits the blocked signals
  check_kill_after();
  // Orphans of the command (a grandchild whose parent died) become our children, so their
  // exits wake us up and we reap them; otherwise an unreaped zombie would keep the group alive.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) throw_errno("prctl(PR_SET_CHILD_SUBREAPER)");
  warm_up(*client_, settings_.acquire.fencing);
  if (const auto failed = acquire()) return *failed;

  if (client_->now() >= sigterm_due()) {
    // Granted so late that the command would have to be stopped as soon as it started.
    const auto released = client_->release(lock_);
    lost_ = true;
    lost_reason_ = "the lease left after the acquire is shorter than --kill-after + margin; the command was not started";
    if (!out_.json()) out_.note("lost the lock on " + resource() + ": " + lost_reason_);
    report(kExitLost, &released);
    return kExitLost;
  }
  keep_lock();
  if (!scheduling_.above_command && !out_.json()) {
    out_.note("runs at " + scheduling_.text +
              ": a command that keeps every CPU busy can delay its SIGKILL past the lock's deadline (cli/README.md, "
              "\"When the lock is lost\")");
  }

  if (const int error = spawn_command(); error != 0) {
    const int code = spawn_failure_exit_code(error);
    const auto released = release();
    error_ = "cannot run '" + printable(settings_.program.front()) + "': " + std::strerror(error);
    if (!out_.json()) out_.note(error_);
    report(code, &released);
    return code;
  }
  start_guardian();

  try {
    supervise();
  } catch (...) {
    // Nothing watches the command any more (poll failed, or memory ran out): it must not run
    // on under a lock that nobody watches. Killed, and released only once the whole group is
    // gone, as on the normal path (a process in uninterruptible sleep dies when its I/O ends
    // and could still write after a release); the lease renews meanwhile. Then reported
    // (exit 70) by the caller.
    check_group();
    signal_group(SIGKILL);
    restore_terminal();
    while (!group_gone_) {
      reap();
      check_group();
      if (!group_gone_) std::this_thread::sleep_for(milliseconds(10));
    }
    finish_guardian();
    try {
      release();
    } catch (...) {
    }
    throw;
  }
  restore_terminal();

  if (!lost_ && client_->now() < deadline()) check_still_held();
  // The lock is released even after a loss: compare-and-delete removes only our own token.
  const redlock::Result released = release();
  if (!released.ok() && !lost_ && !out_.json()) {
    out_.failure("could not release " + resource() + "; it expires by itself within the ttl", released);
  }
  const int code = lost_ ? kExitLost : child_exit_code();
  report(code, &released);
  return code;
}

// Ctrl-Z while acquiring stops redlock (nothing runs under the lock yet); a forwarded signal
// ends the acquire.
int RunSession::on_signal_while_acquiring(const signalfd_siginfo& info) {
  const int signal = static_cast<int>(info.ssi_signo);
  if (signal == SIGTSTP) {
    ::kill(::getpid(), SIGSTOP);
    return 0;
  }
  return is_forwarded(signal) ? signal : 0;
}

std::optional<int> RunSession::acquire() {
  acquired_ = acquire_interruptibly(*client_, settings_, signals_, mailbox_, on_signal_while_acquiring, interrupted_);
  notes_ = acquire_notes(acquired_, settings_);
  if (interrupted_ != 0) {
    const int code = 128 + interrupted_;
    if (!out_.json()) {
      out_.note("interrupted by " + signal_name(interrupted_) + " while acquiring " + resource() + ": " +
                acquired_.message);
    }
    report(code, nullptr);
    return code;
  }
  if (!acquired_.ok()) {
    const int code = exit_code_for(acquired_, settings_.conflict_exit_code);
    if (!out_.json()) {
      if (!(settings_.conflict_silent && exit_code_for(acquired_) == kExitTaken)) {
        out_.failure("could not acquire " + resource() + "; the command was not run", acquired_);
      }
      for (const auto& note : notes_) out_.note(note);
    }
    report(code, nullptr);
    return code;
  }
  if (!out_.json()) {
    for (const auto& note : notes_) out_.note(note);
  }
  lock_ = *acquired_.lock;
  return std::nullopt;
}

void RunSession::keep_lock() {
  if (settings_.no_extend) return;
  redlock::LeaseOptions options;
  options.renew_fraction = 1.0 / 3;
  // The lease says "deadline" at the SIGTERM point, so its loss signal and run's schedule
  // are one and the same moment (check_kill_after() has checked that the lease accepts it).
  options.loss_margin = kill_after_ + margin_;
  // On the loop thread, at most once: wake the supervisor, which asks the lease why.
  options.on_lost = [mailbox = mailbox_](redlock::LossReason, const redlock::Lock&) { mailbox->notify(); };
  // Only counted (the `extends` of --json): the supervisor reads the moved deadline itself.
  options.on_renewed = [extends = extends_](const redlock::Result&) { extends->fetch_add(1); };
  try {
    lease_.emplace(client_->keep(lock_, std::move(options)));
  } catch (...) {
    client_->release(lock_);  // not kept: nobody would renew or release it
    throw;
  }
}

redlock::Result RunSession::release() {
  // Lease::release stops the renewal first, then releases the lock as of its last renewal.
  return lease_ ? lease_->release() : client_->release(lock_);
}

// posix_spawnp into a new process group (POSIX_SPAWN_SETPGROUP, pgid = its pid), with the
// original signal mask, the dispositions redlock changed back at their defaults, and the
// environment of command_environment(). As a job of its own in the terminal's foreground,
// the command's group is made the foreground group before exec (glibc's tcsetpgrp file
// action), so it never finds itself in the background.
int RunSession::spawn_command() {
  std::vector<char*> argv;
  argv.reserve(settings_.program.size() + 1);
  for (const auto& arg : settings_.program) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = command_environment(
      settings_, lock_.token, settings_.acquire.fencing ? std::optional<std::uint64_t>(lock_.fence) : std::nullopt);
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (auto& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  job_control_ = terminal_.present() && alone_in_process_group();
  const bool take_terminal = job_control_ && terminal_.ours();
  for (const bool with_terminal : {take_terminal, false}) {
    posix_spawnattr_t attr;
    if (const int rc = ::posix_spawnattr_init(&attr); rc != 0) return rc;
    posix_spawn_file_actions_t actions;
    if (const int rc = ::posix_spawn_file_actions_init(&actions); rc != 0) {
      ::posix_spawnattr_destroy(&attr);
      return rc;
    }
    ::posix_spawnattr_setsigmask(&attr, &signals_.original_mask());
    ::posix_spawnattr_setsigdefault(&attr, &signals_.changed_to_default());
    ::posix_spawnattr_setpgroup(&attr, 0);
    // The command's policy (take_realtime_priority): where redlock changed its own, the one it
    // was started with or SCHED_OTHER; the nice value stays.
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP;
    if (scheduling_.command_set) {
      ::posix_spawnattr_setschedpolicy(&attr, scheduling_.command_policy);
      ::posix_spawnattr_setschedparam(&attr, &scheduling_.command_param);
      flags = static_cast<short>(flags | POSIX_SPAWN_SETSCHEDULER);
    }
    ::posix_spawnattr_setflags(&attr, flags);
    if (with_terminal) ::posix_spawn_file_actions_addtcsetpgrp_np(&actions, terminal_.fd());
    pid_t pid = -1;
    const int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
    ::posix_spawn_file_actions_destroy(&actions);
    ::posix_spawnattr_destroy(&attr);
    if (rc == 0) {
      child_ = pid;
      handed_terminal_ = with_terminal;
      return 0;
    }
    // The terminal step can fail if the terminal changed hands meanwhile: then without it.
    // (A failed spawn ran nothing of the command, so trying again is safe.)
    if (!with_terminal) return rc;
  }
  return EINVAL;  // not reached
}

void RunSession::supervise() {
  while (!group_gone_) {
    poll_once(next_timeout());
    for (const auto& info : signals_.read_all()) on_signal(info);
    mailbox_->take();  // only wake-ups from the lease now: check_lease() asks it
    // The group's end first: after a watchdog's kill the leader may be reaped already, and
    // nothing may signal its group id then (it may be reused).
    check_group();
    if (watchdog_killed_ && !lost_) {
      // Before the lease's own loss reaches us: the watchdog's is the reason, and its kill.
      std::string why =
          "redlock was stopped past the lock's SIGKILL point while the command ran; its watchdog killed "
          "the group";
      if (sigkill_at_ && *sigkill_at_ >= deadline()) {
        why += ", " + ms_text(*sigkill_at_ - deadline()) +
               " AFTER the lock's deadline (it was stopped too, or not scheduled in time): another holder may "
               "have run beside the command";
      }
      lose(why);
    }
    check_lease();
    keep_time();
    if (resume_after_stop_) {
      // redlock was stopped with the command and is running again. keep_time() has just
      // killed the group if the lease ran out meanwhile; otherwise the command continues.
      resume_after_stop_ = false;
      if (!group_gone_ && !sigkill_at_) continue_command();
    }
  }
  // The group is gone, and its id may be reused from now on: the guardian must not kill it.
  // Reaped before the strays are looked for, which it would be counted among.
  finish_guardian();
  // Processes that left the group but were handed to us (subreaper) and still run: after
  // reaping whatever has exited, waitpid() says 0 only when children are left.
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0 || (pid < 0 && errno == EINTR)) continue;
    strays_ = pid == 0;
    break;
  }
  if (strays_ && !out_.json()) {
    out_.note("warning: processes the command started left its process group (setsid/setpgid) and still run; "
              "the lock does not cover them");
  }
}

int RunSession::next_timeout() const {
  const auto now = client_->now();
  int timeout = -1;
  const auto until = [&](TimePoint when) {
    const int ms = poll_timeout(now, when);
    timeout = timeout < 0 ? ms : std::min(timeout, ms);
  };
  if (!lost_) {
    // The lease wakes us up when it is lost; this is the SIGTERM point of its current
    // deadline (after a renewal, waking up there finds the new one and sleeps on).
    until(sigterm_due());
  } else if (!sigkill_at_) {
    until(kill_at_);
  }
  // The first process is gone, others of the group are not: not every exit reaches us.
  if (child_status_) until(now + kGroupCheckInterval);
  return timeout;
}

// Why the lease was lost, in the words of lost_reason / the stderr note.
std::string loss_text(redlock::LossReason reason) {
  switch (reason) {
    case redlock::LossReason::taken:
      return "a renewal was refused: the key is gone or owned by another on a quorum of masters (lease lost: taken)";
    case redlock::LossReason::restarted:
      return "masters that granted it restarted without their keys or were made replicas (a resync replaces "
             "their keys), leaving fewer than a quorum (restart guard; lease lost: restarted)";
    case redlock::LossReason::deadline:
      break;
  }
  return "no renewal succeeded and the lease is about to run out (lease lost: deadline)";
}

void RunSession::check_lease() {
  if (!lease_ || lost_) return;
  if (const auto reason = lease_->loss()) lose(loss_text(*reason));
}

void RunSession::keep_time() {
  if (group_gone_) {
    // Its end may have been noticed late (redlock stopped, or not scheduled): when only at
    // the SIGKILL point or after, the command may have run on past it, which redlock exists
    // to prevent, so it counts as lost; before it, the command ended inside the lock
    // (CliTest.ACommandThatOutlivedTheLockWhileRedlockWasStoppedExits75).
    if (!lost_ && *group_gone_ >= deadline() - margin_) {
      lose("the command's end was noticed only " + ms_text(*group_gone_ - (deadline() - margin_)) +
           " after the lock's SIGKILL point (redlock was stopped or not scheduled meanwhile): it may have run "
           "while the lock expired (lease lost: deadline)");
    }
    return;
  }
  const auto now = client_->now();
  if (!lost_ && now >= sigterm_due()) {
    // The lease signals LossReason::deadline at this very moment; this thread may just have
    // woken up first (a renewal may still be in flight, but its answer could come too late
    // to stop the group in time): the loss is decided now.
    lose(settings_.no_extend ? "the lease is about to run out (--no-extend)"
                             : loss_text(redlock::LossReason::deadline));
  }
  if (lost_ && !sigkill_at_ && now >= kill_at_) {
    signal_group(SIGKILL);
    sigkill_at_ = now;
    if (!out_.json()) {
      const std::string when = now < deadline() ? ms_text(deadline() - now) + " before the lock's deadline"
                                                : ms_text(now - deadline()) +
                                                      " AFTER the lock's deadline (redlock was stopped or not "
                                                      "scheduled in time): another holder may have run beside the "
                                                      "command";
      out_.note("the command's process group was still running " + std::to_string(kill_after_.count()) +
                " ms after SIGTERM or at the kill margin; sent SIGKILL, " + when);
    }
  }
}

void RunSession::on_signal(const signalfd_siginfo& info) {
  const int signal = static_cast<int>(info.ssi_signo);
  if (signal == SIGCHLD) {
    reap();
    return;
  }
  if (group_gone_ || signal == SIGTTIN || signal == SIGTTOU) return;
  if (signal == SIGCONT) {
    continue_command();
    return;
  }
  // Sent to redlock (kill, a script's shell, the terminal when the command's group is not the
  // foreground one): it is meant for the command. The terminal never sends it twice: when the
  // command's group is the foreground group, redlock's is not.
  if (signal > 0 && signal < NSIG) ++forwarded_[static_cast<std::size_t>(signal)];
  signal_group(signal);
  // A stopped group would only get a terminating signal once continued (as a shell's kill does).
  // Not for those that programs commonly catch for their own use (dd's SIGUSR1, a profiler's
  // SIGPROF, real-time signals): those wait for whoever continues it.
  const bool usually_caught = signal == SIGUSR1 || signal == SIGUSR2 || signal == SIGVTALRM || signal == SIGPROF ||
                              signal == SIGIO || (signal >= SIGRTMIN && signal <= SIGRTMAX);
  if (child_stopped_ && signal != SIGTSTP && !usually_caught) signal_group(SIGCONT);
}

void RunSession::reap() {
  for (;;) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) return;
    if (pid == watchdog_ && (WIFEXITED(status) || WIFSIGNALED(status))) {
      note_watchdog_exit(status);
      continue;
    }
    if (pid == guardian_ && (WIFEXITED(status) || WIFSIGNALED(status))) {
      guardian_ = -1;  // killed by someone: redlock's own end is unguarded from now on
      continue;
    }
    if (pid != child_) continue;  // an orphan of the command's, handed to us as subreaper: reaped
    if (WIFSTOPPED(status)) {
      on_command_stopped(WSTOPSIG(status));
    } else if (WIFCONTINUED(status)) {
      child_stopped_ = false;
    } else {
      child_status_ = status;
      child_stopped_ = false;
      // Reaped as the group's last process, its id is free for reuse from here on: the
      // guardian must not kill it, so it is told at once, not at the loop's next turn.
      check_group();
      if (group_gone_) finish_guardian();
    }
  }
}

void RunSession::on_command_stopped(int signal) {
  child_stopped_ = true;
  // A loss the lease has declared, or a deadline already passed, is acted on now, not after
  // a stop (the watchdog would wait for the SIGKILL point).
  check_lease();
  keep_time();
  if (!terminal_.present() || lost_) return;  // no job control: keep the lease; SIGCONT continues it
  if ((signal == SIGTTIN || signal == SIGTTOU) && terminal_.ours()) {
    // The command wants the terminal, and redlock's job has it to give (e.g. in a script).
    if (terminal_.give_to(child_)) {
      handed_terminal_ = true;
      signal_group(SIGCONT);
      return;
    }
  }
  // A job-control stop (Ctrl-Z), or terminal access from the background: the whole job stops,
  // so the shell above gets the terminal back and can continue it with fg or bg. A stopped
  // redlock renews nothing (SIGSTOP stops the lease's loop thread with it), so no process of
  // the group may run on meanwhile: SIGSTOP (which cannot be ignored) also stops those that
  // ignore or catch SIGTSTP.
  signal_group(SIGSTOP);
  if (handed_terminal_ && terminal_.foreground() == child_) terminal_.give_to(::getpgrp());
  stop_self();
}

void RunSession::stop_self() {
  const int watchdog = start_watchdog();
  if (watchdog < 0 && !group_gone_) {
    // Unguarded, a stopped redlock could not stop a command someone continues: stay running
    // and renewing, with the command stopped. The shell does not see the job stop.
    const int error = errno;
    if (!out_.json()) {
      out_.note("could not start the watchdog a stop needs (" + std::string(std::strerror(error)) +
                "): redlock keeps running and renewing; the command stays stopped until it is continued "
                "(kill -CONT -" + std::to_string(child_) + ")");
    }
    return;
  }
  // SIGSTOP: our SIGTSTP is blocked. Execution goes on here once we are continued.
  ::kill(::getpid(), SIGSTOP);
  resume_after_stop_ = true;
  if (watchdog >= 0) {
    // "Continued": it ends at once. (An end of the pipe without it means redlock is gone.)
    const char continued = 'c';
    while (::write(watchdog, &continued, 1) < 0 && errno == EINTR) {
    }
    ::close(watchdog);
    finish_watchdog();
  }
}

// Reaps the watchdog now, before anything else of this pass: what it did is known before the
// group's end is looked at, and it is never left to look like a process that left the group.
void RunSession::finish_watchdog() {
  // Its pipe is closed: it exits at once, unless someone stopped it.
  if (watchdog_ <= 0) return;
  if (const auto status = reap_helper(watchdog_)) {
    note_watchdog_exit(*status);
  } else {
    watchdog_ = -1;  // not ours any more
  }
}

void RunSession::note_watchdog_exit(int status) {
  watchdog_ = -1;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kWatchdogKilled) {
    watchdog_killed_ = true;
    if (!sigkill_at_) {
      // The report's sigkill_ns: when it was sent (if that is unknown, now: it was by then).
      const auto sent = watchdog_killed_at_.get();
      sigkill_at_ = sent ? client_->now() + (*sent - std::chrono::steady_clock::now()) : client_->now();
    }
  }
}

// A stopped redlock renews nothing, and it cannot tell whether the command runs: whoever
// stopped the command (a program that stops itself with SIGSTOP on Ctrl-Z, like nano; an
// operator's kill -STOP or -TSTP; a CPU throttler) may continue it, not our shell, and it would
// run on past the lock's deadline. A watchdog process forked just before the stop (SIGSTOP
// stops this process alone, not its children) SIGKILLs the group at the SIGKILL point of the
// deadline as of now, unless we say first that we were continued
// (CliTest.ACommandContinuedBehindAStoppedRedlockIsKilledBeforeTheDeadline). If the pipe ends
// without that, redlock is gone (SIGKILL while stopped): nothing will renew, release or stop
// the group, which anyone (the kernel, for an orphaned stopped group) may continue, so it
// kills the group at once (CliTest.ARedlockKilledWhileItsJobIsStoppedTakesTheCommandWithIt).
// Returns the pipe's write end, or -1 if no watchdog could start (the stop is then unguarded).
int RunSession::start_watchdog() {
  if (group_gone_) return -1;
  // The SIGKILL point on CLOCK_MONOTONIC (steady_clock), fixed before the fork: the child's
  // own start (the fork's copy, its first run) must not push it later.
  watchdog_kill_at_ = deadline() - margin_;
  const auto kill_at = std::chrono::steady_clock::now() + (watchdog_kill_at_ - client_->now());
  const long long kill_at_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kill_at.time_since_epoch()).count();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return -1;
  const pid_t group = child_;
  // The first process may have left the group (signal_group): it gets the SIGKILL itself too.
  // Its pid cannot be reused meanwhile: it is redlock's unreaped child, and redlock reaps
  // nothing before the watchdog is gone (stop_self, finish_watchdog).
  const pid_t first = child_status_ ? -1 : child_;
  const int guardian_pipe = guardian_pipe_;
  watchdog_killed_at_.clear();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child of a threaded process: async-signal-safe calls only. The group's id stays
    // ours while we are stopped: its first process is our child, unreaped. A group of its
    // own: a stop aimed at redlock's job (kill -STOP %1) must not stop it too.
    ::setpgid(0, 0);
    ::close(fds[1]);
    if (guardian_pipe >= 0) ::close(guardian_pipe);  // redlock's end alone tells the guardian
    for (;;) {
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      const long long left_ns = kill_at_ns - (now.tv_sec * 1'000'000'000LL + now.tv_nsec);
      if (left_ns <= 0) break;
      pollfd end{fds[0], POLLIN, 0};
      const long long wait_ms = std::min<long long>(left_ns / 1'000'000, 1'000'000);  // rounded down
      const int ready = ::poll(&end, 1, static_cast<int>(wait_ms));
      if (ready < 0 && errno != EINTR) ::_exit(0);
      if (ready <= 0) continue;
      char said = 0;
      const ssize_t got = ::read(fds[0], &said, 1);
      if (got < 0 && errno == EINTR) continue;
      if (got == 1) ::_exit(0);  // continued
      break;                     // redlock is gone
    }
    kill_group(group);
    if (first > 0) ::kill(first, SIGKILL);
    watchdog_killed_at_.set_now();
    ::_exit(kWatchdogKilled);
  }
  ::close(fds[0]);
  if (pid < 0) {
    ::close(fds[1]);
    return -1;
  }
  watchdog_ = pid;
  return fds[1];
}

// The guardian (see the top of this file): forked as the command starts, it holds the read end
// of a pipe only redlock writes to. 'done' (finish_guardian, once the group is gone) ends it;
// the pipe's end without it means redlock is gone, and it SIGKILLs the group at once, and the
// first process should it have left the group
// (CliTest.ARedlockKilledWhileTheCommandRunsTakesTheCommandWithIt).
// The ids are safe to signal then: the group's id is not reused while a process of the group
// exists, nor the first process's while it or its unreaped zombie does. One window is left,
// from the group's end to redlock's 'done': microseconds when the first process was the last
// (reap says it at once), up to kGroupCheckInterval when others outlived it, and the whole of
// a stop of redlock's (kill -STOP, a debugger) that began before. Should redlock be killed
// within it and the id be reused within it (the pids wrapped around meanwhile), the id would
// be another's: review 36 built it in a PID namespace (the first process exited, the rest of
// its group ended while redlock was stopped, a new group took the id, then kill -9 of redlock:
// the new group was killed, 3 of 3). redlock itself, continued after such a stop, would take
// that group for the command's too (check_group). Not closed yet.
// It keeps no other descriptor: a Redis socket held open in it would outlive redlock's own
// close of it (the master would not see the connection end), and stdout or stderr held open
// would keep a reader waiting. It ignores the signals redlock handles (they stay blocked in
// it: `pkill redlock` is forwarded to the command by redlock, whose 'done' then ends the
// guardian), and runs at redlock's priority.
void RunSession::start_guardian() {
  int fds[2];
  // Said in --json too (its notes): a review saw a failed fork there leave no trace, and the
  // command ran on after kill -9 while another client was granted the lock.
  const auto unguarded = [&](const char* call, int error) {
    const std::string note = std::string("could not start the guardian process (") + call + ": " +
                             std::strerror(error) +
                             "): if redlock is killed, the command runs on while the lock expires";
    if (out_.json()) {
      notes_.push_back(note);
    } else {
      out_.note(note);
    }
  };
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    unguarded("pipe", errno);
    return;
  }
  const pid_t group = child_;
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child of a threaded process: async-signal-safe calls only.
    ::setpgid(0, 0);  // a group of its own: no signal aimed at redlock's job or the command's reaches it
    // And a name of its own: `killall -9 redlock` or `pkill redlock` (which match the name)
    // killed it with redlock, and the command ran on unguarded. `pkill -f` still matches.
    ::prctl(PR_SET_NAME, "rl-guardian", 0, 0, 0);
    const int end = fds[0];
    const bool closed = (end == 0 || ::close_range(0, static_cast<unsigned>(end - 1), 0) == 0) &&
                        ::close_range(static_cast<unsigned>(end) + 1, ~0U, 0) == 0;
    if (!closed) {  // no close_range (a seccomp filter, an old kernel): one at a time
      rlimit files{};
      const rlim_t limit = ::getrlimit(RLIMIT_NOFILE, &files) == 0 ? files.rlim_cur : 1024;
      for (rlim_t fd = 0; fd < limit && fd < (rlim_t{1} << 20); ++fd) {
        if (static_cast<int>(fd) != end) ::close(static_cast<int>(fd));
      }
    }
    for (;;) {
      char said = 0;
      const ssize_t got = ::read(end, &said, 1);
      if (got < 0 && errno == EINTR) continue;
      if (got == 1) ::_exit(0);  // done
      break;                     // redlock is gone (or the pipe failed: the same, for all we know)
    }
    kill_group(group);
    ::kill(group, SIGKILL);
    ::_exit(1);
  }
  ::close(fds[0]);
  if (pid < 0) {
    const int error = errno;
    ::close(fds[1]);
    unguarded("fork", error);
    return;
  }
  guardian_ = pid;
  guardian_pipe_ = fds[1];
}

void RunSession::finish_guardian() noexcept {
  if (guardian_pipe_ >= 0) {
    const char done = 'd';
    while (::write(guardian_pipe_, &done, 1) < 0 && errno == EINTR) {
    }
    ::close(std::exchange(guardian_pipe_, -1));
  }
  // It exits at once, unless someone stopped it.
  if (guardian_ > 0) (void)reap_helper(std::exchange(guardian_, -1));
}

void RunSession::continue_command() {
  if (lost_ && client_->now() >= kill_at_) return;  // SIGKILL is due: it must not run again
  if (job_control_ && terminal_.ours() && terminal_.give_to(child_)) handed_terminal_ = true;
  signal_group(SIGCONT);
}

void RunSession::check_group() {
  // While the first process exists (even as a zombie) the group does.
  if (!child_status_ || group_gone_) return;
  if (::kill(-child_, 0) != 0 && errno == ESRCH) group_gone_ = client_->now();
}

void RunSession::signal_group(int signal) {
  // Never after the group is gone: its id may be reused by an unrelated group.
  if (group_gone_) return;
  if (signal == SIGKILL) {
    const bool raised = kill_group(child_);
    if (!raised_after_sigkill_) raised_after_sigkill_ = raised;
  } else {
    ::kill(-child_, signal);
  }
  // The first process may have left its group (setpgid to another group of the session): it
  // is still ours, unreaped, and it is what redlock waits for and renews the lock for, so it
  // gets the signal itself (a review: never signalled, it ran on after the loss).
  if (!child_status_ && ::getpgid(child_) != child_) ::kill(child_, signal);
}

void RunSession::lose(const std::string& why) {
  lost_ = true;
  lost_reason_ = why;
  const auto now = client_->now();
  const auto ends = deadline();
  kill_at_ = std::min(now + kill_after_, ends - margin_);
  std::string text = "lost the lock on " + resource() + ": " + why;
  if (!group_gone_) {
    const std::string group = "the command's process group " + std::to_string(child_);
    if (now >= kill_at_) {
      // No time for SIGTERM (--kill-after 0, or redlock was stopped past the point).
      signal_group(SIGKILL);
      if (!sigkill_at_) sigkill_at_ = now;  // a watchdog's kill came first
      text += "; sent SIGKILL to " + group;
    } else {
      signal_group(SIGTERM);
      signal_group(SIGCONT);  // a stopped process acts on SIGTERM only once continued
      sigterm_at_ = now;
      text += "; sent SIGTERM to " + group + ", SIGKILL in " + ms_text(kill_at_ - now) + " if it is still running";
    }
    text += now < ends
                ? " (the lock's validity ends in " + ms_text(ends - now) + "); will exit 75"
                : " (the lock's validity ended " + ms_text(now - ends) +
                      " ago: redlock was stopped or not scheduled in time, and another holder may have run beside "
                      "the command); will exit 75";
  } else {
    text += "; will exit 75";
  }
  if (!out_.json()) out_.note(text);
}

// A loss is seen at the next renewal: a command that ended before it (the key deleted, taken
// over or lost with its masters meanwhile) would exit with its own status, although another
// holder may have run beside it (a review: exit 0, "ok": true, an overlap of 1.1 s). Once the
// command has ended, before the deadline, one more extend tells: it succeeds only where our
// token still is, and fails once it is gone from more masters than a quorum can spare. (The
// release cannot tell: it is decided as soon as a quorum no longer holds the token, whoever
// removed it, with the slower masters' rows pending; reading it missed 4 of 6 such losses.)
// An extend that fails for want of answers (timeouts) proves nothing and is not a loss.
void RunSession::check_still_held() {
  const redlock::Result held = client_->extend(lock_);
  if (held.ok()) return;
  const std::size_t gone =
      held.count(redlock::MasterStatus::not_found) + held.count(redlock::MasterStatus::held_by_other);
  if (gone <= client_->size() - client_->quorum()) return;
  lost_ = true;
  lost_reason_ = "at the command's end, before the lock's deadline, its token was gone from " + std::to_string(gone) +
                 " of " + std::to_string(client_->size()) +
                 " masters: the lock was deleted, taken over or lost with its masters while the command ran, and "
                 "another holder may have run beside it";
  if (!out_.json()) out_.note("lost the lock on " + resource() + ": " + lost_reason_ + "; will exit 75");
}

void RunSession::restore_terminal() {
  // The terminal still names the (now empty) group we gave it to: take it back for our job.
  if (handed_terminal_ && terminal_.foreground() == child_) terminal_.give_to(::getpgrp());
}

int RunSession::child_exit_code() const {
  const int status = child_status_.value_or(0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kExitSoftware;
}

bool RunSession::ran_past_deadline() const {
  if (!lost_ || child_ <= 0) return false;
  // Killed: by then (a process in uninterruptible sleep outlives it: README, Limits). Not
  // killed (it ended by itself, or at SIGTERM): when its end was noticed, which errs late (a
  // review: with the group found gone after the deadline counted even when the SIGKILL had come
  // in time, a stop that outlasted the lock always read as "ran past").
  if (sigkill_at_) return *sigkill_at_ >= deadline();
  return group_gone_ && *group_gone_ >= deadline();
}

void RunSession::report(int code, const redlock::Result* release) const {
  if (!out_.json()) return;
  auto object = result_json(acquired_, "run", settings_.resource, settings_.key);
  if (lost_) {
    // The acquire's outcome would say "acquired", ok: a script testing `.ok` must not read a
    // run that lost its lock (exit 75) as a success.
    object["outcome"] = "lost";
    object["ok"] = false;
    object["message"] = lost_reason_;
  }
  object["notes"] = notes_;
  object["exit_code"] = code;
  add_run_keys(object);
  object["extends"] = extends_->load();
  object["lock_lost"] = lost_;
  object["lost_reason"] = lost_ ? Json(lost_reason_) : Json(nullptr);
  const int status = child_status_.value_or(0);
  object["child"] = {
      {"pid", child_ > 0 ? Json(child_) : Json(nullptr)},
      {"pgid", child_ > 0 ? Json(child_) : Json(nullptr)},
      {"exit_status", child_status_ && WIFEXITED(status) ? Json(WEXITSTATUS(status)) : Json(nullptr)},
      {"signal", child_status_ && WIFSIGNALED(status) ? Json(signal_name(WTERMSIG(status))) : Json(nullptr)},
  };
  Json forwarded = Json::object();
  for (int signal = 1; signal < NSIG; ++signal) {
    const std::uint64_t times = forwarded_[static_cast<std::size_t>(signal)];
    if (times > 0) forwarded[signal_name(signal)] = times;
  }
  object["forwarded_signals"] = std::move(forwarded);
  // Times are CLOCK_MONOTONIC nanoseconds (steady_clock), comparable across processes. Only
  // a lock that was held has a lease.
  if (acquired_.ok() && interrupted_ == 0) {
    object["lease"] = {
        {"deadline_ns", monotonic_ns(deadline())},
        {"kill_after_ms", kill_after_.count()},
        {"margin_ms", margin_.count()},
        {"sigterm_ns", time_json(sigterm_at_)},
        {"sigkill_ns", time_json(sigkill_at_)},
        {"group_gone_ns", time_json(group_gone_)},
        {"raised_after_sigkill", raised_after_sigkill_ ? Json(*raised_after_sigkill_) : Json(nullptr)},
    };
  }
  object["scheduling"] = scheduling_.text;
  object["ran_past_deadline"] = ran_past_deadline();
  object["left_group_running"] = strays_;
  if (release != nullptr) {
    auto released = result_json(*release, "release", settings_.resource, settings_.key, lock_.token);
    released["exit_code"] = exit_code_for(*release);
    object["release"] = std::move(released);
  }
  object["error"] = error_.empty() ? Json(nullptr) : Json(error_);
  object["interrupted_by"] = interrupted_ != 0 ? Json(signal_name(interrupted_)) : Json(nullptr);
  Output::emit(stderr, object);
}

}  // namespace

int run_command(const Settings& settings, const Output& out) {
  int interrupted = 0;
  int code = 0;
  {
    RunSession session(settings, out);
    code = session.run();
    interrupted = session.interrupted_while_acquiring();
  }
  if (interrupted != 0) die_of(interrupted);  // as acquire does (interrupt.h), the Client gone first
  return code;
}

}  // namespace redlock_cli

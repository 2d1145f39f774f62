// SPDX-License-Identifier: Apache-2.0
#include "detail/event_loop.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "detail/uv_loop_close.h"

namespace redlock::detail {
namespace {

// A uv timer fires when the loop's cached millisecond time passes its timeout, which can
// be up to a millisecond before our nanosecond deadline; treat that as due rather than
// re-arming for a sub-millisecond remainder.
constexpr std::uint64_t kTimerSlackNs = 1'000'000;

}  // namespace

EventLoop::EventLoop(uv_loop_t* external) {
  if (external != nullptr) {
    loop_ = external;
  } else {
    own_loop_ = std::make_unique<uv_loop_t>();
    if (const int rc = uv_loop_init(own_loop_.get()); rc != 0) {
      throw std::runtime_error(std::string("uv_loop_init: ") + uv_strerror(rc));
    }
    loop_ = own_loop_.get();
  }
  try {
    start();
  } catch (...) {
    abandon();
    throw;
  }
}

void EventLoop::start() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  wake_ = make_uv_handle<uv_poll_t>();
  if (const int rc = uv_poll_init(loop_, wake_.get(), wake_fd_); rc != 0) {
    delete wake_.release();  // never initialised: not for uv_close
    throw std::runtime_error(std::string("uv_poll_init: ") + uv_strerror(rc));
  }
  wake_->data = this;
  uv_poll_start(wake_.get(), UV_READABLE, &EventLoop::on_wake);
  timer_ = make_uv_handle<uv_timer_t>();
  uv_timer_init(loop_, timer_.get());
  timer_->data = this;
  prepare_ = make_uv_handle<uv_prepare_t>();
  uv_prepare_init(loop_, prepare_.get());
  prepare_->data = this;
  uv_prepare_start(prepare_.get(), &EventLoop::on_prepare);
  // The prepare handle must not keep a caller's loop alive on its own.
  uv_unref(reinterpret_cast<uv_handle_t*>(prepare_.get()));
  idle_ = make_uv_handle<uv_idle_t>();
  uv_idle_init(loop_, idle_.get());
  check_ = make_uv_handle<uv_check_t>();
  uv_check_init(loop_, check_.get());
  check_->data = this;
  uv_check_start(check_.get(), &EventLoop::on_check);
  uv_unref(reinterpret_cast<uv_handle_t*>(check_.get()));
  if (own_loop_) {
    thread_ = std::thread([this] {
      // A write to a master that has gone away raises SIGPIPE in the writing thread; with it
      // blocked here the write fails with EPIPE and only that master's connection fails.
      sigset_t pipe_only;
      sigemptyset(&pipe_only);
      sigaddset(&pipe_only, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe_only, nullptr);
      note_loop_thread();
      uv_run(loop_, UV_RUN_DEFAULT);
    });
  }
}

void EventLoop::abandon() noexcept {
  // Every handle that was made was initialised (only uv_poll_init can fail, and start() drops
  // that one itself), so each closes; an owned loop runs their close callbacks and closes.
  check_.reset();
  idle_.reset();
  prepare_.reset();
  timer_.reset();
  wake_.reset();
  if (wake_fd_ >= 0) ::close(std::exchange(wake_fd_, -1));
  if (own_loop_) {
    uv_run(loop_, UV_RUN_DEFAULT);
    close_uv_loop(loop_);
  }
}

void EventLoop::join() {
  if (thread_.joinable()) thread_.join();
}

EventLoop::~EventLoop() {
  join();
  if (own_loop_) {
    // Anything still open (there should be nothing) is closed here so the loop can close.
    if (close_uv_loop_closing_leftovers(loop_) != 0) std::fputs("redlock: event loop not closed cleanly\n", stderr);
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);  // close() did not run
}

bool EventLoop::in_loop_thread() const noexcept {
  return loop_thread_.load(std::memory_order_acquire) == std::this_thread::get_id();
}

void EventLoop::note_loop_thread() noexcept {
  loop_thread_.store(std::this_thread::get_id(), std::memory_order_release);
}

void EventLoop::end_forked_child() noexcept {
  static constexpr char kWhy[] =
      "redlock: a child of fork() made in a callback on a Client's loop thread returned into that loop, which "
      "belongs to the parent process (its sockets too); the child exits with status 70. Exec or _exit in the "
      "callback instead.\n";
  (void)!::write(STDERR_FILENO, kWhy, sizeof kWhy - 1);
  ::_exit(70);
}

bool EventLoop::post(Task task) {
  // Before the mutex: in a child of fork() another thread of the parent may have held it.
  if (forked()) return false;
  // The write under the mutex: close() sets closing_ under the same mutex before it closes
  // the eventfd, so a write can never race the close.
  const std::lock_guard guard(queue_mutex_);
  if (closing_) return false;
  queue_.push_back(std::move(task));
  // Also from the loop thread: draining such posts before the next poll instead (tried) lost
  // wake-ups to a caller's prepare handle running after ours, and let a task that re-posts
  // itself keep the loop from ever polling (review). The eventfd keeps I/O and timers between.
  wake();
  return true;
}

void EventLoop::wake() noexcept {
  // acq_rel: on_wake's exchange reads this one, so a push before it happens before its drain.
  if (wake_pending_.exchange(true, std::memory_order_acq_rel)) return;
  const std::uint64_t one = 1;
  while (::write(wake_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
  // EAGAIN (the counter at its maximum) cannot happen: one write per drain.
}

void EventLoop::on_wake(uv_poll_t* handle, int /*status*/, int /*events*/) {
  auto* self = static_cast<EventLoop*>(handle->data);
  self->note_loop_thread();
  std::uint64_t count = 0;
  while (::read(self->wake_fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  // Cleared before the drain: a post after this point writes again and is drained by the
  // next wake-up (or by this drain, and the next one finds nothing); none is missed.
  self->wake_pending_.exchange(false, std::memory_order_acq_rel);
  self->drain_queue();
}

void EventLoop::drain_queue() {
  // The queue's memory goes round between queue_, the batch and spare_, so a post into an
  // idle loop does not allocate. Local batch: a task may drain again (close()).
  std::vector<Task> batch;
  {
    const std::lock_guard guard(queue_mutex_);
    batch.swap(queue_);
    queue_.swap(spare_);
  }
  run_batch(batch);
  batch.clear();
  const std::lock_guard guard(queue_mutex_);
  if (spare_.capacity() < batch.capacity()) spare_.swap(batch);
}

void EventLoop::run_batch(std::vector<Task>& batch) {
  // By index, kept where refuse_posts_and_run_accepted() (from one of these tasks) can go on
  // with the rest and leave nothing for this loop to run twice.
  Running running{&batch, 0, running_};
  running_ = &running;
  while (running.next < batch.size()) {
    Task& task = batch[running.next++];
    task();
  }
  running_ = running.outer;
}

void EventLoop::refuse_posts_and_run_accepted() {
  {
    const std::lock_guard guard(queue_mutex_);
    closing_ = true;
  }
  run_rest(running_);
  drain_queue();
}

void EventLoop::run_rest(Running* running) {
  if (running == nullptr) return;
  // The outermost batch was taken from the queue first: its tasks were posted before the
  // inner ones'. (Batches nest only through refuse_posts_and_run_accepted, from a task.)
  run_rest(running->outer);
  while (running->next < running->batch->size()) {
    Task& task = (*running->batch)[running->next++];
    task();
  }
}

EventLoop::TimerId EventLoop::schedule_at(std::uint64_t deadline_ns, Task task) {
  const TimerId id = next_timer_id_++;
  timers_.emplace(std::make_pair(deadline_ns, id), std::move(task));
  timer_deadlines_.emplace(id, deadline_ns);
  if (armed_for_ == 0 || deadline_ns < armed_for_) arm_timer();
  return id;
}

void EventLoop::cancel(TimerId id) noexcept {
  const auto it = timer_deadlines_.find(id);
  if (it == timer_deadlines_.end()) return;
  timers_.erase(std::make_pair(it->second, id));
  timer_deadlines_.erase(it);
  // The uv timer may stay armed for the cancelled deadline; it then finds nothing due and
  // re-arms for the next one. Cheaper than re-arming on every cancel.
}

void EventLoop::arm_timer() {
  if (!timer_) return;
  if (timers_.empty()) {
    uv_timer_stop(timer_.get());
    armed_for_ = 0;
    return;
  }
  const std::uint64_t next = timers_.begin()->first.first;
  const std::uint64_t now = now_ns();
  const std::uint64_t wait_ns = next > now ? next - now : 0;
  std::uint64_t wait_ms = (wait_ns + 999'999) / 1'000'000;
  // Armed from a pass of the timers (its end, or a task of it scheduling): at least 1 ms, so
  // that what the pass scheduled runs after the next poll. libuv before 1.48 runs a timer
  // started with 0 from its own callback again at once, before the poll: a stall check looking
  // again for replies once the loop had read them found none read, and dropped masters whose
  // replies waited in their sockets (EventLoopTest.ATaskScheduledDuringAPassForAPassedMoment
  // RunsAfterThePoll). The poll waits at most that millisecond for the overdue task.
  if (in_timer_pass_) wait_ms = std::max<std::uint64_t>(wait_ms, 1);
  uv_timer_start(timer_.get(), &EventLoop::on_timer, wait_ms, 0);
  armed_for_ = next;
}

void EventLoop::on_timer(uv_timer_t* handle) {
  auto* self = static_cast<EventLoop*>(handle->data);
  self->note_loop_thread();
  self->armed_for_ = 0;
  self->in_timer_pass_ = true;
  self->run_timers();
  self->in_timer_pass_ = false;
}

void EventLoop::run_timers() {
  // The pass runs the tasks due (within the slack) when it began, in deadline order, each
  // unless an earlier one cancelled it. A task scheduled during the pass waits for the next
  // one: run early, it might schedule itself again for its deadline and be run again at once,
  // over and over until the deadline passed. Taken as a list first, so that a pass costs one
  // lookup per task however many new tasks fall due meanwhile (a rescan from the start past
  // them was quadratic).
  const std::uint64_t due_by = deadline_after(now_ns(), kTimerSlackNs);
  due_.clear();
  for (const auto& entry : timers_) {
    if (entry.first.first > due_by) break;
    due_.push_back(entry.first);
  }
  for (const auto& key : due_) {
    const auto it = timers_.find(key);
    if (it == timers_.end()) continue;  // cancelled by an earlier task
    Task task = std::move(it->second);
    timer_deadlines_.erase(key.second);
    timers_.erase(it);
    task();
  }
  arm_timer();
}

void EventLoop::add_before_poll_hook(Task hook) { before_poll_.push_back(std::move(hook)); }

void EventLoop::on_prepare(uv_prepare_t* handle) {
  auto* self = static_cast<EventLoop*>(handle->data);
  self->note_loop_thread();
  ++self->passes_;
  // By index: a hook can end in a user callback that closes the loop.
  for (std::size_t i = 0; i < self->before_poll_.size(); ++i) self->before_poll_[i]();
}

void EventLoop::after_io(Task task) {
  after_io_.push_back(std::move(task));
  // An active idle handle makes the next poll non-blocking; its callback does nothing.
  if (after_io_.size() == 1) uv_idle_start(idle_.get(), [](uv_idle_t*) {});
}

void EventLoop::on_check(uv_check_t* handle) {
  auto* self = static_cast<EventLoop*>(handle->data);
  if (self->after_io_.empty()) return;
  uv_idle_stop(self->idle_.get());
  std::vector<Task> tasks;
  tasks.swap(self->after_io_);
  for (auto& task : tasks) task();
}

void EventLoop::close() {
  refuse_posts_and_run_accepted();
  timers_.clear();
  timer_deadlines_.clear();
  after_io_.clear();
  // Each is freed once libuv has run its close callback (detail/uv_handle.h).
  idle_.reset();
  check_.reset();
  wake_.reset();
  ::close(std::exchange(wake_fd_, -1));  // libuv stopped polling it at uv_close
  timer_.reset();
  prepare_.reset();
}

}  // namespace redlock::detail

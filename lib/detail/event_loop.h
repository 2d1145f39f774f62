// SPDX-License-Identifier: Apache-2.0
// detail/event_loop.h — the one libuv loop that owns every socket and timer of a Client.
//
// Either runs its own loop on its own thread, or attaches to a loop the caller runs.
// Other threads hand work to it with post(): the task goes on a queue under a mutex and an
// eventfd wakes the loop, which drains the whole queue per wake-up (posts coalesce: only the
// first post after a drain began writes to the eventfd).
// Everything else here is for the loop thread only.
#pragma once

#include <uv.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "detail/fork_generation.h"
#include "detail/loop_time.h"
#include "detail/uv_handle.h"

namespace redlock::detail {

class EventLoop {
 public:
  using Task = std::function<void()>;
  using TimerId = std::uint64_t;

  // `external` null: create a loop and run it on a new thread. Otherwise attach to it.
  explicit EventLoop(uv_loop_t* external);
  // Own thread: waits for the thread (close() must have been posted) and closes the loop.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  [[nodiscard]] uv_loop_t* uv() const noexcept { return loop_; }
  [[nodiscard]] bool owns_thread() const noexcept { return thread_.joinable(); }
  [[nodiscard]] bool in_loop_thread() const noexcept;
  // This process is a child of a fork() made after the loop was (detail/fork_generation.h):
  // post() refuses everything, and the loop must be left alone (its owner leaks it).
  [[nodiscard]] bool forked() const noexcept { return made_before_fork(generation_); }
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  // A child of fork() made on this loop's own thread (in a callback) is about to return into
  // the loop, whose epoll instance, eventfd and sockets it shares with the parent: running it
  // would read the parent's replies and write into its streams (a review: the parent then hung
  // for good). Says so on stderr and ends the child with _exit(70) (no atexit handlers: they
  // could flush the parent's buffered output again). A child must exec or _exit in the callback.
  [[noreturn]] static void end_forked_child() noexcept;

  // Any thread. Runs `task` on the loop thread, in posting order. Returns false (and drops
  // the task) once close() has begun, and in a child of fork() (forked()).
  bool post(Task task);

  // Loop thread only. Runs `task` at its deadline, or up to a millisecond before it (the uv
  // timer counts whole milliseconds): a task that must not run early checks now_ns() itself. A task scheduled by a
  // timer task runs in a later pass, never in the pass that scheduled it. Ids are never reused.
  TimerId schedule_at(std::uint64_t deadline_ns, Task task);
  TimerId schedule_after(std::chrono::milliseconds delay, Task task) {
    return schedule_at(deadline_after(now_ns(), delay), std::move(task));
  }
  void cancel(TimerId id) noexcept;

  // Loop thread only. Runs `task` after the loop has next polled for I/O (without blocking),
  // so that replies already in the sockets are read first. Deadlines use it: a loop that was
  // busy past a deadline must not time out replies that arrived in time.
  void after_io(Task task);

  // Loop thread only. `hook` runs every iteration just before the loop waits for I/O; the
  // connections use it to write everything queued in this iteration in one syscall.
  void add_before_poll_hook(Task hook);
  // Loop thread only. Counts the loop's passes (each poll for I/O begins a new one).
  [[nodiscard]] std::uint64_t passes() const noexcept { return passes_; }

  // Own thread: waits until the loop thread has finished (after close() ran on it).
  void join();

  // Loop thread only. From now on post() refuses every task; runs every task it accepted
  // that has not run yet, in posting order: the rest of a batch being run (when called from
  // one of its tasks) first, then the queue. A Client's shutdown calls it while its
  // connections are still open, so that a release queued behind the shutdown is sent.
  void refuse_posts_and_run_accepted();

  // Loop thread only. refuse_posts_and_run_accepted() (so that waiters get their answers),
  // then drops pending timers and closes the loop's own handles. Sockets are closed by their
  // owners.
  void close();

 private:
  const std::uint64_t generation_ = fork_generation();  // of the process that made the loop
  void start();              // the constructor's part after the loop exists
  void abandon() noexcept;   // start() threw: close what it opened (the destructor will not run)
  static void on_wake(uv_poll_t* handle, int status, int events);
  static void on_timer(uv_timer_t* handle);
  static void on_prepare(uv_prepare_t* handle);
  static void on_check(uv_check_t* handle);
  void drain_queue();
  struct Running;  // below, with the queue
  void run_batch(std::vector<Task>& batch);
  void run_rest(Running* running);  // the rest of `running` and of the batches outside it
  void wake() noexcept;  // the eventfd write, unless one is already pending (any thread)
  void run_timers();
  void arm_timer();
  void note_loop_thread() noexcept;

  uv_loop_t* loop_ = nullptr;
  std::unique_ptr<uv_loop_t> own_loop_;  // when not attached to a caller's
  // The wake-up: an eventfd polled by the loop. Not uv_async_t: libuv 1.44's loop spins and
  // then sched_yields while a uv_async_send is between its write and its final flag store,
  // which on a busy machine (the woken loop thread preempting the sender) cost two extra
  // context switches per blocking call (bench/README.md "The blocking path").
  int wake_fd_ = -1;
  UvHandlePtr<uv_poll_t> wake_;
  std::atomic<bool> wake_pending_{false};  // an eventfd write is on its way or unread
  UvHandlePtr<uv_timer_t> timer_;
  UvHandlePtr<uv_prepare_t> prepare_;
  UvHandlePtr<uv_idle_t> idle_;    // active while after_io tasks wait: the poll must not block
  UvHandlePtr<uv_check_t> check_;  // runs the after_io tasks once the poll has returned
  std::atomic<std::thread::id> loop_thread_{};

  std::mutex queue_mutex_;
  std::vector<Task> queue_;  // guarded by queue_mutex_
  std::vector<Task> spare_;  // guarded by queue_mutex_: an empty vector whose capacity the queue reuses
  bool closing_ = false;     // guarded by queue_mutex_
  // Loop thread only: the batches being run (run_batch), innermost first, each with the index
  // of its next task; refuse_posts_and_run_accepted() runs their rest.
  struct Running {
    std::vector<Task>* batch;
    std::size_t next;
    Running* outer;
  };
  Running* running_ = nullptr;

  // Loop thread only.
  // The timer maps' nodes come from a pool and go back to it: a timer costs no heap
  // allocation once the pool has grown to the number pending at once.
  std::pmr::unsynchronized_pool_resource timers_memory_;
  std::pmr::map<std::pair<std::uint64_t, TimerId>, Task> timers_{&timers_memory_};
  std::pmr::unordered_map<TimerId, std::uint64_t> timer_deadlines_{&timers_memory_};
  std::vector<std::pair<std::uint64_t, TimerId>> due_;  // run_timers(): the pass's keys (capacity kept)
  TimerId next_timer_id_ = 1;
  std::uint64_t armed_for_ = 0;  // deadline the uv timer is set for; 0 = not armed
  bool in_timer_pass_ = false;   // on_timer is running the pass (arm_timer waits at least 1 ms)
  std::vector<Task> before_poll_;
  std::uint64_t passes_ = 0;  // bumped before every poll (on_prepare)
  std::vector<Task> after_io_;

  std::thread thread_;  // last: started after everything above is ready
};

}  // namespace redlock::detail

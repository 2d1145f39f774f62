// SPDX-License-Identifier: Apache-2.0
// detail/uv_loop_close.h — the one way a libuv loop this project made is closed.
//
// close_uv_loop(loop) is uv_loop_close(loop), and under ThreadSanitizer it first tells the
// sanitizer which descriptors the loop is about to close. libuv closes its loop's own
// descriptors (the epoll instance, the eventfd behind uv_async, the signal pipe: libuv 1.44)
// with a raw close syscall that TSan does not intercept, so TSan kept its bookkeeping for them,
// made on the thread that created the loop. The next thread to be given one of those numbers
// freed that bookkeeping, with nothing ordering it after the creating thread, and TSan reported
// a data race in socket() (seen in CI: one Client destroyed while another's loop thread was
// connecting; EventLoopTest.DescriptorsOfALoopClosedOnOneThreadAreReusedOnAnotherWithoutARaceReport).
// Elsewhere it is uv_loop_close and nothing more. (redlock_compare closes its loop as any user of
// the public API does: it is never built with TSan.)
//
// close_uv_loop_closing_leftovers(loop) is for an owner that must release its loop whatever is
// left on it: a handle still open (none is expected) is closed and the loop run once more first.
#pragma once

#include <uv.h>

#if defined(__SANITIZE_THREAD__)
#define REDLOCK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define REDLOCK_TSAN 1
#endif
#endif

#ifdef REDLOCK_TSAN
// The sanitizer runtime's syscall hook (sanitizer/linux_syscall_hooks.h, not shipped with GCC):
// it does what the close() interceptor does before the descriptor is closed.
extern "C" void __sanitizer_syscall_pre_impl_close(long fd);  // NOLINT(bugprone-reserved-identifier)
#endif

namespace redlock::detail {

inline int close_uv_loop(uv_loop_t* loop) noexcept {
#ifdef REDLOCK_TSAN
  // uv_loop_close closes nothing while a request is active or a handle is left (it returns
  // UV_EBUSY); only a loop that will close has its descriptors reported closed.
  bool busy = uv_loop_alive(loop) != 0;
  if (!busy)
    uv_walk(
        loop, [](uv_handle_t*, void* any) { *static_cast<bool*>(any) = true; }, &busy);
  if (!busy) {
    for (const int fd :
         {uv_backend_fd(loop), loop->async_io_watcher.fd, loop->signal_pipefd[0], loop->signal_pipefd[1]}) {
      if (fd >= 0) __sanitizer_syscall_pre_impl_close(fd);
    }
  }
#endif
  return uv_loop_close(loop);
}

// 0 once the loop is closed; else what the last uv_loop_close said (a request still active).
inline int close_uv_loop_closing_leftovers(uv_loop_t* loop) noexcept {
  const int closed = close_uv_loop(loop);
  if (closed != UV_EBUSY) return closed;
  uv_walk(
      loop,
      [](uv_handle_t* handle, void*) {
        if (!uv_is_closing(handle)) uv_close(handle, nullptr);
      },
      nullptr);
  uv_run(loop, UV_RUN_DEFAULT);
  return close_uv_loop(loop);
}

}  // namespace redlock::detail

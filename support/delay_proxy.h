// SPDX-License-Identifier: Apache-2.0
// redlock::support — a delaying TCP proxy: the chaos harness's "slow master" fault (no netem
// needed) and the benchmarks' simulated zones (bench/compare_phases.cpp).
//
// Each route is one listening socket on 127.0.0.1 that forwards every accepted connection to
// 127.0.0.1:target_port (a redis-server). Bytes are held for the route's current one-way
// delay in each direction, so a round trip through the proxy costs two delays. The delay is
// read from an atomic that may live in MAP_SHARED memory, so the harness (another process)
// can change it while the proxy runs in a forked child.
//
// Semantics, per accepted connection:
// * One upstream connection to the target per client connection. The client is only read
//   once the upstream connection is established; if connecting fails, the client is closed.
// * Every chunk read from one side is stamped with due = arrival + delay (delay loaded at
//   arrival, negative values count as 0) and written to the other side when due. Each
//   direction is a FIFO: a chunk is never written before an earlier one, so lowering the
//   delay cannot reorder bytes (later chunks simply leave right after the earlier ones).
// * Due times are kept in nanoseconds (CLOCK_MONOTONIC, a timerfd per direction), not rounded
//   to libuv's millisecond timers: a 0.1 ms delay is 0.1 ms plus the loop's wake-up latency
//   (tens of microseconds on an idle machine), not 1 to 2 ms.
// * Backpressure: bytes count as queued from the read until uv_write completes (plus 64 bytes
//   of bookkeeping per chunk). Once 8 MiB are queued in one direction its source is no longer
//   read (uv_read_stop); reading resumes when the queue is down to 4 MiB. So one connection
//   holds at most about 2 x (8 MiB + one 64 KiB read) plus its two 64 KiB read buffers.
// * When one side goes away (EOF or read error), what it sent before still reaches the other
//   side, each chunk at its due time (like a FIN travelling behind the data); data queued
//   toward the side that left is dropped, and anything more the remaining side sends is read
//   and discarded. Once that last direction has been written, both sockets are closed.
//   A write error, or the remaining side leaving too, closes both at once and drops the rest.
// * Stopping closes everything at once; queued data is dropped.
//
// Threading: run_delay_proxies runs one libuv loop in the calling thread; the only state it
// shares with other threads or processes is the atomics it is given. While it runs, SIGPIPE
// is blocked in the calling thread (a write to a closed peer fails with EPIPE instead); on
// return any SIGPIPE left pending is consumed and the thread's old mask is restored.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace redlock::support {

// One listening socket forwarding to 127.0.0.1:target_port. delay_ns lives in shared memory
// (MAP_SHARED) so another process can change it while the proxy runs; 0 = forward at once.
struct ProxyRoute {
  int listen_fd;  // already bound and listening (see listen_on_free_port)
  std::uint16_t target_port;
  const std::atomic<std::int64_t>* delay_ns;  // valid until run_delay_proxies returns; nullptr = 0
};

struct ListeningSocket {
  int fd;
  std::uint16_t port;
};

// Binds 127.0.0.1:0 (SOCK_CLOEXEC, so exec'd children such as redis-server do not inherit it),
// listens, returns the fd and the port. Throws std::system_error on failure.
ListeningSocket listen_on_free_port();

// Runs all routes on one uv loop in the calling thread until *stop becomes true (checked
// every 5 ms), then closes everything it opened, including the listen fds, and returns.
// The listen fds belong to this call from the start: they are closed on every way out,
// including the exceptions (std::system_error when the loop or a listener cannot be set up).
// In a forked child, the parent should close its own copies of the listen fds, or the port
// stays open (and accepts into the backlog) after the child's proxy has stopped.
void run_delay_proxies(const std::vector<ProxyRoute>& routes, const std::atomic<bool>& stop);

}  // namespace redlock::support

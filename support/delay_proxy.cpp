// SPDX-License-Identifier: Apache-2.0
#include "support/delay_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <uv.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <string>
#include <system_error>
#include <unordered_set>
#include <utility>

#include "detail/uv_loop_close.h"

namespace redlock::support {
namespace {

constexpr std::size_t kReadBufferBytes = 64 * 1024;
// Stop reading a side once this much of its data is queued (read, not yet written) ...
constexpr std::size_t kHighWaterBytes = 8 * 1024 * 1024;
// ... and read it again once the queue is down to this.
constexpr std::size_t kLowWaterBytes = kHighWaterBytes / 2;
// Each queued chunk is charged this much on top of its payload (allocation, deque slot), so
// that a peer dribbling tiny segments cannot queue unbounded bookkeeping under the limit.
constexpr std::size_t kChunkOverheadBytes = 64;
constexpr std::uint64_t kStopPollMs = 5;
constexpr int kListenBacklog = 128;

// The proxy's clock: CLOCK_MONOTONIC in nanoseconds, the clock the timerfds are armed on.
std::uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

template <class Handle>
uv_handle_t* as_handle(Handle* handle) {
  return reinterpret_cast<uv_handle_t*>(handle);
}

template <class Handle>
uv_stream_t* as_stream(Handle* handle) {
  return reinterpret_cast<uv_stream_t*>(handle);
}

[[noreturn]] void throw_uv(int code, const std::string& what) {
  // libuv error codes are negated errno values on Unix.
  throw std::system_error(-code, std::generic_category(), what + ": " + uv_err_name(code));
}

// Blocks SIGPIPE in the calling thread for the proxy's lifetime. On the way out any SIGPIPE
// raised meanwhile (it stays pending while blocked) is consumed before the old mask comes
// back, or it would be delivered at that moment.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    sigset_t old;
    sigemptyset(&old);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
    was_blocked_ = sigismember(&old, SIGPIPE) == 1;
  }
  ~SigpipeBlock() {
    if (was_blocked_) return;
    sigset_t pipe_only;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    const timespec no_wait{0, 0};
    while (sigtimedwait(&pipe_only, nullptr, &no_wait) == SIGPIPE) {
    }
    pthread_sigmask(SIG_UNBLOCK, &pipe_only, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  bool was_blocked_ = false;
};

struct Chunk {
  std::unique_ptr<char[]> bytes;
  std::size_t size = 0;
  std::uint64_t due_ns = 0;  // CLOCK_MONOTONIC (now_ns)

  std::size_t charge() const { return size + kChunkOverheadBytes; }
};

struct Proxy;
struct Connection;

struct Listener {
  uv_tcp_t tcp{};
  Proxy* proxy = nullptr;
  const std::atomic<std::int64_t>* delay_ns = nullptr;
  sockaddr_in target{};
};

// One direction of one connection: bytes read from `source`, queued, written to `sink`.
struct Direction {
  Connection* conn = nullptr;
  uv_tcp_t* source = nullptr;
  uv_tcp_t* sink = nullptr;
  // Armed for pending.front().due_ns while pending is not empty. A timerfd (absolute
  // CLOCK_MONOTONIC, nanoseconds) watched by a uv_poll_t, not a uv_timer_t: libuv timers count
  // whole milliseconds, so a 0.1 ms delay would become 1 to 2 ms. timer_fd is closed by the
  // poll handle's close callback.
  int timer_fd = -1;
  uv_poll_t timer{};
  std::deque<Chunk> pending;
  // Charged for the chunks pending plus those handed to uv_write and not yet completed.
  std::size_t queued_bytes = 0;
  bool reading = false;
  bool discard = false;  // the sink went away: read the source only to throw it away
  std::unique_ptr<char[]> read_buffer = std::make_unique<char[]>(kReadBufferBytes);
};

struct WriteRequest {
  uv_write_t req{};
  Direction* dir = nullptr;
  Chunk chunk;
};

struct Connection {
  Proxy* proxy = nullptr;
  const Listener* listener = nullptr;
  uv_tcp_t client{};
  uv_tcp_t upstream{};
  uv_connect_t connect_req{};
  Direction to_upstream;  // client -> upstream
  Direction to_client;    // upstream -> client
  // Set when one side went away: the direction away from it, still being delivered.
  Direction* draining = nullptr;
  bool closing = false;
  std::array<uv_handle_t*, 4> handles{};
  std::size_t handle_count = 0;  // initialised handles, closed by close_connection
  std::size_t open_handles = 0;  // close callbacks still to come
};

struct Proxy {
  uv_loop_t loop{};
  const std::atomic<bool>* stop = nullptr;
  uv_timer_t stop_timer{};
  bool stop_timer_open = false;
  std::vector<std::unique_ptr<Listener>> listeners;  // each with an initialised handle
  std::unordered_set<Connection*> connections;       // not yet closing
};

Direction& other(Direction& dir) {
  Connection& conn = *dir.conn;
  return &dir == &conn.to_upstream ? conn.to_client : conn.to_upstream;
}

void on_handle_closed(uv_handle_t* handle) {
  // Every connection handle's data is the Direction it belongs to (a socket: the direction
  // reading from it; a timer: its own direction).
  auto* dir = static_cast<Direction*>(handle->data);
  if (handle == as_handle(&dir->timer)) {
    ::close(dir->timer_fd);
    dir->timer_fd = -1;
  }
  Connection* conn = dir->conn;
  if (--conn->open_handles == 0) delete conn;
}

// Closes both sockets and both timers; pending data is dropped. Write and connect requests
// still outstanding get UV_ECANCELED before the close callbacks, which free the connection.
void close_connection(Connection* conn) {
  if (conn->closing) return;
  conn->closing = true;
  conn->proxy->connections.erase(conn);
  if (conn->handle_count == 0) {
    delete conn;
    return;
  }
  conn->open_handles = conn->handle_count;
  for (std::size_t i = 0; i < conn->handle_count; ++i) uv_close(conn->handles[i], on_handle_closed);
}

void on_alloc(uv_handle_t* handle, std::size_t, uv_buf_t* buf) {
  auto* dir = static_cast<Direction*>(handle->data);
  *buf = uv_buf_init(dir->read_buffer.get(), static_cast<unsigned>(kReadBufferBytes));
}

void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);

void start_reading(Direction& dir) {
  if (dir.reading || dir.conn->closing) return;
  if (uv_read_start(as_stream(dir.source), on_alloc, on_read) < 0) {
    close_connection(dir.conn);
    return;
  }
  dir.reading = true;
}

void stop_reading(Direction& dir) {
  if (!dir.reading) return;
  uv_read_stop(as_stream(dir.source));
  dir.reading = false;
}

// The side that went away has left, and everything it sent has been written: done.
void close_if_drained(Direction& dir) {
  Connection* conn = dir.conn;
  if (!conn->closing && conn->draining == &dir && dir.pending.empty() && dir.queued_bytes == 0) {
    close_connection(conn);
  }
}

void on_write(uv_write_t* req, int status);

// Arms the direction's timer for `due_ns` (absolute, now_ns clock); 0 disarms it.
void set_timer(Direction& dir, std::uint64_t due_ns) {
  itimerspec when{};
  when.it_value.tv_sec = static_cast<time_t>(due_ns / 1'000'000'000u);
  when.it_value.tv_nsec = static_cast<long>(due_ns % 1'000'000'000u);
  ::timerfd_settime(dir.timer_fd, TFD_TIMER_ABSTIME, &when, nullptr);
}

// Writes every chunk at the head of the queue that is due, then arms the timer for the next.
void flush(Direction& dir) {
  Connection* conn = dir.conn;
  if (conn->closing) return;
  const std::uint64_t now = now_ns();
  while (!dir.pending.empty() && dir.pending.front().due_ns <= now) {
    auto* request = new WriteRequest;
    request->dir = &dir;
    request->chunk = std::move(dir.pending.front());
    dir.pending.pop_front();
    request->req.data = request;
    const uv_buf_t buf = uv_buf_init(request->chunk.bytes.get(), static_cast<unsigned>(request->chunk.size));
    if (uv_write(&request->req, as_stream(dir.sink), &buf, 1, on_write) < 0) {
      dir.queued_bytes -= request->chunk.charge();
      delete request;
      close_connection(conn);
      return;
    }
  }
  if (dir.pending.empty()) {
    set_timer(dir, 0);
    close_if_drained(dir);
    return;
  }
  // The head is not due (so due_ns > 0). A wake-up that finds nothing due (e.g. a stale
  // expiry of an earlier setting) just re-arms here.
  set_timer(dir, dir.pending.front().due_ns);
}

void on_due(uv_poll_t* timer, int, int) {
  auto* dir = static_cast<Direction*>(timer->data);
  std::uint64_t expirations = 0;
  // Clears the readiness (EAGAIN if a re-arm already reset it); flush decides what is due.
  [[maybe_unused]] const ssize_t n = ::read(dir->timer_fd, &expirations, sizeof(expirations));
  flush(*dir);
}

void on_write(uv_write_t* req, int status) {
  auto* request = static_cast<WriteRequest*>(req->data);
  Direction& dir = *request->dir;
  dir.queued_bytes -= request->chunk.charge();
  delete request;
  Connection* conn = dir.conn;
  if (conn->closing) return;
  if (status < 0) {
    close_connection(conn);
    return;
  }
  if (!dir.reading && !dir.discard && conn->draining == nullptr && dir.queued_bytes <= kLowWaterBytes) {
    start_reading(dir);
  }
  close_if_drained(dir);
}

void enqueue(Direction& dir, const char* data, std::size_t size) {
  const std::uint64_t arrival = now_ns();
  const std::atomic<std::int64_t>* delay_ns = dir.conn->listener->delay_ns;
  const std::int64_t delay = delay_ns != nullptr ? delay_ns->load(std::memory_order_relaxed) : 0;
  Chunk chunk;
  chunk.bytes = std::make_unique<char[]>(size);
  std::memcpy(chunk.bytes.get(), data, size);
  chunk.size = size;
  chunk.due_ns = arrival + (delay > 0 ? static_cast<std::uint64_t>(delay) : 0);
  const bool was_empty = dir.pending.empty();
  dir.queued_bytes += chunk.charge();
  dir.pending.push_back(std::move(chunk));
  if (dir.queued_bytes >= kHighWaterBytes) stop_reading(dir);
  // Otherwise the timer is already armed for the head, which leaves first anyway.
  if (was_empty) flush(dir);
}

// `dir`'s source went away: deliver what it sent, drop what was on its way to it.
void begin_drain(Direction& dir) {
  Connection* conn = dir.conn;
  conn->draining = &dir;
  Direction& back = other(dir);
  back.discard = true;
  for (const Chunk& chunk : back.pending) back.queued_bytes -= chunk.charge();
  back.pending.clear();
  set_timer(back, 0);
  // Keep reading the remaining side (and throw it away), so that closing it later does not
  // turn into a reset because of unread data.
  start_reading(back);
  if (!conn->closing) close_if_drained(dir);
}

void on_read(uv_stream_t* stream, ssize_t nread, const uv_buf_t*) {
  auto* dir = static_cast<Direction*>(stream->data);
  Connection* conn = dir->conn;
  if (conn->closing || nread == 0) return;
  if (nread > 0) {
    if (!dir->discard) enqueue(*dir, dir->read_buffer.get(), static_cast<std::size_t>(nread));
    return;
  }
  // EOF or a read error: this side is gone.
  stop_reading(*dir);
  if (conn->draining != nullptr) {
    // The other side left earlier; nobody is left to deliver to.
    close_connection(conn);
    return;
  }
  begin_drain(*dir);
}

void on_upstream_connected(uv_connect_t* req, int status) {
  auto* conn = static_cast<Connection*>(req->data);
  if (conn->closing) return;  // includes UV_ECANCELED from closing the handle
  if (status < 0) {
    close_connection(conn);
    return;
  }
  uv_tcp_nodelay(&conn->upstream, 1);
  start_reading(conn->to_upstream);
  start_reading(conn->to_client);
}

bool init_connection_handles(Connection* conn, uv_loop_t* loop) {
  conn->to_upstream.conn = conn;
  conn->to_upstream.source = &conn->client;
  conn->to_upstream.sink = &conn->upstream;
  conn->to_client.conn = conn;
  conn->to_client.source = &conn->upstream;
  conn->to_client.sink = &conn->client;
  conn->connect_req.data = conn;
  // Each handle's data is the Direction it belongs to (a socket: the direction reading from
  // it; a timer: its own direction).
  const auto add = [conn](uv_handle_t* handle, int rc, Direction* owner) {
    if (rc != 0) return false;
    handle->data = owner;
    conn->handles[conn->handle_count++] = handle;
    return true;
  };
  // A timer: its timerfd, then the poll handle watching it (from then on closing the handle
  // closes the fd). Readable = the armed time has come.
  const auto add_timer = [&](Direction& dir) {
    dir.timer_fd = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (dir.timer_fd < 0) return false;
    if (!add(as_handle(&dir.timer), uv_poll_init(loop, &dir.timer, dir.timer_fd), &dir)) {
      ::close(dir.timer_fd);
      dir.timer_fd = -1;
      return false;
    }
    return uv_poll_start(&dir.timer, UV_READABLE, on_due) == 0;
  };
  return add(as_handle(&conn->client), uv_tcp_init(loop, &conn->client), &conn->to_upstream) &&
         add(as_handle(&conn->upstream), uv_tcp_init(loop, &conn->upstream), &conn->to_client) &&
         add_timer(conn->to_upstream) && add_timer(conn->to_client);
}

void on_client_connection(uv_stream_t* server, int status) {
  if (status < 0) return;  // e.g. EMFILE; the listener keeps listening
  auto* listener = static_cast<Listener*>(server->data);
  auto* conn = new Connection;
  conn->proxy = listener->proxy;
  conn->listener = listener;
  listener->proxy->connections.insert(conn);
  if (!init_connection_handles(conn, &listener->proxy->loop) || uv_accept(server, as_stream(&conn->client)) != 0) {
    close_connection(conn);
    return;
  }
  uv_tcp_nodelay(&conn->client, 1);
  // The client is read only once the upstream connection exists (on_upstream_connected).
  if (uv_tcp_connect(&conn->connect_req, &conn->upstream, reinterpret_cast<const sockaddr*>(&listener->target),
                     on_upstream_connected) < 0) {
    close_connection(conn);
  }
}

// Closes every handle; uv_run then returns once their close callbacks have run.
void shut_down(Proxy& proxy) {
  if (proxy.stop_timer_open) {
    proxy.stop_timer_open = false;
    uv_close(as_handle(&proxy.stop_timer), nullptr);
  }
  for (auto& listener : proxy.listeners) {
    if (!uv_is_closing(as_handle(&listener->tcp))) uv_close(as_handle(&listener->tcp), nullptr);
  }
  // close_connection erases from the set, so take the set first.
  std::unordered_set<Connection*> connections;
  connections.swap(proxy.connections);
  for (Connection* conn : connections) close_connection(conn);
}

void on_stop_poll(uv_timer_t* timer) {
  auto* proxy = static_cast<Proxy*>(timer->data);
  if (proxy->stop->load(std::memory_order_acquire)) shut_down(*proxy);
}

// Runs the loop until every handle is closed, then closes the loop.
void finish_loop(Proxy& proxy) {
  uv_run(&proxy.loop, UV_RUN_DEFAULT);
  // Something still open is not expected; it is closed so the loop can be released.
  redlock::detail::close_uv_loop_closing_leftovers(&proxy.loop);
}

}  // namespace

ListeningSocket listen_on_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "delay proxy: socket");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = 0;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, kListenBacklog) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    throw std::system_error(error, std::generic_category(), "delay proxy: bind/listen 127.0.0.1:0");
  }
  return ListeningSocket{fd, ntohs(address.sin_port)};
}

void run_delay_proxies(const std::vector<ProxyRoute>& routes, const std::atomic<bool>& stop) {
  const SigpipeBlock sigpipe_blocked;
  Proxy proxy;
  proxy.stop = &stop;
  if (const int rc = uv_loop_init(&proxy.loop); rc != 0) {
    for (const ProxyRoute& route : routes) ::close(route.listen_fd);
    throw_uv(rc, "delay proxy: uv_loop_init");
  }

  // Setup failure: close the fds not yet handed to libuv, close every handle, then throw.
  const auto fail = [&](std::size_t first_unowned, int rc, const std::string& what) {
    for (std::size_t i = first_unowned; i < routes.size(); ++i) ::close(routes[i].listen_fd);
    shut_down(proxy);
    finish_loop(proxy);
    throw_uv(rc, what);
  };

  uv_timer_init(&proxy.loop, &proxy.stop_timer);  // cannot fail
  proxy.stop_timer.data = &proxy;
  proxy.stop_timer_open = true;
  for (std::size_t i = 0; i < routes.size(); ++i) {
    const ProxyRoute& route = routes[i];
    auto listener = std::make_unique<Listener>();
    listener->proxy = &proxy;
    listener->delay_ns = route.delay_ns;
    if (const int rc = uv_ip4_addr("127.0.0.1", route.target_port, &listener->target); rc != 0) {
      fail(i, rc, "delay proxy: target address");
    }
    if (const int rc = uv_tcp_init(&proxy.loop, &listener->tcp); rc != 0) fail(i, rc, "delay proxy: uv_tcp_init");
    listener->tcp.data = listener.get();
    proxy.listeners.push_back(std::move(listener));
    Listener& added = *proxy.listeners.back();
    // From here on the handle owns the fd (if uv_tcp_open succeeds) and closing it closes the fd.
    if (const int rc = uv_tcp_open(&added.tcp, route.listen_fd); rc != 0) fail(i, rc, "delay proxy: uv_tcp_open");
    if (const int rc = uv_listen(as_stream(&added.tcp), kListenBacklog, on_client_connection); rc != 0) {
      fail(i + 1, rc, "delay proxy: uv_listen (route to port " + std::to_string(route.target_port) + ")");
    }
  }
  uv_timer_start(&proxy.stop_timer, on_stop_poll, 0, kStopPollMs);
  finish_loop(proxy);
}

}  // namespace redlock::support

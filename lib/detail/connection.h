// detail/connection.h — one pipelined connection to one Redis master, on the event loop.
//
// Owns its socket (a libuv TCP handle) and uses hiredis only for what hiredis 0.14 does
// well: the RESP reply parser (redisReader) and command encoding. hiredis 0.14's async
// context has no connect or command timeouts and frees itself inside callbacks; owning the
// socket gives us deadlines, source-address binding, and a single owner for every handle.
//
// Replies come back in send order (Redis answers a connection's commands in order), so a
// FIFO of ReplySinks matches them. A round's deadline is enforced by its owner, not here:
// a command that timed out stays in the FIFO and its sink still gets the late reply, which
// is how a late grant is seen (and why the release sent after it lands after it).
//
// Loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "detail/event_loop.h"
#include "redlock/options.h"

struct redisReply;
struct redisReader;

namespace redlock::detail {

// Receives the reply to one command, exactly once: `reply` non-null, or null with
// `failure` saying why no reply will come (connection lost, closed, handshake failed).
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  virtual void on_reply(std::uint32_t tag, const redisReply* reply, std::string_view failure) = 0;
};

struct ConnectionOptions {
  Endpoint endpoint;
  Milliseconds connect_timeout{1000};
  Milliseconds reconnect_min{50};
  Milliseconds reconnect_max{2000};
  Milliseconds stall_timeout{3000};
  std::string source_address;
  // Commands encoded once per connection handshake (e.g. SCRIPT LOAD); their replies
  // are not checked.
  std::string handshake_extra;
  std::size_t handshake_extra_count = 0;
};

class Connection {
 public:
  enum class State : std::uint8_t { disconnected, connecting, handshaking, ready, closed };

  // What the handshake learned about the server (INFO server, CONFIG GET), for the restart
  // guard and the fencing counter. Replaced on every connect.
  struct ServerInfo {
    std::string run_id;  // empty if INFO failed (see error)
    // The latest instant the server can have started, on now_ns(): when INFO was read minus
    // (uptime_in_seconds - 1). Redis derives uptime from whole wall-clock seconds, so it
    // over-reports by up to 1 s; and it trusts the server's wall clock (see restart_guard.cpp).
    std::uint64_t started_ns = 0;
    // CONFIG GET results; empty where the server (or an ACL) refused CONFIG GET.
    std::string maxmemory_policy;
    std::string appendonly;   // "yes" / "no"
    std::string appendfsync;  // "always" / "everysec" / "no"
    std::string error;        // why run_id is unknown

    // Loses no acknowledged write on restart: every write is in the AOF, fsynced before
    // the reply. Only what CONFIG GET said; unknown counts as not durable.
    [[nodiscard]] bool durable() const noexcept { return appendonly == "yes" && appendfsync == "always"; }
  };

  Connection(EventLoop& loop, ConnectionOptions options);
  ~Connection();  // close()
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts connecting (and reconnecting after every failure, with backoff).
  void start();

  // Queues one RESP-encoded command. While connecting it waits for the connection.
  // Returns false, without calling the sink, when there is no connection to wait for
  // (disconnected, closed, backlog full): last_error() says why.
  bool send(std::string_view encoded, std::shared_ptr<ReplySink> sink, std::uint32_t tag);

  // Writes everything queued since the last flush. Called before the loop polls.
  void flush();

  // Best-effort write of what is queued, then closes the socket. Outstanding sinks get a
  // failure. No reconnect afterwards.
  void close();

  [[nodiscard]] State state() const noexcept { return state_; }
  [[nodiscard]] bool ready() const noexcept { return state_ == State::ready; }
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t outstanding() const noexcept { return pending_.size(); }
  // Valid once ready(); describes the server of the current connection.
  [[nodiscard]] const ServerInfo& server_info() const noexcept { return info_; }

  // Called (on the loop thread) every time a connection becomes ready, after the handshake.
  std::function<void()> on_ready;

  // Pending commands above which send() refuses: a frozen master must not grow memory
  // without bound before the stall check drops its connection.
  static constexpr std::size_t kMaxOutstanding = 1u << 20;

 private:
  struct Socket;
  // The connection's own handshake commands and what their replies mean.
  enum class Step : std::uint8_t {
    command,         // a caller's command: the reply goes to the sink
    must_succeed,    // AUTH, SELECT: an error reply fails the connection
    may_fail,        // SCRIPT LOAD: the reply is not checked
    server_info,     // INFO server: run_id, uptime_in_seconds
    config_get,      // CONFIG GET <one parameter>: maxmemory-policy, appendonly, appendfsync
  };
  struct Pending {
    std::shared_ptr<ReplySink> sink;  // null for handshake steps
    std::uint32_t tag = 0;
    std::uint64_t sent_ns = 0;
    Step step = Step::command;
  };
  void on_handshake_reply(Step step, const redisReply* reply);

  struct Resolve;
  void connect();
  void start_tcp(const struct sockaddr* address);
  void on_connected(int status);
  void on_handshake_done();
  void on_read(const char* data, std::size_t size);
  void deliver(Pending pending, const redisReply* reply);
  void fail(std::string reason);  // drop the socket, fail all pending, schedule reconnect
  void fail_pending(const std::string& reason);
  void schedule_reconnect();
  void arm_stall_check();
  void check_stall();
  void close_socket();

  EventLoop& loop_;
  const ConnectionOptions options_;
  const std::string name_;
  State state_ = State::disconnected;
  std::string last_error_ = "not connected yet";
  Socket* socket_ = nullptr;  // heap; frees itself in its close callback
  Resolve* resolving_ = nullptr;  // heap; frees itself in its callback
  std::unique_ptr<redisReader, void (*)(redisReader*)> reader_;
  std::deque<Pending> pending_;
  std::string out_;        // encoded commands not yet written
  std::size_t handshake_left_ = 0;  // handshake replies still expected
  Milliseconds backoff_{0};
  EventLoop::TimerId connect_timer_ = 0;
  EventLoop::TimerId reconnect_timer_ = 0;
  EventLoop::TimerId stall_timer_ = 0;
  std::uint64_t generation_ = 0;
  ServerInfo info_;  // bumps on every socket change; stale callbacks check it
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/connection.h — one pipelined connection to one Redis master, on the event loop.
//
// Owns its socket (a libuv TCP handle) and uses hiredis only for what hiredis 0.14 does
// well: the RESP reply parser (redisReader, bounded by ReplyReader against a hostile
// master) and command encoding. hiredis 0.14's async context has no connect or command
// timeouts and frees itself inside callbacks; owning the socket gives us deadlines,
// source-address binding, and a single owner for every handle.
//
// Replies come back in send order (Redis answers a connection's commands in order), so a
// FIFO of ReplySinks matches them. A round's deadline is enforced by its owner, not here:
// a command that timed out stays in the FIFO and its sink still gets the late reply, which
// is how a late grant is seen (and why the release sent after it lands after it).
//
// A rediss:// master (ConnectionOptions::tls set) speaks TLS through a TlsSession
// (lib/tls/tls_session.h, memory BIOs) between the socket and the parser; the glue is
// lib/tls/tls_transport.cpp (the start_tls / on_tls_read / flush_tls members below). The
// plain path does not go through it.
//
// Loop thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "detail/event_loop.h"
#include "detail/reply_reader.h"
#include "detail/ring_queue.h"
#include "detail/server_info.h"
#include "detail/uv_handle.h"
#include "redlock/options.h"

struct redisReply;

namespace redlock::detail {

class TlsContext;
class TlsSession;

// Receives the reply to one command, exactly once: `reply` non-null, or null with
// `failure` saying why no reply will come (connection lost, closed, handshake failed).
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  virtual void on_reply(std::uint32_t tag, const redisReply* reply, std::string_view failure) = 0;
  // The Client begins to shut down (Connection::begin_close) while command `tag`, written to
  // the socket, is unanswered: whatever it is answered now is dropped by the lingering socket.
  // The close's SCRIPT LOAD is queued behind it, so a script sent again now finds its script.
  virtual void on_close_unanswered(std::uint32_t /*tag*/) {}
  // Command `tag`, a release, is past its deadline under a backlog (Connection::release_late_sinks):
  // the sink is given up for what this returns, kept until the command is answered (null: nothing).
  virtual std::shared_ptr<ReplySink> late_stand_in(std::uint32_t /*tag*/) { return nullptr; }
};

struct ConnectionOptions {
  Endpoint endpoint;
  Milliseconds connect_timeout{1000};
  Milliseconds reconnect_min{50};
  Milliseconds reconnect_max{2000};
  Milliseconds stall_timeout{3000};
  std::string source_address;
  // Non-null: this master is rediss://; every connection is TLS with this context (which
  // outlives the Connection and keeps its sessions for resumption). Null: plain TCP.
  TlsContext* tls = nullptr;
  // Built anew for every connection (SCRIPT LOAD, and the permission probe, whose key and
  // token are fresh each time). Commands queued meanwhile wait until every step answered;
  // if the steps leave ServerInfo::not_permitted set, they are failed, never sent.
  std::function<std::vector<HandshakeStep>()> handshake_steps;
  // Set: a subscriber connection (release notifications, detail/release_watch.h). Once the
  // handshake is done every reply goes here, pushed messages and SUBSCRIBE acknowledgements
  // alike (RESP2 pub/sub does not answer commands one by one), instead of a ReplySink; bytes
  // are then accepted with nothing outstanding, each reply still bounded by ReplyReader and
  // handed over (and freed) as soon as it is complete, so a flood holds no more than one
  // reply. Commands are sent with send_push(), only while ready.
  std::function<void(const redisReply&)> on_push;
};

// The options every connection to master `endpoint` shares, lock connections and subscriber
// connections alike: timeouts, reconnect backoff, source address, and `tls` for rediss://
// masters (ignored for redis:// ones). The caller adds handshake_steps or on_push.
[[nodiscard]] ConnectionOptions connection_options(const ClientOptions& client, const Endpoint& endpoint, TlsContext* tls);

class Connection {
 public:
  enum class State : std::uint8_t { disconnected, connecting, handshaking, ready, closed };

  using ServerInfo = detail::ServerInfo;

  Connection(EventLoop& loop, ConnectionOptions options);
  ~Connection();  // close()
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Starts connecting (and reconnecting after every failure, with backoff).
  void start();

  // Queues one RESP-encoded command. While connecting it waits for the connection.
  // Returns false, without calling the sink, when there is no connection to wait for
  // (disconnected, closed) or this master's backlog is over its bound: last_error() says why.
  // `late_after_ns` (on now_ns(); 0: never) is when the sender stops needing the reply: past
  // it, while the backlog is long, the command keeps only its place in the reply order and
  // its reply is read and dropped (the sink is released, so a silent master holds no
  // sender's memory).
  // `release`: a release (compare-and-delete of our own token) has a reserve of its own past
  // both bounds, so that the release of a SET accepted just below them is not refused.
  // `sent_ns` (on now_ns(); 0: now) is when the sender took the time of sending, for the stall
  // check: a round sending to every master reads the clock once, not once per master.
  // `covered`: a failed acquire attempt's release, held to the commands bound alone on a plain
  // connection: its bytes are bounded by the room its attempt reserved (detail/release_room.h).
  // Not over TLS, where all unsent bytes together are held below kMaxUnsentTlsBytes (past it
  // the connection is dropped): there the release reserve holds it, as any release.
  bool send(std::string_view encoded, std::shared_ptr<ReplySink> sink, std::uint32_t tag,
            std::uint64_t late_after_ns = 0, bool release = false, std::uint64_t sent_ns = 0, bool covered = false);

  // A subscriber connection (ConnectionOptions::on_push): queues one command whose answer
  // comes through on_push. False when not ready or over the unsent-bytes bound.
  bool send_push(std::string_view encoded);

  // Writes everything queued since the last flush. Called before the loop polls.
  void flush();

  // The ACL refused a lock command on this ready connection (is_command_refusal): Redis applies
  // ACL SETUSER to live connections at once, which the handshake's check could not see.
  // `refusal` (the server's text) becomes ServerInfo::not_permitted (fence_not_permitted when
  // `fencing_only`: the round touched the fencing counter), so that no lock is sent here any
  // more; once every command already sent here has been answered, the connection reconnects
  // so that the check runs again (not sooner than reconnect_max after the last reconnect made
  // for this: a refusal the check does not foresee must not make it reconnect over and over).
  // A connection whose check finds the user may not run the lock paths (not_permitted), or
  // the fencing paths after such a live refusal, is made again the same way every
  // reconnect_max (jittered), so that a fixed ACL is seen.
  // Returns whether the master was permitted (for that) until now.
  bool permission_refused(bool fencing_only, std::string_view refusal);
  // INFO replication read again on this ready connection (MasterSet's periodic read): its
  // role, replica_of, role_error and replication IDs replace the handshake's.
  void role_read(const ServerInfo& read);

  // Best-effort write of what is queued, then closes the socket. Outstanding sinks get a
  // failure. No reconnect afterwards.
  void close();
  // The Client is shutting down: from now on a release is held to the count bound alone, not
  // to the bytes bound. Every acquire in flight gets its release at the shutdown, and SETs the
  // socket took no longer count against the bytes bound, so the reserve did not have room for
  // their releases (review 57: 9,864 to 16,286 keys left with 30,000 in flight). The bytes so
  // queued are bounded by the count (kMaxOutstanding * kReleaseReserveFactor releases) and
  // last until the close.
  // `first` (encoded; may be empty), when ready: sent ahead of everything the shutdown queues
  // and of what is queued but not written yet (review 59: releases begun in the same pass),
  // its reply dropped. MasterSet sends the release script's SCRIPT LOAD: a release written at
  // the close is EVALSHA, and a NOSCRIPT answer (the masters' SCRIPT FLUSH) reaches no round
  // any more to be sent again with EVAL (review 57: the keys of acquires in flight were left).
  // Then each command written before it and not answered is offered to its sink
  // (ReplySink::on_close_unanswered): a release's EVALSHA among them, answered NOSCRIPT, had
  // nothing behind it (the lock was left held on the masters slow to answer).
  void begin_close(std::string_view first);

  [[nodiscard]] State state() const noexcept { return state_; }
  [[nodiscard]] bool ready() const noexcept { return state_ == State::ready; }
  // Ready, or connecting: a command sent now is queued (not refused) and answered once ready.
  [[nodiscard]] bool up_or_connecting() const noexcept {
    return state_ == State::ready || state_ == State::connecting || state_ == State::handshaking;
  }
  [[nodiscard]] const std::string& last_error() const noexcept { return last_error_; }
  // Why the connection failed, if it has failed since it was last ready (empty before the
  // first failure and once a handshake completes again).
  [[nodiscard]] const std::string& failed_because() const noexcept { return failed_because_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] std::size_t outstanding() const noexcept { return pending_.size(); }
  // Whether the current connection resumed a TLS session from its context's cache (an
  // abbreviated handshake); false on plain masters and before the TLS handshake.
  [[nodiscard]] bool tls_session_reused() const noexcept;
  // Valid once ready(); describes the server of the current connection.
  [[nodiscard]] const ServerInfo& server_info() const noexcept { return info_; }

  // Called (on the loop thread) every time a connection becomes ready, after the handshake.
  std::function<void()> on_ready;
  // Called (on the loop thread) every time a connection is lost (not on close()), after its
  // pending sinks were failed; a reconnect follows.
  std::function<void()> on_down;

  // What one master may make the client queue while it does not answer (frozen, or
  // black-holed with TCP up) before the stall check drops its connection
  // (DESIGN.md "Hostile masters"): past either bound send() refuses, and the master is a
  // missing vote until it answers or reconnects.
  // Commands without a reply. Past their deadline each costs one Pending and no sink.
  static constexpr std::size_t kMaxOutstanding = 1u << 16;
  // Encoded bytes the master's socket has not taken yet (ours and libuv's write queue), each
  // queued write counted with what it costs beyond its bytes (backlog_cost; releases: the
  // bytes alone, see send).
  static constexpr std::size_t kMaxUnsentBytes = 1u << 20;
  // Releases may use this much more of each, so that every SET below the bounds has room for
  // its release: a release encodes to about 30 bytes more than a SET, so SETs of short keys
  // filling kMaxUnsentBytes with their releases behind them come to about 2.4 times it (with
  // 2, review 55 saw 525 releases of a burst of 10,000 acquires refused at ~Client).
  static constexpr std::size_t kReleaseReserveFactor = 3;
  // TLS: unsent bytes, commands and the engine's own records together, past which the
  // connection is dropped. The engine answers a master's KeyUpdate request on its own; a master
  // that keeps asking and never reads would otherwise make the answers pile up without end (an
  // idle connection has no command whose stall would end it). Commands alone stay below
  // kMaxUnsentBytes * kReleaseReserveFactor (a failed attempt's release too: `covered` holds
  // only on plain connections); the rest is room for records of the engine's own.
  static constexpr std::size_t kMaxUnsentTlsBytes = kMaxUnsentBytes * (kReleaseReserveFactor + 1);
  // Backlog above which late commands give up their sinks; below it a late reply still
  // reaches its sender (a late grant then strengthens its lock).
  static constexpr std::size_t kKeepLateSinksUpTo = 256;

 private:
  struct Socket;
  // The connection's own handshake commands and what their replies mean.
  enum class Step : std::uint8_t {
    command,       // a caller's command: the reply goes to the sink
    must_succeed,  // AUTH, SELECT: an error reply fails the connection
    checked,       // a HandshakeStep: its check reads the reply (tag: index in steps_)
    late,          // a caller's command whose sender no longer needs the reply: dropped
    server_info,   // INFO server: run_id, uptime_in_seconds
    replication,   // INFO replication: role
    persistence,   // INFO persistence: AOF rewrites since the start (restart guard)
    config_get,    // CONFIG GET <one parameter>: maxmemory-policy, appendonly, appendfsync
  };
  struct Pending {
    std::shared_ptr<ReplySink> sink;  // null for handshake steps
    std::uint32_t tag = 0;
    std::uint64_t sent_ns = 0;
    Step step = Step::command;
    bool release = false;             // see send()
    std::uint64_t late_after_ns = 0;  // see send(); 0: the sink is kept until answered
  };
  void on_handshake_reply(Step step, const redisReply* reply);

  struct Resolve;
  void connect();
  void start_tcp(const struct sockaddr* address);
  void on_connected(int status);
  void start_handshake();  // our own handshake (AUTH, SELECT, INFO, CONFIG, steps_)
  void on_handshake_done();
  // Writes `bytes` (moved into the write request when the socket does not take them at once).
  void write_owned(std::string bytes);
  void write_bytes(std::string& bytes);  // flush() and write_owned(), through write_to
  // TLS glue (lib/tls/tls_transport.cpp); used only when options_.tls is set.
  void start_tls();
  [[nodiscard]] std::size_t tls_read_room(std::size_t capacity) const noexcept;
  // `data` is the socket's read buffer (`capacity` bytes), reused for the plaintext.
  void on_tls_read(char* data, std::size_t size, std::size_t capacity);
  void on_tls_eof(char* buffer, std::size_t capacity);
  bool drain_tls(char* buffer, std::size_t capacity);
  void flush_tls();
  // close(): what is left to say over TLS (queued commands, then a close_notify), encrypted.
  [[nodiscard]] std::string tls_goodbye();
  static int start_reading(Socket& socket);  // 0, or a libuv error
  void on_socket_read(std::size_t size);     // `size` bytes read into the socket's buffer
  void pace_reads(std::uint64_t read_began);
  // Reading may hold one pass of the loop this long beyond what its replies paid for (this much
  // each) before it waits for the next pass.
  static constexpr std::uint64_t kReadBudgetNs = 10'000'000;
  static constexpr std::uint64_t kReadCreditPerReplyNs = 1'000'000;
  void on_read(const char* data, std::size_t size);
  [[nodiscard]] bool pushing() const noexcept { return options_.on_push && state_ == State::ready; }
  void deliver(Pending pending, const redisReply* reply);
  void fail(std::string reason);  // drop the socket, fail all pending, schedule reconnect
  void fail_pending(const std::string& reason);
  void schedule_reconnect();
  void release_late_sinks();
  [[nodiscard]] std::size_t unsent_bytes() const noexcept;
  // unsent_bytes plus what the queued writes cost beyond their bytes (kQueuedWriteCost each).
  [[nodiscard]] std::size_t backlog_cost() const noexcept;
  void arm_stall_check(std::uint64_t at = 0);  // at (now_ns()); 0: stall_timeout past the last answer
  void check_stall();
  // Bytes the master sent that this socket has not read yet (FIONREAD).
  [[nodiscard]] std::size_t unread_bytes() const noexcept;
  // A stall check that found unread bytes looks again this much later (after the loop reads).
  static constexpr std::uint64_t kStallRecheckNs = 1'000'000;
  // However often the master answers, its oldest command waits at most this many stall_timeouts.
  static constexpr std::uint64_t kStallWaitFactor = 8;
  void recheck_permissions();  // permission_refused()'s reconnect, once nothing is outstanding
  void close_socket();
  // The one write path: 0, or a libuv error with nothing queued (close() ignores it).
  static int write_to(Socket& socket, std::string& bytes);
  static void linger(std::unique_ptr<Socket, UvClose<Socket>> socket, std::uint64_t for_ns);
  static void extend_linger(Socket* socket);  // the master answered while lingering
  static void on_linger_timer(uv_timer_t* due);
  static void end_linger(Socket* socket);
  // Lingering (close()): how long past the master's last answer at least, and never longer
  // than this after the close.
  static constexpr std::uint64_t kLingerStepNs = 100'000'000;
  static constexpr std::uint64_t kMaxLingerNs = 2'000'000'000;

  EventLoop& loop_;
  const ConnectionOptions options_;
  const std::string name_;
  State state_ = State::disconnected;
  bool closing_ = false;  // see begin_close()
  // flush_tls left part of a command in out_ (the engine took the rest): see begin_close().
  bool out_begins_inside_command_ = false;
  std::string last_error_ = "not connected yet";
  std::string failed_because_;  // see failed_because()
  // The current socket (see detail/uv_handle.h); null while disconnected.
  std::unique_ptr<Socket, UvClose<Socket>> socket_;
  Resolve* resolving_ = nullptr;  // owned by its pending callback, which frees it
  // One per socket (closed with it, replaced by the next). Bytes are fed only while a command
  // is outstanding (anything else is refused at once), and one reply may hold at most
  // ReplyLimits' bytes and elements.
  std::unique_ptr<ReplyReader> reader_;
  // One per socket of a rediss:// master, made when TCP connects; null on plain masters.
  std::unique_ptr<TlsSession> tls_;
  RingQueue<Pending> pending_;
  std::size_t late_scan_ = 0;  // pending_[0, late_scan_) has been looked at by release_late_sinks()
  std::string out_;        // encoded commands not yet written
  // Callers' commands queued before the handshake finished: written only once it proved
  // this connection may run them (see ConnectionOptions::handshake_steps).
  std::string held_;
  std::vector<HandshakeStep> steps_;  // this connection's handshake steps
  std::size_t handshake_left_ = 0;  // handshake replies still expected
  Milliseconds backoff_{0};
  EventLoop::TimerId connect_timer_ = 0;
  EventLoop::TimerId reconnect_timer_ = 0;
  EventLoop::TimerId stall_timer_ = 0;
  bool looked_again_ = false;      // the stall check looked again for unread bytes since the last answer
  std::uint64_t looked_at_pass_ = 0;  // EventLoop::passes() when it did (it counts after a poll)
  std::uint64_t answered_ns_ = 0;  // loop time of the last reply to a command read (the stall check)
  // pace_reads: replies read since the last read's end, and the loop time this pass's reads have
  // taken beyond what their replies paid for.
  std::size_t replies_read_ = 0;
  std::uint64_t read_debt_ns_ = 0;
  std::uint64_t read_pass_ = 0;  // the loop's pass read_debt_ns_ counts in
  // permission_refused(): a reconnect to check again is wanted (for this socket), and the
  // earliest it may be made.
  bool recheck_wanted_ = false;
  // A fenced round was refused on a live connection: the fencing permission is rechecked
  // periodically until a handshake finds it again (kept across reconnects).
  bool fencing_refused_live_ = false;
  std::uint64_t recheck_not_before_ns_ = 0;
  EventLoop::TimerId recheck_timer_ = 0;
  std::uint64_t generation_ = 0;  // bumps on every socket change; stale callbacks check it
  ServerInfo info_;
};

}  // namespace redlock::detail

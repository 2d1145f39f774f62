// SPDX-License-Identifier: Apache-2.0
// redlock::support — launch and control real redis-server processes.
//
// Test-and-tooling helper used by the unit tests, the demo, the benchmarks
// and the chaos harness. Each RedisServer owns one redis-server child
// process plus a private temporary directory (data dir and logfile), and
// can freeze (SIGSTOP), thaw, kill, stop and restart it on the same port.
// Not part of the redlock library proper; never link it into production code.
//
// Threading: one RedisServer (or RedisServerGroup) is used from one thread
// at a time; distinct instances are independent. The child is started with
// PR_SET_PDEATHSIG, which Linux ties to the *thread* that forked it: the
// server is SIGKILLed when the thread that constructed or restart()ed it
// exits, so do that from a thread that outlives the server (e.g. main).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace redlock::support {

// TLS for a test server (Redis 7 built with TLS, as Debian's is). Off unless cert_file is
// set; then the server listens ONLY with TLS (--port 0 --tls-port port()), uri() says
// rediss://, and the helper's own connections (the readiness probe, command()) speak TLS
// too (without verifying the server: they check that it is our child, by process id, as
// in plain mode, and must work with the deliberately broken certificates of the tests).
struct RedisServerTlsOptions {
  std::string cert_file;     // --tls-cert-file (PEM); non-empty turns TLS on
  std::string key_file;      // --tls-key-file
  std::string ca_cert_file;  // --tls-ca-cert-file: CAs that sign client certificates
  // --tls-auth-clients: "yes" (a client certificate is required), "no", "optional".
  std::string auth_clients = "no";
  // --tls-protocols, e.g. "TLSv1.1" or "TLSv1.2 TLSv1.3"; empty = Redis's default.
  std::string protocols;
  // --tls-ciphers (TLS 1.2 and lower), e.g. "DEFAULT:@SECLEVEL=0" to allow TLS 1.1;
  // empty = Redis's default.
  std::string ciphers;
  // Certificate and key the helper's own connections present (needed when auth_clients
  // is "yes"); empty = none.
  std::string client_cert_file;
  std::string client_key_file;
};

struct RedisServerOptions {
  // Loopback address to listen on (and to connect to).
  std::string bind = "127.0.0.1";
  // 0 = pick a free port; the pick is retried if redis loses the race for it.
  std::uint16_t port = 0;
  // false: no RDB, no AOF. true: AOF with fsync on every write, so
  // acknowledged writes survive kill() + restart().
  bool persistence = false;
  // When non-empty the server runs with --requirepass and command() AUTHs.
  std::string password;
  // Appended verbatim to the command line, e.g. {"--enable-debug-command", "yes"}.
  std::vector<std::string> extra_args;
  // Looked up in PATH unless it contains a '/'.
  std::string executable = "redis-server";
  // Extra "NAME=value" entries for the server's environment, on top of this process's
  // own (an entry replaces an inherited variable of the same name), applied at every
  // start including restart(), e.g. {"LD_PRELOAD=/path/lib.so", "REDLOCK_CLOCK_FILE=/tmp/c"}.
  // The constructor throws std::invalid_argument for an entry without '=' or without a name.
  // A RedisServerGroup gives every server the same entries.
  std::vector<std::string> environment;
  // How long the constructor and restart() wait for the first PONG.
  std::chrono::milliseconds start_timeout{5000};
  // TLS-only server when tls.cert_file is set (see RedisServerTlsOptions).
  RedisServerTlsOptions tls;
};

// Owned, recursive copy of a hiredis reply (no hiredis types leak out).
struct Reply {
  enum class Type { string, status, error, integer, nil, array };
  Type type = Type::nil;
  std::string str;  // string, status and error replies
  long long integer = 0;
  std::vector<Reply> elements;  // array replies
};

class RedisServer {
 public:
  // Starts the server and waits for PING. Throws std::runtime_error (with
  // the port and the tail of the server log) if it exits or does not answer
  // within options.start_timeout.
  explicit RedisServer(RedisServerOptions options = {});
  // Kills the process (thawing it first), reaps it and deletes its temp dir.
  ~RedisServer();

  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;
  RedisServer(RedisServer&&) = delete;
  RedisServer& operator=(RedisServer&&) = delete;

  std::uint16_t port() const noexcept { return port_; }
  const std::string& host() const noexcept { return options_.bind; }
  std::string uri() const;  // "redis://HOST:PORT" ("rediss://" with TLS; IPv6 hosts bracketed)
  bool tls() const noexcept { return !options_.tls.cert_file.empty(); }
  const std::string& data_dir() const noexcept { return dir_; }

  // pid() and running() reap the child if it died on its own, so they
  // reflect crashes and external kills, not only calls made here.
  pid_t pid() const;  // -1 when not running
  bool running() const;

  void freeze();  // SIGSTOP; std::logic_error if not running
  void thaw();    // SIGCONT; no-op unless frozen
  void kill();    // SIGKILL + reap; no-op if not running
  void stop();    // SIGTERM, up to 5 s grace, then SIGKILL; no-op if not running
  // Stops the server if it is running, then starts it again on the same port
  // and data dir (so an AOF, if enabled, is reloaded) and waits for PING.
  void restart();
  // restart() with `extra_args` appended to the command line, for this start and every later
  // one (e.g. {"--appendonly", "no"}: a persistent server back without loading its AOF).
  void restart(const std::vector<std::string>& extra_args);

  // One synchronous command on a fresh connection (1 s connect and I/O
  // timeout; over TLS when the server is TLS-only). Redis error replies are returned as Reply::Type::error; throws
  // std::runtime_error if the server is not running, unreachable or times out.
  Reply command(const std::vector<std::string>& argv) const;

  // Last `lines` lines of the server's logfile (stdout/stderr included).
  std::string log_tail(std::size_t lines = 20) const;

 private:
  enum class StartResult { ready, port_taken };

  void start_on_fixed_or_free_port();
  StartResult try_start();
  void spawn();
  bool reap(bool block) const;
  void kill_and_reap() noexcept;
  std::string describe() const;

  RedisServerOptions options_;
  std::string executable_path_;
  std::string dir_;
  std::string log_path_;
  std::uint16_t port_ = 0;
  // Mutable so the const observers can reap a child that died by itself.
  mutable pid_t pid_ = -1;
  mutable int last_wait_status_ = 0;
  bool frozen_ = false;
};

// N independent servers with identical options (each on its own free port).
class RedisServerGroup {
 public:
  // Throws std::invalid_argument if n > 1 and options.port is fixed.
  explicit RedisServerGroup(std::size_t n, RedisServerOptions options = {});

  std::size_t size() const noexcept { return servers_.size(); }
  RedisServer& operator[](std::size_t i) { return *servers_.at(i); }
  const RedisServer& operator[](std::size_t i) const { return *servers_.at(i); }
  std::vector<std::string> uris() const;

 private:
  std::vector<std::unique_ptr<RedisServer>> servers_;
};

}  // namespace redlock::support

// SPDX-License-Identifier: Apache-2.0
#include "support/redis_server.h"

#include <hiredis/hiredis.h>

#include "support/hiredis_handle.h"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

namespace redlock::support {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kCommandTimeout = 1000ms;
constexpr std::chrono::milliseconds kProbeConnectTimeout = 100ms;
constexpr std::chrono::milliseconds kProbeIoTimeout = 500ms;
constexpr std::chrono::milliseconds kPollInterval = 10ms;
constexpr std::chrono::milliseconds kStopGrace = 5000ms;
constexpr int kFreePortAttempts = 20;
constexpr int kRestartAttempts = 5;
constexpr std::chrono::milliseconds kRestartRetryDelay = 200ms;

// ---------------------------------------------------------------- hiredis glue

using ContextPtr = RedisContextPtr;
using ReplyPtr = RedisReplyPtr;

// Returns nullptr and fills `error` on failure. The I/O timeout matters as
// much as the connect timeout: a frozen server still completes the TCP
// handshake (the kernel does it), it just never answers.
ContextPtr connect_to(const std::string& host, std::uint16_t port,
                      std::chrono::milliseconds connect_timeout,
                      std::chrono::milliseconds io_timeout, std::string& error) {
  ContextPtr ctx(redisConnectWithTimeout(host.c_str(), port, to_timeval(connect_timeout)));
  if (!ctx) {
    error = "cannot allocate hiredis context";
    return nullptr;
  }
  if (ctx->err != 0) {
    error = ctx->errstr;
    return nullptr;
  }
  if (redisSetTimeout(ctx.get(), to_timeval(io_timeout)) != REDIS_OK) {
    error = ctx->errstr;
    return nullptr;
  }
  return ctx;
}

// hiredis writes with write(2), so a server dying between connect and write
// raises SIGPIPE, whose default action would kill the whole test binary.
// Block it on this thread while we talk to redis and swallow any instance
// we caused; the process-wide disposition is left alone.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() noexcept {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_mask_);
  }
  ~ScopedSigpipeBlock() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec zero{};
        while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_{};
  sigset_t old_mask_{};
  bool was_pending_ = false;
};

ReplyPtr run(redisContext& ctx, const std::vector<std::string>& argv) {
  ScopedSigpipeBlock no_sigpipe;
  return command_argv(ctx, argv);
}

Reply convert(const redisReply& r) {
  Reply out;
  switch (r.type) {
    case REDIS_REPLY_STRING:
      out.type = Reply::Type::string;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::status;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::error;
      out.str.assign(r.str, r.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::integer;
      out.integer = r.integer;
      break;
    case REDIS_REPLY_NIL:
      out.type = Reply::Type::nil;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::array;
      out.elements.reserve(r.elements);
      for (std::size_t i = 0; i < r.elements; ++i) out.elements.push_back(convert(*r.element[i]));
      break;
    default:
      throw std::runtime_error("unexpected hiredis reply type " + std::to_string(r.type));
  }
  return out;
}

class UniqueFd {
 public:
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// ---------------------------------------------------------------- TLS glue
//
// hiredis 0.14 has no TLS, so a TLS-only server is probed with a small blocking OpenSSL
// client of our own; replies are parsed with hiredis's reader as in plain mode. It does
// not verify the server (the tests give servers broken certificates on purpose, and the
// probe identifies our child by its process id instead).

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const noexcept { SSL_CTX_free(ctx); }
};
struct SslFree {
  void operator()(SSL* ssl) const noexcept { SSL_free(ssl); }
};
struct ReaderFree {
  void operator()(redisReader* reader) const noexcept { redisReaderFree(reader); }
};

std::string resp_encode(const std::vector<std::string>& argv) {
  std::string out = "*" + std::to_string(argv.size()) + "\r\n";
  for (const auto& arg : argv) out += "$" + std::to_string(arg.size()) + "\r\n" + arg + "\r\n";
  return out;
}

// Connects with a timeout; the socket is returned blocking with SO_RCVTIMEO/SO_SNDTIMEO.
int connect_blocking(const std::string& host, std::uint16_t port, std::chrono::milliseconds connect_timeout,
                     std::chrono::milliseconds io_timeout, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    error = std::string("getaddrinfo: ") + gai_strerror(rc);
    return -1;
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, &freeaddrinfo);
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return -1;
  }
  if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0 && errno != EINPROGRESS) {
    error = std::string("connect: ") + std::strerror(errno);
    ::close(fd);
    return -1;
  }
  pollfd pfd{fd, POLLOUT, 0};
  int so_error = 0;
  socklen_t len = sizeof so_error;
  if (::poll(&pfd, 1, static_cast<int>(connect_timeout.count())) != 1 ||
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0) {
    error = so_error != 0 ? std::string("connect: ") + std::strerror(so_error) : "connect timed out";
    ::close(fd);
    return -1;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const timeval tv = to_timeval(io_timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

// Sends `commands` pipelined over one TLS connection and returns their replies, or
// std::nullopt with `error` set.
std::optional<std::vector<Reply>> tls_exchange(const RedisServerOptions& options, std::uint16_t port,
                                               const std::vector<std::vector<std::string>>& commands,
                                               std::chrono::milliseconds connect_timeout,
                                               std::chrono::milliseconds io_timeout, std::string& error) {
  ERR_clear_error();
  auto fail = [&error](std::string what) -> std::optional<std::vector<Reply>> {
    const unsigned long code = ERR_get_error();
    const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
    error = reason != nullptr ? what + ": " + reason : what;
    ERR_clear_error();
    return std::nullopt;
  };
  const std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  if (!ctx) return fail("SSL_CTX_new");
  // Down to TLS 1.0 at security level 0, so a server restricted to an old protocol (as
  // the tests make on purpose) can still be probed.
  SSL_CTX_set_min_proto_version(ctx.get(), 0);
  SSL_CTX_set_security_level(ctx.get(), 0);
  if (SSL_CTX_set_cipher_list(ctx.get(), "DEFAULT:@SECLEVEL=0") != 1) return fail("cipher list");
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  const auto& tls = options.tls;
  if (!tls.client_cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), tls.client_cert_file.c_str()) != 1) {
      return fail("client certificate " + tls.client_cert_file);
    }
    if (SSL_CTX_use_PrivateKey_file(ctx.get(), tls.client_key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail("client key " + tls.client_key_file);
    }
  }
  const UniqueFd fd(connect_blocking(options.bind, port, connect_timeout, io_timeout, error));
  if (fd.get() < 0) return std::nullopt;
  const std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx.get()));
  if (!ssl || SSL_set_fd(ssl.get(), fd.get()) != 1) return fail("SSL_new");
  ScopedSigpipeBlock no_sigpipe;
  if (SSL_connect(ssl.get()) != 1) return fail("TLS handshake");
  std::string request;
  for (const auto& argv : commands) request += resp_encode(argv);
  std::size_t written = 0;
  if (SSL_write_ex(ssl.get(), request.data(), request.size(), &written) != 1 || written != request.size()) {
    return fail("TLS write");
  }
  const std::unique_ptr<redisReader, ReaderFree> reader(redisReaderCreate());
  if (!reader) return fail("redisReaderCreate");
  std::vector<Reply> replies;
  char buffer[16 * 1024];
  while (replies.size() < commands.size()) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK) {
      error = "protocol error in reply";
      return std::nullopt;
    }
    if (raw != nullptr) {
      const RedisReplyPtr reply(static_cast<redisReply*>(raw));
      replies.push_back(convert(*reply));
      continue;
    }
    std::size_t got = 0;
    // TLS 1.3 with a required client certificate: a refusal arrives here, on the read.
    if (SSL_read_ex(ssl.get(), buffer, sizeof buffer, &got) != 1) return fail("TLS read");
    if (redisReaderFeed(reader.get(), buffer, got) != REDIS_OK) {
      error = "protocol error in reply";
      return std::nullopt;
    }
  }
  return replies;
}

// True only if the server on `port` answers PING *and* is our child: with
// auto-picked ports another process may grab the port between our pick and
// redis's bind, and we must not mistake that server for ours.
bool is_our_child(std::string_view info, pid_t expected_pid) {
  constexpr std::string_view key = "process_id:";
  const auto at = info.find(key);
  if (at == std::string_view::npos) return false;
  return std::atol(std::string(info.substr(at + key.size(), 20)).c_str()) == static_cast<long>(expected_pid);
}

bool answers_ping(const RedisServerOptions& options, std::uint16_t port, pid_t expected_pid) {
  std::string error;
  if (!options.tls.cert_file.empty()) {
    std::vector<std::vector<std::string>> commands;
    if (!options.password.empty()) commands.push_back({"AUTH", options.password});
    commands.push_back({"PING"});
    commands.push_back({"INFO", "server"});
    const auto replies = tls_exchange(options, port, commands, kProbeConnectTimeout, kProbeIoTimeout, error);
    if (!replies) return false;
    for (const auto& reply : *replies) {
      if (reply.type == Reply::Type::error) return false;
    }
    const Reply& pong = (*replies)[replies->size() - 2];
    const Reply& info = replies->back();
    return pong.type == Reply::Type::status && pong.str == "PONG" && info.type == Reply::Type::string &&
           is_our_child(info.str, expected_pid);
  }
  const ContextPtr ctx =
      connect_to(options.bind, port, kProbeConnectTimeout, kProbeIoTimeout, error);
  if (!ctx) return false;
  if (!options.password.empty()) {
    const ReplyPtr auth = run(*ctx, {"AUTH", options.password});
    if (!auth || auth->type == REDIS_REPLY_ERROR) return false;
  }
  const ReplyPtr pong = run(*ctx, {"PING"});
  // While an AOF is loading redis answers -LOADING; keep polling.
  if (!pong || pong->type != REDIS_REPLY_STATUS || std::string_view(pong->str, pong->len) != "PONG") {
    return false;
  }
  const ReplyPtr info = run(*ctx, {"INFO", "server"});
  if (!info || info->type != REDIS_REPLY_STRING) return false;
  const std::string_view text(info->str, info->len);
  constexpr std::string_view key = "process_id:";
  const auto at = text.find(key);
  if (at == std::string_view::npos) return false;
  return std::atol(info->str + at + key.size()) == static_cast<long>(expected_pid);
}

// ---------------------------------------------------------------- OS helpers


[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

// Bind port 0 and let the kernel choose. There is an unavoidable window
// between closing this socket and redis binding; callers retry on loss.
std::uint16_t pick_free_port(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(address.c_str(), "0", &hints, &found); rc != 0) {
    throw std::runtime_error("invalid bind address '" + address + "': " + gai_strerror(rc));
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, &freeaddrinfo);

  const UniqueFd fd(::socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) throw_errno("socket");
  if (::bind(fd.get(), found->ai_addr, found->ai_addrlen) != 0) {
    throw_errno("bind " + address + ":0");
  }
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    throw_errno("getsockname");
  }
  const in_port_t net_port = local.ss_family == AF_INET6
                                 ? reinterpret_cast<const sockaddr_in6&>(local).sin6_port
                                 : reinterpret_cast<const sockaddr_in&>(local).sin_port;
  return ntohs(net_port);
}

// Resolved in the parent so a missing binary is a clear exception rather
// than a child that exits 127, and so the child can use plain execve (execvp
// is not async-signal-safe, and the parent may be multi-threaded).
std::string resolve_executable(const std::string& name) {
  if (name.empty()) throw std::invalid_argument("RedisServerOptions::executable is empty");
  if (name.find('/') != std::string::npos) return name;
  const char* env_path = std::getenv("PATH");
  const std::string_view path =
      env_path != nullptr && *env_path != '\0' ? env_path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= path.size()) {
    const std::size_t end = std::min(path.find(':', begin), path.size());
    const std::string_view dir = path.substr(begin, end - begin);
    const std::string candidate = (dir.empty() ? std::string(".") : std::string(dir)) + "/" + name;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) == 0 && std::filesystem::is_regular_file(candidate, ec)) {
      return candidate;
    }
    begin = end + 1;
  }
  throw std::runtime_error("executable '" + name + "' not found in PATH");
}

std::string make_temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string dir = (base != nullptr && *base != '\0' ? std::string(base) : std::string("/tmp")) +
                    "/redlock-redis-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) throw_errno("mkdtemp " + dir);
  return dir;
}

std::uintmax_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : size;
}

std::string read_file_from(const std::string& path, std::uintmax_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(static_cast<std::streamoff>(offset));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

void sleep_for(std::chrono::milliseconds ms) { std::this_thread::sleep_for(ms); }

}  // namespace

// ---------------------------------------------------------------- RedisServer

RedisServer::RedisServer(RedisServerOptions options) : options_(std::move(options)) {
  if (options_.start_timeout <= 0ms) {
    throw std::invalid_argument("RedisServerOptions::start_timeout must be positive");
  }
  for (const auto& entry : options_.environment) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw std::invalid_argument("RedisServerOptions::environment: '" + entry +
                                  "' is not NAME=value");
    }
  }
  executable_path_ = resolve_executable(options_.executable);
  dir_ = make_temp_dir();
  log_path_ = dir_ + "/redis.log";
  try {
    start_on_fixed_or_free_port();
  } catch (...) {
    kill_and_reap();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

RedisServer::~RedisServer() {
  kill_and_reap();
  try {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  } catch (...) {
    // remove_all may still throw bad_alloc; a leaked temp dir is harmless.
  }
}

std::string RedisServer::uri() const {
  const bool ipv6 = options_.bind.find(':') != std::string::npos;
  return (tls() ? "rediss://" : "redis://") + (ipv6 ? "[" + options_.bind + "]" : options_.bind) + ":" +
         std::to_string(port_);
}

pid_t RedisServer::pid() const {
  reap(false);
  return pid_;
}

bool RedisServer::running() const { return pid() > 0; }

void RedisServer::freeze() {
  if (!running()) throw std::logic_error("freeze(): " + describe() + " is not running");
  if (frozen_) return;
  ::kill(pid_, SIGSTOP);
  // SIGSTOP is asynchronous; wait until the child really is stopped so a
  // request sent right after freeze() cannot still be served.
  int status = 0;
  pid_t r = 0;
  do {
    r = ::waitpid(pid_, &status, WUNTRACED);
  } while (r == -1 && errno == EINTR);
  if (r == pid_ && WIFSTOPPED(status)) {
    frozen_ = true;
    return;
  }
  // It died instead of stopping (or was reaped elsewhere: ECHILD).
  last_wait_status_ = r == pid_ ? status : 0;
  pid_ = -1;
}

void RedisServer::thaw() {
  if (!frozen_) return;
  frozen_ = false;
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void RedisServer::kill() {
  if (running()) kill_and_reap();
}

void RedisServer::stop() {
  if (!running()) return;
  ::kill(pid_, SIGTERM);
  // A stopped process only acts on SIGTERM once continued.
  thaw();
  const auto deadline = Clock::now() + kStopGrace;
  while (Clock::now() < deadline) {
    if (reap(false)) return;
    sleep_for(kPollInterval);
  }
  kill_and_reap();
}

void RedisServer::restart() {
  stop();
  // Our own old connections may leave the port in TIME_WAIT, which redis's
  // SO_REUSEADDR ignores; a retry only helps if a stranger took the port.
  for (int attempt = 1;; ++attempt) {
    if (try_start() == StartResult::ready) return;
    if (attempt == kRestartAttempts) {
      throw std::runtime_error(describe() + ": port still in use after " +
                               std::to_string(kRestartAttempts) +
                               " restart attempts; log tail:\n" + log_tail());
    }
    sleep_for(kRestartRetryDelay);
  }
}

void RedisServer::restart(const std::vector<std::string>& extra_args) {
  options_.extra_args.insert(options_.extra_args.end(), extra_args.begin(), extra_args.end());
  restart();
}

Reply RedisServer::command(const std::vector<std::string>& argv) const {
  if (argv.empty()) throw std::invalid_argument("command(): empty argv");
  // Checked first so that, once our server is gone, a stranger that reused
  // the port is never mistaken for it.
  if (!running()) throw std::runtime_error("command(): " + describe() + " is not running");
  std::string error;
  if (tls()) {
    std::vector<std::vector<std::string>> commands;
    if (!options_.password.empty()) commands.push_back({"AUTH", options_.password});
    commands.push_back(argv);
    auto replies = tls_exchange(options_, port_, commands, kCommandTimeout, kCommandTimeout, error);
    if (!replies) throw std::runtime_error(argv.front() + " to " + describe() + " over TLS failed: " + error);
    if (!options_.password.empty() && replies->front().type == Reply::Type::error) {
      throw std::runtime_error("AUTH rejected by " + describe() + ": " + replies->front().str);
    }
    return std::move(replies->back());
  }
  const ContextPtr ctx = connect_to(options_.bind, port_, kCommandTimeout, kCommandTimeout, error);
  if (!ctx) throw std::runtime_error("cannot connect to " + describe() + ": " + error);
  if (!options_.password.empty()) {
    const ReplyPtr auth = run(*ctx, {"AUTH", options_.password});
    if (!auth) throw std::runtime_error("AUTH to " + describe() + " failed: " + ctx->errstr);
    if (auth->type == REDIS_REPLY_ERROR) {
      throw std::runtime_error("AUTH rejected by " + describe() + ": " +
                               std::string(auth->str, auth->len));
    }
  }
  const ReplyPtr reply = run(*ctx, argv);
  if (!reply) {
    throw std::runtime_error(argv.front() + " to " + describe() + " failed: " + ctx->errstr);
  }
  return convert(*reply);
}

std::string RedisServer::log_tail(std::size_t lines) const {
  if (lines == 0) return {};
  // The log only grows across restarts; the tail is all anyone wants.
  constexpr std::uintmax_t kMaxBytes = 64 * 1024;
  const std::uintmax_t size = file_size_or_zero(log_path_);
  const std::string text = read_file_from(log_path_, size > kMaxBytes ? size - kMaxBytes : 0);
  std::size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') --pos;
  std::size_t newlines = 0;
  while (pos > 0) {
    if (text[pos - 1] == '\n' && ++newlines == lines) break;
    --pos;
  }
  return text.substr(pos);
}

void RedisServer::start_on_fixed_or_free_port() {
  const bool pick = options_.port == 0;
  const int attempts = pick ? kFreePortAttempts : 1;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    port_ = pick ? pick_free_port(options_.bind) : options_.port;
    if (try_start() == StartResult::ready) return;
  }
  throw std::runtime_error(describe() + ": port already in use" +
                           (pick ? " (gave up after " + std::to_string(kFreePortAttempts) +
                                       " free-port picks)"
                                 : std::string()) +
                           "; log tail:\n" + log_tail());
}

RedisServer::StartResult RedisServer::try_start() {
  // Only what this attempt logged decides whether it lost the port race.
  const std::uintmax_t log_offset = file_size_or_zero(log_path_);
  spawn();
  const auto deadline = Clock::now() + options_.start_timeout;
  for (;;) {
    if (reap(false)) {
      if (read_file_from(log_path_, log_offset).find("Address already in use") !=
          std::string::npos) {
        return StartResult::port_taken;
      }
      throw std::runtime_error(describe() + " exited during startup (" +
                               describe_wait_status(last_wait_status_) + "); log tail:\n" +
                               log_tail());
    }
    if (answers_ping(options_, port_, pid_)) return StartResult::ready;
    if (Clock::now() >= deadline) {
      kill_and_reap();
      throw std::runtime_error(describe() + " did not answer PING within " +
                               std::to_string(options_.start_timeout.count()) +
                               " ms; log tail:\n" + log_tail());
    }
    sleep_for(kPollInterval);
  }
}

void RedisServer::spawn() {
  const auto& tls = options_.tls;
  std::vector<std::string> args = {executable_path_,
                                   "--port", tls.cert_file.empty() ? std::to_string(port_) : "0",
                                   "--bind", options_.bind,
                                   "--dir", dir_,
                                   "--logfile", log_path_,
                                   "--daemonize", "no",
                                   // Loopback only; lets clients in without a password.
                                   "--protected-mode", "no",
                                   "--save", "",
                                   "--appendonly", options_.persistence ? "yes" : "no"};
  if (options_.persistence) args.insert(args.end(), {"--appendfsync", "always"});
  if (!options_.password.empty()) args.insert(args.end(), {"--requirepass", options_.password});
  if (!tls.cert_file.empty()) {
    args.insert(args.end(), {"--tls-port", std::to_string(port_), "--tls-cert-file", tls.cert_file,
                             "--tls-key-file", tls.key_file, "--tls-auth-clients", tls.auth_clients});
    if (!tls.ca_cert_file.empty()) args.insert(args.end(), {"--tls-ca-cert-file", tls.ca_cert_file});
    if (!tls.protocols.empty()) args.insert(args.end(), {"--tls-protocols", tls.protocols});
    if (!tls.ciphers.empty()) args.insert(args.end(), {"--tls-ciphers", tls.ciphers});
  }
  args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());

  // Everything the child needs is prepared here: between fork and exec in a
  // possibly multi-threaded parent only async-signal-safe calls are allowed.
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  // The environment: ours, minus the names options_.environment sets, then those entries.
  // Built here (not with setenv in the child) for the same reason as argv.
  std::vector<char*> envp;
  for (char** inherited = environ; inherited != nullptr && *inherited != nullptr; ++inherited) {
    const std::string_view entry(*inherited);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(
        options_.environment.begin(), options_.environment.end(), [name](const std::string& extra) {
          return extra.size() > name.size() && extra[name.size()] == '=' &&
                 std::string_view(extra).substr(0, name.size()) == name;
        });
    if (!replaced) envp.push_back(*inherited);
  }
  for (auto& entry : options_.environment) envp.push_back(entry.data());
  envp.push_back(nullptr);

  // Early failures (bad arguments) go to stderr before redis opens its
  // logfile, so stdout/stderr append to the same file.
  const UniqueFd log_fd(::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (log_fd.get() < 0) throw_errno("open " + log_path_);
  const UniqueFd null_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (null_fd.get() < 0) throw_errno("open /dev/null");

  rlimit nofile{};
  const int max_fd = ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < INT_MAX
                         ? static_cast<int>(nofile.rlim_cur)
                         : 65536;
  static constexpr char kExecFailed[] = "redlock support: execve failed for ";
  const char* const exe = executable_path_.c_str();
  const std::size_t exe_len = executable_path_.size();
  const pid_t parent = ::getpid();

  const pid_t child = ::fork();
  if (child < 0) throw_errno("fork");
  if (child == 0) {
    // No orphaned redis-servers if the test binary crashes. If the parent
    // already died before prctl took effect we were reparented: bail out.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // The mask survives exec; a blocked SIGTERM would make stop() useless.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(null_fd.get(), STDIN_FILENO);
    ::dup2(log_fd.get(), STDOUT_FILENO);
    ::dup2(log_fd.get(), STDERR_FILENO);
    // Other threads may have opened fds without O_CLOEXEC (hiredis does).
#ifdef SYS_close_range
    if (::syscall(SYS_close_range, 3U, ~0U, 0U) != 0)
#endif
      for (int fd = 3; fd < max_fd; ++fd) ::close(fd);
    ::execve(exe, argv.data(), envp.data());
    if (::write(STDERR_FILENO, kExecFailed, sizeof kExecFailed - 1) < 0 ||
        ::write(STDERR_FILENO, exe, exe_len) < 0 || ::write(STDERR_FILENO, "\n", 1) < 0) {
      // Nothing left to report to.
    }
    ::_exit(127);
  }
  pid_ = child;
  frozen_ = false;
}

// Returns true if there is no child (any more). Never signals: pid_ stays
// ours until reaped, so no signal can hit a recycled PID.
bool RedisServer::reap(bool block) const {
  if (pid_ <= 0) return true;
  int status = 0;
  pid_t r = 0;
  do {
    r = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
  } while (r == -1 && errno == EINTR);
  if (r == 0) return false;
  // r == -1 (ECHILD) means someone else reaped it, e.g. SIGCHLD set to SIG_IGN.
  last_wait_status_ = r == pid_ ? status : 0;
  pid_ = -1;
  return true;
}

void RedisServer::kill_and_reap() noexcept {
  if (pid_ <= 0) return;
  // SIGKILL also ends a SIGSTOPped process; no SIGCONT needed.
  ::kill(pid_, SIGKILL);
  reap(true);
  frozen_ = false;
}

std::string RedisServer::describe() const {
  return "redis-server on " + options_.bind + ":" + std::to_string(port_);
}

// ---------------------------------------------------------------- group

RedisServerGroup::RedisServerGroup(std::size_t n, RedisServerOptions options) {
  if (n > 1 && options.port != 0) {
    throw std::invalid_argument("RedisServerGroup: several servers cannot share fixed port " +
                                std::to_string(options.port));
  }
  servers_.reserve(n);
  for (std::size_t i = 0; i < n; ++i) servers_.push_back(std::make_unique<RedisServer>(options));
}

std::vector<std::string> RedisServerGroup::uris() const {
  std::vector<std::string> out;
  out.reserve(servers_.size());
  for (const auto& server : servers_) out.push_back(server->uri());
  return out;
}

}  // namespace redlock::support

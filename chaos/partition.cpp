// SPDX-License-Identifier: Apache-2.0
#include "partition.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace redlock::chaos {
namespace {

// Only loopback addresses may appear in a rule (the house rule for network faults).
void require_loopback(const std::string& address) {
  in_addr a{};
  if (::inet_pton(AF_INET, address.c_str(), &a) != 1 || (ntohl(a.s_addr) >> 24) != 127) {
    throw std::invalid_argument("partition: '" + address + "' is not an IPv4 loopback address");
  }
}

std::string table_script(const std::string& table, const std::vector<Cut>& cuts) {
  std::string s = "table inet " + table + " {\n  chain out {\n    type filter hook output priority 0; policy accept;\n";
  for (const Cut& c : cuts) {
    require_loopback(c.client_address);
    const std::string port = std::to_string(c.master_port);
    s += "    ip saddr " + c.client_address + " ip daddr 127.0.0.1 tcp dport " + port + " drop\n";
    s += "    ip saddr 127.0.0.1 ip daddr " + c.client_address + " tcp sport " + port + " drop\n";
  }
  return s + "  }\n}\n";
}

}  // namespace

NftResult run_nft(const std::string& script, const std::vector<std::string>& args) {
  std::array<int, 2> in{-1, -1};
  std::array<int, 2> out{-1, -1};
  std::array<int, 2> err{-1, -1};
  if (::pipe(in.data()) != 0 || ::pipe(out.data()) != 0 || ::pipe(err.data()) != 0) {
    return {-1, {}, std::string("pipe: ") + std::strerror(errno)};
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  for (const int fd : {in[1], out[0], err[0]}) posix_spawn_file_actions_addclose(&actions, fd);
  std::vector<std::string> words{"nft"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int spawned = ::posix_spawnp(&pid, "nft", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  for (const int fd : {in[0], out[1], err[1]}) ::close(fd);
  NftResult result;
  if (spawned != 0) {
    for (const int fd : {in[1], out[0], err[0]}) ::close(fd);
    result.error = std::string("cannot run nft: ") + std::strerror(spawned);
    return result;
  }
  for (std::size_t off = 0; off < script.size();) {
    const ssize_t n = ::write(in[1], script.data() + off, script.size() - off);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  ::close(in[1]);
  // nft's outputs here are a few lines: reading one pipe to its end, then the other, cannot
  // fill the second one's buffer.
  for (auto [fd, text] : {std::pair{out[0], &result.output}, std::pair{err[0], &result.error}}) {
    char buf[512];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text->append(buf, static_cast<std::size_t>(n));
    ::close(fd);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// Deletes tables left by harness processes that no longer exist (SIGKILLed runs).
void remove_stale_tables() {
  const NftResult listed = run_nft("", {"list", "tables", "inet"});
  std::size_t at = 0;
  const std::string prefix = "table inet redlock_chaos_";
  while ((at = listed.output.find(prefix, at)) != std::string::npos) {
    at += prefix.size();
    const std::size_t end = listed.output.find_first_not_of("0123456789", at);
    const std::string digits = listed.output.substr(at, end - at);
    if (digits.empty()) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (::kill(pid, 0) != 0 && errno == ESRCH) {
      std::fprintf(stderr, "partition: removing nft table redlock_chaos_%s left by a dead harness\n", digits.c_str());
      (void)run_nft("delete table inet redlock_chaos_" + digits + "\n");
    }
  }
}

std::optional<std::string> Partitioner::unavailable() {
  if (::geteuid() != 0) return "partitions need root (nftables); running as uid " + std::to_string(::geteuid());
  const std::string scratch = "redlock_chaos_probe_" + std::to_string(::getpid());
  const NftResult made = run_nft(table_script(scratch, {}));
  if (made.status != 0) return "nft cannot create a table: " + (made.error.empty() ? "status " + std::to_string(made.status) : made.error);
  const NftResult gone = run_nft("delete table inet " + scratch + "\n");
  if (gone.status != 0) return "nft cannot delete its table: " + gone.error;
  return std::nullopt;
}

Partitioner::Partitioner() : table_("redlock_chaos_" + std::to_string(::getpid())) {
  remove_stale_tables();
  set({});
}

Partitioner::~Partitioner() { (void)run_nft("delete table inet " + table_ + "\n"); }

namespace {

// Whether anything answers a TCP connect from `cut.client_address` to the master within
// `wait` (a connection, or a refusal: either way the packets got through). A cut drops them.
bool answered(const Cut& cut, std::chrono::milliseconds wait) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in from{};
  from.sin_family = AF_INET;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(cut.master_port);
  if (::inet_pton(AF_INET, cut.client_address.c_str(), &from.sin_addr) != 1 ||
      ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
    const std::string why = std::strerror(errno);
    ::close(fd);
    throw std::runtime_error("cannot probe the cut from " + cut.client_address + ": " + why);
  }
  bool got_answer = ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0 || errno != EINPROGRESS;
  if (!got_answer) {
    pollfd p{fd, POLLOUT, 0};
    got_answer = ::poll(&p, 1, static_cast<int>(wait.count())) > 0;
  }
  ::close(fd);
  return got_answer;
}

}  // namespace

void Partitioner::set(const std::vector<Cut>& cuts) {
  // Deleting and re-creating the table in one script is one atomic transaction in nft.
  const std::string script = "table inet " + table_ + "\ndelete table inet " + table_ + "\n" + table_script(table_, cuts);
  const NftResult r = run_nft(script);
  if (r.status != 0) throw std::runtime_error("nft failed (status " + std::to_string(r.status) + "): " + r.error);
  // nft accepting the rules is not proof that they drop anything (a wrong hook, address or
  // port would pass a clean run with no partition at all): one cut of the transaction is
  // probed, and the run fails if anything answers it.
  if (!cuts.empty() && answered(cuts.front(), std::chrono::milliseconds(100))) {
    throw std::runtime_error("the partition did not take effect: a connect from " + cuts.front().client_address +
                             " to 127.0.0.1:" + std::to_string(cuts.front().master_port) + " was answered");
  }
}

}  // namespace redlock::chaos

// SPDX-License-Identifier: Apache-2.0
#include "partition.h"

#include <arpa/inet.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <array>
#include <cerrno>
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

void Partitioner::set(const std::vector<Cut>& cuts) {
  // Deleting and re-creating the table in one script is one atomic transaction in nft.
  const std::string script = "table inet " + table_ + "\ndelete table inet " + table_ + "\n" + table_script(table_, cuts);
  const NftResult r = run_nft(script);
  if (r.status != 0) throw std::runtime_error("nft failed (status " + std::to_string(r.status) + "): " + r.error);
}

}  // namespace redlock::chaos

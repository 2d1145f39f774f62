// SPDX-License-Identifier: Apache-2.0
// chaos/partition.h — network partitions between client processes and masters, on loopback
// only, with nftables.
//
// Each client process binds its lock connections to its own loopback address (workers.h:
// client_address), so a rule matching that source address and a master's port cuts that
// client alone from that master, in both directions, while everything else keeps talking.
// Rules live in a table of this process's own (inet redlock_chaos_<pid>), replaced atomically
// by each set() and deleted by the destructor (and by the next Partitioner, if this process
// died without running it). Packets are dropped, not refused: the client
// sees what a real partition looks like (timeouts, then retransmissions once it heals).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace redlock::chaos {

struct Cut {
  std::string client_address;  // 127.x.y.z
  std::uint16_t master_port;   // on 127.0.0.1
};

class Partitioner {
 public:
  // Why partitions cannot be made here (not root, no nft, nft refused), or nullopt. Tries to
  // create and delete a scratch table.
  [[nodiscard]] static std::optional<std::string> unavailable();

  Partitioner();  // creates the table; throws std::runtime_error naming nft's complaint
  ~Partitioner();  // deletes the table (heals everything)
  Partitioner(const Partitioner&) = delete;
  Partitioner& operator=(const Partitioner&) = delete;

  // Replaces the current cuts with `cuts` (empty: heal). Throws std::runtime_error on failure.
  void set(const std::vector<Cut>& cuts);
  [[nodiscard]] const std::string& table() const { return table_; }

 private:
  std::string table_;
};

// Runs `nft ARGS` (default `-f -`) with `script` on its stdin; returns nft's exit status,
// its stdout and its stderr.
struct NftResult {
  int status = -1;
  std::string output;
  std::string error;
};
[[nodiscard]] NftResult run_nft(const std::string& script, const std::vector<std::string>& args = {"-f", "-"});

}  // namespace redlock::chaos

// SPDX-License-Identifier: Apache-2.0
// chaos/workers.h — the client processes of a chaos run, one function per strategy.
//
// Each loops until Shared::stop: acquire -> enter the oracle -> hold -> write to the store ->
// leave -> release, writing every step to its own JSON-lines history. Forked clients talk to
// Redis by address only and leave by _exit(): they never touch the parent's RedisServer objects.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config.h"
#include "shared_state.h"

namespace redlock::chaos {

struct WorkerContext {
  const Config& config;
  Shared& shared;
  int me;
  std::string history_path;
  std::vector<std::string> masters;  // library strategies: redis:// or rediss:// URIs (maybe via proxies)
  std::uint16_t store_port;
  std::string tls_ca_file;  // --tls: the run's CA (PEM), trusted for the rediss:// masters
};

// The loopback address client `me` binds its lock connections to, so that nftables rules can
// partition it alone: 127.0.0.(10 + me).
[[nodiscard]] std::string client_address(int me);

// Runs the configured strategy in a forked child and _exit()s: 0 on a clean stop.
[[noreturn]] void run_worker(const WorkerContext& context);

}  // namespace redlock::chaos

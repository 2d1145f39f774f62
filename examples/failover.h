// SPDX-License-Identifier: Apache-2.0
// Seed 002 in the demo: the same failover of a master under a single-master lock and under
// the quorum lock, side by side (examples/failover.cpp).
#pragma once

namespace redlock_demo {

struct FailoverOutcome {
  bool single_master_two_owners = false;  // scene 1: alice and bob both hold the lock
  bool quorum_one_owner = false;          // scene 2: alice holds it, bob is refused
};

// Starts its own redis-servers (masters and replicas on free loopback ports), plays both
// scenes, prints what happens, and stops every server it started.
FailoverOutcome show_failover();

}  // namespace redlock_demo

// SPDX-License-Identifier: Apache-2.0
// detail/fork_generation.h — telling a child of fork() from the process that made a Client.
//
// A Client's loop thread, sockets and epoll instance belong to the process that created it.
// fork() copies the Client's memory into the child, but not its thread, and the child shares
// the parent's epoll instance (one open file description): a child that destroyed its copy
// took the parent's sockets and wake-up eventfd out of that instance, and the parent's loop
// stopped hearing them (a review: the parent's next release never returned; its leases would
// stop renewing). So an EventLoop refuses every post in a child (its operations answer
// `cancelled` at once), and ~Client there frees and touches nothing.
#pragma once

#include <cstdint>

namespace redlock::detail {

// 0 in the process that first called it, plus one in each child of a fork() since (a
// pthread_atfork handler, registered by the first call). One atomic load.
[[nodiscard]] std::uint64_t fork_generation() noexcept;

// True in a child of a fork() made after fork_generation() returned `generation`: whatever
// was made then (a loop, a pool, a lease, a Mutex) is the parent's: a child was told it owned
// the parent's lock, and remaining() counted down its validity there (review 71: two
// processes in one critical section).
[[nodiscard]] inline bool made_before_fork(std::uint64_t generation) noexcept {
  return fork_generation() != generation;
}

// What a call in a child gets, from a Client or a Lease made before the fork (cancelled).
inline constexpr char kMadeBeforeFork[] =
    "this Client was made before a fork(): it belongs to the parent process; make a new Client in this one";

}  // namespace redlock::detail

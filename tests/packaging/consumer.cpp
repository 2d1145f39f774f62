// SPDX-License-Identifier: Apache-2.0
// A program outside the project, built against an installed redlock (find_package or
// pkg-config, static or shared): takes a lock on one real redis-server, shows that a second
// client is refused while it is held, releases it. Exit 0 only if all three happened.
#include <chrono>
#include <cstdio>
#include <string>

#include <redlock/redlock.h>

int main(int argc, char** argv) {
  using namespace std::chrono_literals;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s redis://127.0.0.1:PORT\n", argv[0]);
    return 2;
  }
  redlock::ClientOptions options;
  options.masters = {argv[1]};
  options.ttl = 5s;
  options.retry_count = 0;
  // The driver started this redis-server a moment ago: the restart guard would (rightly) not
  // count a master younger than any lock's ttl.
  options.restart_guard = false;
  redlock::Client alice(options);
  redlock::Client bob(options);
  alice.wait_connected(1, 2s);
  bob.wait_connected(1, 2s);

  const auto held = alice.acquire("packaging-check");
  std::printf("alice acquires: %s", redlock::format_result(held).c_str());
  if (!held) return 1;
  const auto refused = bob.acquire("packaging-check");
  std::printf("bob while alice holds: %s", redlock::format_result(refused).c_str());
  const auto released = alice.release(*held.lock);
  std::printf("alice releases: %s", redlock::format_result(released).c_str());
  const bool ok = refused.outcome == redlock::Outcome::taken && released.ok();
  std::printf("consumer: %s\n", ok ? "lock taken, refused to a second client, released" : "FAILED");
  return ok ? 0 : 1;
}

// The README's first command: five local masters, two clients, one resource.
// Starts its own redis-servers on free loopback ports, shows a grant, a refusal, a release,
// a grant with two masters frozen, and stops every server it started.
#include <cstdio>
#include <string>

#include "redlock/redlock.h"
#include "support/redis_server.h"

namespace {

void show(const char* title, const redlock::Result& result) {
  std::printf("\n== %s\n%s", title, redlock::format_result(result).c_str());
}

void show_keys(redlock::support::RedisServerGroup& masters, const std::string& key) {
  std::printf("   key %s on each master:\n", key.c_str());
  for (std::size_t i = 0; i < masters.size(); ++i) {
    const auto value = masters[i].command({"GET", key});
    const auto pttl = masters[i].command({"PTTL", key});
    std::printf("     %s  %-34s pttl %lld ms\n", masters[i].uri().c_str(),
                value.type == redlock::support::Reply::Type::nil ? "(none)" : value.str.c_str(), pttl.integer);
  }
}

}  // namespace

int main() {
  using namespace std::chrono_literals;
  std::printf("starting 5 redis-server masters on loopback...\n");
  redlock::support::RedisServerGroup masters(5);

  redlock::ClientOptions options;
  options.masters = masters.uris();
  options.ttl = 10s;
  options.retry_count = 0;
  for (const auto& uri : options.masters) std::printf("  %s\n", uri.c_str());

  redlock::Client alice(options);
  redlock::Client bob(options);
  alice.wait_connected(5, 2s);
  bob.wait_connected(5, 2s);
  std::printf("quorum: %zu of %zu, ttl %lld ms, drift allowance %.3f ms\n", alice.quorum(), alice.size(),
              static_cast<long long>(options.ttl.count()), static_cast<double>(alice.drift(options.ttl).count()) / 1000.0);

  auto held = alice.acquire("payments:batch-42");
  show("alice acquires payments:batch-42", held);
  if (!held) return 1;
  show_keys(masters, held.lock->key);

  show("bob tries the same resource while alice holds it", bob.acquire("payments:batch-42"));
  show("alice releases", alice.release(*held.lock));
  show_keys(masters, held.lock->key);

  auto bobs = bob.acquire("payments:batch-42");
  show("bob acquires after the release", bobs);
  if (bobs) show("bob releases", bob.release(*bobs.lock));

  std::printf("\nfreezing two masters (SIGSTOP): %s and %s\n", masters[3].uri().c_str(), masters[4].uri().c_str());
  masters[3].freeze();
  masters[4].freeze();
  auto frozen = alice.acquire("payments:batch-43");
  show("alice acquires with 2 of 5 masters frozen", frozen);
  if (frozen) show("alice releases", alice.release(*frozen.lock));
  masters[3].thaw();
  masters[4].thaw();

  std::printf("\nstopping the masters\n");
  return frozen.ok() ? 0 : 1;
}

// cli/commands.h — the subcommands. Each returns the process exit status (exit_codes.h).
// They may throw redlock::ConfigError (bad master URI, ttl, ...) from the Client constructor.
#pragma once

#include "args.h"
#include "output.h"
#include "redlock/client.h"

namespace redlock_cli {

int dispatch(Settings settings);

int acquire_command(const Settings& settings, const Output& out);
int release_command(const Settings& settings, const Output& out);
int extend_command(const Settings& settings, const Output& out);
int run_command(const Settings& settings, const Output& out);     // run.cpp
int status_command(const Settings& settings, const Output& out);  // status.cpp

// Gives the connections a moment to come up before the first round (they connect in the
// background): waits until a quorum is connected, or the connect timeout passes.
void warm_up(redlock::Client& client);

}  // namespace redlock_cli

#include "commands.h"

#include <cstdio>

#include "exit_codes.h"
#include "redlock/errors.h"

namespace redlock_cli {
namespace {

// The Lock of a token printed earlier, for release and extend in a later process
// (Client::adopt): its validity is unknown here, and the masters refuse an extend when the
// key is gone or carries another token. A token not of the library's form is a usage error.
redlock::Lock adopted_lock(const redlock::Client& client, const Settings& settings) {
  try {
    return client.adopt(settings.resource, settings.token);
  } catch (const redlock::UsageError& error) {
    throw UsageError(error.what());
  }
}

std::string quoted(const Settings& settings) { return "'" + printable(settings.resource) + "'"; }

}  // namespace

void warm_up(redlock::Client& client) {
  client.wait_connected(client.quorum(), client.options().connect_timeout);
}

int dispatch(Settings settings) {
  const Output out(settings.json, settings.quiet);
  // The library's warnings about the masters' configuration (called on its loop thread).
  settings.client.on_warning = [quiet = settings.quiet](const std::string& warning) {
    if (!quiet) print_error("warning: " + warning);
  };
  switch (settings.command) {
    case CommandKind::acquire: return acquire_command(settings, out);
    case CommandKind::release: return release_command(settings, out);
    case CommandKind::extend: return extend_command(settings, out);
    case CommandKind::run: return run_command(settings, out);
    case CommandKind::status: return status_command(settings, out);
  }
  return kExitSoftware;
}

int acquire_command(const Settings& settings, const Output& out) {
  redlock::Client client(settings.client);
  warm_up(client);
  const redlock::Result result = client.acquire(settings.resource, settings.acquire);
  const int code = exit_code_for(result);
  if (out.json()) {
    auto object = result_json(result, "acquire", settings.resource, settings.key);
    object["exit_code"] = code;
    Output::emit(stdout, object);
  } else if (result.ok()) {
    std::printf("%s\n", result.lock->token.c_str());
    std::fflush(stdout);
  } else {
    out.failure("could not acquire " + quoted(settings), result);
  }
  return code;
}

int release_command(const Settings& settings, const Output& out) {
  redlock::Client client(settings.client);
  warm_up(client);
  const redlock::Result result = client.release(adopted_lock(client, settings));
  const int code = exit_code_for(result);
  if (out.json()) {
    auto object = result_json(result, "release", settings.resource, settings.key, settings.token);
    object["exit_code"] = code;
    Output::emit(stdout, object);
  } else if (!result.ok()) {
    out.failure("could not release " + quoted(settings), result);
  } else if (const auto deleted = result.count(redlock::MasterStatus::ok); deleted < client.quorum()) {
    // "released" means our token is gone from a quorum; it may have been gone already.
    out.note("note: " + quoted(settings) + " held this token on only " + std::to_string(deleted) + " of " +
             std::to_string(client.size()) + " masters (it had expired, been released, or been taken over)");
  }
  return code;
}

int extend_command(const Settings& settings, const Output& out) {
  redlock::Client client(settings.client);
  warm_up(client);
  const redlock::Result result = client.extend(adopted_lock(client, settings));
  const int code = exit_code_for(result);
  if (out.json()) {
    auto object = result_json(result, "extend", settings.resource, settings.key, settings.token);
    object["exit_code"] = code;
    Output::emit(stdout, object);
  } else if (!result.ok()) {
    out.failure("could not extend " + quoted(settings), result);
  }
  return code;
}

}  // namespace redlock_cli

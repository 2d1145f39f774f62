// SPDX-License-Identifier: Apache-2.0
// redlock — command-line front end of the Redlock library. See cli/README.md.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <string>
#include <string_view>

#include "args.h"
#include "commands.h"
#include "exit_codes.h"
#include "output.h"
#include "redlock/errors.h"
#include "secrets.h"

namespace {

using namespace redlock_cli;

std::string command_name(CommandKind kind) {
  switch (kind) {
    case CommandKind::acquire: return "acquire";
    case CommandKind::release: return "release";
    case CommandKind::extend: return "extend";
    case CommandKind::run: return "run";
    case CommandKind::status: return "status";
  }
  return {};
}

// A failure before (or instead of) any lock operation. Text on stderr; under --json one JSON
// object (error_json) where the subcommand writes its result: stdout, or stderr for run, whose
// stdout belongs to the command.
// `args` (when the command line parsed) fills in the resource and key.
int report_error(bool json, std::string_view command, std::string_view outcome, const std::string& message,
                 int code, std::string_view text_suffix = {}, const Args* args = nullptr) {
  if (json) {
    Json object = error_json(command, outcome, message, code);
    if (args != nullptr && !args->resource.empty()) {
      object["resource"] = args->resource;
      object["key"] = args->prefix + args->resource;
    }
    Output::emit(command == "run" ? stderr : stdout, object);
  } else {
    print_error(message + std::string(text_suffix));
  }
  return code;
}

// A closed stdin, stdout or stderr (`<&-`) is opened on /dev/null: otherwise the next file
// descriptor opened (libuv's, a socket's) would get its number, and libuv aborts when it
// closes a descriptor it owns that is 0, 1 or 2 (exit 134 after the token was printed, with
// the lock held); output meant for a closed stream would go into a socket.
// Returns whether stdout was closed: acquire then has nowhere to put its token.
bool open_closed_standard_streams() {
  bool stdout_closed = false;
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    if (fd == 1) stdout_closed = true;
    const int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) ::close(opened);  // not the lowest free number: leave it
  }
  return stdout_closed;
}

}  // namespace

int main(int argc, char** argv) {
  const bool stdout_closed = open_closed_standard_streams();
  // CLI11's messages quote command-line words, and a -m URI may carry a password.
  remember_command_line(argc, argv);
  // What a usage error needs before the command line has parsed: --json, and which subcommand.
  const CommandLineShape shape = peek_command_line(argc, argv);
  Args args;
  const ParsedCommandLine parsed = parse_command_line(argc, argv, args);
  if (parsed.exit_code) return *parsed.exit_code;
  if (parsed.usage_error) {
    return report_error(shape.json, shape.command, "usage_error", *parsed.usage_error, kExitUsage,
                        "\nRun 'redlock --help' for usage.");
  }

  const std::string command = command_name(args.command);
  try {
    Settings settings = resolve(args);
    settings.stdout_closed = stdout_closed;
    if (settings.password_on_command_line && !settings.quiet) {
      print_error(
          "warning: a password given with --master is visible to other users (ps, /proc) while redlock "
          "starts; put it in a masters file only you can read (--masters-file, chmod 600) or in REDLOCK_MASTERS");
    }
    // Even with --quiet: nobody should run without certificate checks without being told.
    if (settings.client.tls.insecure_skip_verify) print_error(kInsecureWarning);
    return dispatch(settings);
  } catch (const UsageError& error) {
    return report_error(args.json, command, "usage_error", error.what(), kExitUsage, {}, &args);
  } catch (const redlock::ConfigError& error) {
    // The library names its own fields (TlsOptions::ca_file); the user typed flags.
    return report_error(args.json, command, "usage_error", in_cli_terms(error.what(), prefix_name(args)), kExitUsage,
                        {}, &args);
  } catch (const std::exception& error) {
    return report_error(args.json, command, "internal_error", std::string("internal error: ") + error.what(),
                        kExitSoftware, {}, &args);
  }
}

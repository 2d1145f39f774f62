// SPDX-License-Identifier: Apache-2.0
// redlock — command-line front end of the Redlock library. See cli/README.md.
#include <CLI/CLI.hpp>

#include <exception>
#include <string>

#include "args.h"
#include "commands.h"
#include "exit_codes.h"
#include "output.h"
#include "redlock/errors.h"
#include "secrets.h"

int main(int argc, char** argv) {
  using namespace redlock_cli;
  // First of all: CLI11's messages quote command-line words, and a -m URI may carry a password.
  remember_command_line(argc, argv);
  Args args;
  CLI::App app;
  app.name("redlock");
  define_interface(app, args);
  try {
    app.parse(argc, argv);
    finish_parse(app, args);
  } catch (const CLI::ParseError& error) {
    hide_command_line_secrets(argc, argv);
    if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(error);  // --help
    print_error(std::string(error.what()) + "\nRun 'redlock --help' for usage.");
    return kExitUsage;
  }
  // CLI11 has its own copies now; what ps shows (/proc/PID/cmdline) is this memory.
  hide_command_line_secrets(argc, argv);

  try {
    const Settings settings = resolve(args);
    if (settings.password_on_command_line && !settings.quiet) {
      print_error(
          "warning: a password given with --master is visible to other users (ps, /proc) while redlock "
          "starts; put it in a masters file only you can read (--masters-file, chmod 600) or in REDLOCK_MASTERS");
    }
    return dispatch(settings);
  } catch (const UsageError& error) {
    print_error(error.what());
    return kExitUsage;
  } catch (const redlock::ConfigError& error) {
    print_error(error.what());
    return kExitUsage;
  } catch (const std::exception& error) {
    print_error(std::string("internal error: ") + error.what());
    return kExitSoftware;
  }
}

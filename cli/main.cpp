// redlock — command-line front end of the Redlock library. See cli/README.md.
#include <CLI/CLI.hpp>

#include <exception>
#include <string>

#include "args.h"
#include "commands.h"
#include "exit_codes.h"
#include "output.h"
#include "redlock/errors.h"

int main(int argc, char** argv) {
  using namespace redlock_cli;
  Args args;
  CLI::App app;
  app.name("redlock");
  define_interface(app, args);
  try {
    app.parse(argc, argv);
    finish_parse(app, args);
  } catch (const CLI::ParseError& error) {
    if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(error);  // --help
    print_error(std::string(error.what()) + "\nRun 'redlock --help' for usage.");
    return kExitUsage;
  }

  try {
    return dispatch(resolve(args));
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

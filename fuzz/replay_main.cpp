// SPDX-License-Identifier: Apache-2.0
// fuzz/replay_main.cpp — main() for a fuzz target built without a fuzzing engine (gcc, or
// the ci/asan/tsan presets): runs LLVMFuzzerTestOneInput once over every file in the
// directories (or files) named on the command line, in name order, so ctest replays the
// committed corpus in every preset without fuzzing anew. A broken invariant aborts (see
// fuzz_check.h); an empty or missing corpus is an error too, so a wrong path cannot pass.
// On an abort (a broken invariant, or a sanitizer with abort_on_error=1) it names the input
// that broke, so `fuzz_<name> <that file>` reproduces it under libFuzzer.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

// The input being replayed, for the abort handler (which may only call async-signal-safe code).
const char* current_input = nullptr;

extern "C" void name_the_input(int signal_number) {
  if (current_input != nullptr) {
    constexpr char kPrefix[] = "replay: broken by input ";
    (void)!write(STDERR_FILENO, kPrefix, sizeof kPrefix - 1);
    (void)!write(STDERR_FILENO, current_input, std::strlen(current_input));
    (void)!write(STDERR_FILENO, "\n", 1);
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const auto& entry : fs::directory_iterator(arg)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or directory: %s\n", argv[0], argv[i]);
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "%s: no inputs found in the given corpus\n", argv[0]);
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());
  std::signal(SIGABRT, name_the_input);
  std::size_t bytes = 0;
  for (const auto& path : inputs) {
    const std::string name = path.string();
    current_input = name.c_str();
    const std::string data = read_file(path);
    // A heap block of exactly the input's size (as libFuzzer passes it), so that ASan
    // catches a read one byte past the end; a string's spare capacity would hide it.
    const auto exact = std::make_unique<std::uint8_t[]>(data.size());
    if (!data.empty()) std::memcpy(exact.get(), data.data(), data.size());
    LLVMFuzzerTestOneInput(exact.get(), data.size());
    bytes += data.size();
  }
  current_input = nullptr;
  std::printf("replayed %zu inputs (%zu bytes): no invariant broken\n", inputs.size(), bytes);
  return 0;
}

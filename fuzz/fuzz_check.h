// SPDX-License-Identifier: Apache-2.0
// fuzz/fuzz_check.h — the one way a fuzz target reports a broken invariant.
//
// A target must fail the same way under libFuzzer (which saves the input as a crash
// artifact) and under our replay main (which then exits non-zero, failing ctest), in every
// build type: assert() is compiled out under NDEBUG (the ci preset), so targets use
// FUZZ_CHECK instead. The message goes to stderr before abort(), so a reproducer's log says
// which invariant broke; it never prints the input itself (it may hold a password).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace redlock_fuzz {

[[noreturn]] inline void check_failed(const char* file, int line, const char* condition, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s\n  check: %s\n", file, line, what, condition);
  std::fflush(stderr);
  std::abort();
}

}  // namespace redlock_fuzz

#define FUZZ_CHECK(condition, what) \
  ((condition) ? static_cast<void>(0) : ::redlock_fuzz::check_failed(__FILE__, __LINE__, #condition, what))

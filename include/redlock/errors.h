// SPDX-License-Identifier: Apache-2.0
// redlock/errors.h — the exceptions the library throws.
//
// Exceptions are for setup mistakes and API misuse only. Lock operations never throw
// for a failed lock: they return a redlock::Result (see result.h) that says what
// happened overall and on each master.
#pragma once

#include <stdexcept>
#include <string>

namespace redlock {

// Base of every exception this library throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Invalid configuration, found at construction (bad URI, no masters, ttl too short for
// the drift allowance, ...). The message names the bad value; it never contains a password.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// The API was used in a way that cannot work, e.g. a blocking call made on the
// library's own event-loop thread (it would wait for itself forever).
class UsageError : public Error {
 public:
  using Error::Error;
};

// redlock::Mutex::lock() could not lock and cannot keep trying (the client is shutting
// down, or the request itself is invalid). The message carries the Result's explanation.
class LockError : public Error {
 public:
  using Error::Error;
};

}  // namespace redlock

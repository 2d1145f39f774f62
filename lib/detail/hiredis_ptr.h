// SPDX-License-Identifier: Apache-2.0
// detail/hiredis_ptr.h — owning pointers for the hiredis objects the library uses, each with
// a stateless deleter (no function pointer stored beside the object).
#pragma once

#include <memory>

struct redisReader;

namespace redlock::detail {

struct ReaderDeleter {
  void operator()(redisReader* reader) const noexcept;  // redisReaderFree
};

using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;

}  // namespace redlock::detail

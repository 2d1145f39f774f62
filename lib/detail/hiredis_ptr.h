// SPDX-License-Identifier: Apache-2.0
// detail/hiredis_ptr.h — owning pointers for the hiredis objects the library uses, each with
// a stateless deleter (no function pointer stored beside the object).
#pragma once

#include <memory>

struct redisReply;
struct redisReader;

namespace redlock::detail {

struct ReplyDeleter {
  void operator()(redisReply* reply) const noexcept;  // freeReplyObject
};
struct ReaderDeleter {
  void operator()(redisReader* reader) const noexcept;  // redisReaderFree
};
// What redisFormatCommandArgv allocates.
struct FormattedCommandDeleter {
  void operator()(char* command) const noexcept;  // redisFreeCommand
};

using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;
using FormattedCommandPtr = std::unique_ptr<char, FormattedCommandDeleter>;

}  // namespace redlock::detail

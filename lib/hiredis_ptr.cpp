// SPDX-License-Identifier: Apache-2.0
#include "detail/hiredis_ptr.h"

#include <hiredis/hiredis.h>

namespace redlock::detail {

void ReplyDeleter::operator()(redisReply* reply) const noexcept { freeReplyObject(reply); }
void ReaderDeleter::operator()(redisReader* reader) const noexcept { redisReaderFree(reader); }
void FormattedCommandDeleter::operator()(char* command) const noexcept { redisFreeCommand(command); }

}  // namespace redlock::detail

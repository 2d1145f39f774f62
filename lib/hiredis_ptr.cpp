// SPDX-License-Identifier: Apache-2.0
#include "detail/hiredis_ptr.h"

#include <hiredis/hiredis.h>

namespace redlock::detail {

void ReaderDeleter::operator()(redisReader* reader) const noexcept { redisReaderFree(reader); }

}  // namespace redlock::detail

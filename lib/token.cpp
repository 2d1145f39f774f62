// SPDX-License-Identifier: Apache-2.0
#include "detail/token.h"

#include <sys/random.h>

#include <cerrno>
#include <system_error>

namespace redlock::detail {

std::string make_token() {
  unsigned char bytes[kTokenBytes];
  std::size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(got);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token(kTokenBytes * 2, '0');
  for (std::size_t i = 0; i < kTokenBytes; ++i) {
    token[2 * i] = kHex[bytes[i] >> 4];
    token[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return token;
}

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
#include "detail/token.h"

#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace redlock::detail {
namespace {

void fill_random(unsigned char* bytes, std::size_t size) {
  std::size_t filled = 0;
  while (filled < size) {
    const ssize_t got = getrandom(bytes + filled, size - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    filled += static_cast<std::size_t>(got);
  }
}

std::string to_hex(const unsigned char* bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token(kTokenBytes * 2, '0');
  for (std::size_t i = 0; i < kTokenBytes; ++i) {
    token[2 * i] = kHex[bytes[i] >> 4];
    token[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return token;
}

constexpr std::size_t kPageBytes = 4096;

}  // namespace

std::string make_token() {
  unsigned char bytes[kTokenBytes];
  fill_random(bytes, sizeof(bytes));
  return to_hex(bytes);
}

// `left` counts the tokens not handed out yet, from the end of `bytes`. Zeroed by a fork (the
// child's copy of the page): empty.
struct TokenSource::Page {
  static constexpr std::size_t kTokens = (kPageBytes - sizeof(std::uint64_t)) / kTokenBytes;
  std::uint64_t left;
  unsigned char bytes[kTokens * kTokenBytes];
};
TokenSource::TokenSource() {
  static_assert(sizeof(Page) <= kPageBytes);
  void* mapped = ::mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return;
  if (::madvise(mapped, kPageBytes, MADV_WIPEONFORK) != 0) {
    ::munmap(mapped, kPageBytes);
    return;
  }
  page_ = static_cast<Page*>(mapped);  // zero-filled: empty
}

TokenSource::~TokenSource() {
  if (page_ != nullptr) ::munmap(page_, kPageBytes);
}

std::string TokenSource::next() {
  if (page_ == nullptr) return make_token();
  if (page_->left == 0) {
    fill_random(page_->bytes, sizeof(page_->bytes));
    page_->left = Page::kTokens;
  }
  --page_->left;
  unsigned char* const bytes = page_->bytes + page_->left * kTokenBytes;
  std::string token = to_hex(bytes);
  ::explicit_bzero(bytes, kTokenBytes);  // handed out: not kept
  return token;
}

}  // namespace redlock::detail

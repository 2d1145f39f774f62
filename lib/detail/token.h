// SPDX-License-Identifier: Apache-2.0
// detail/token.h — owner tokens: 128 bits from the OS CSPRNG, printable.
#pragma once

#include <cstdint>
#include <string>

namespace redlock::detail {

inline constexpr std::size_t kTokenBytes = 16;  // 128 bits; the token is twice as many hex digits

// getrandom(2) on every call. Throws std::system_error if the kernel refuses.
std::string make_token();

// Tokens for one thread (a Client's loop thread): one getrandom(2) call per page of them, not
// one per token. The unused random bytes sit in a page that fork() hands to the child zeroed
// (MADV_WIPEONFORK), so a child never hands out the tokens its parent will: it finds the page
// empty and draws its own. Where that page cannot be had (a kernel before 4.14), every token is
// make_token().
class TokenSource {
 public:
  TokenSource();
  ~TokenSource();
  TokenSource(const TokenSource&) = delete;
  TokenSource& operator=(const TokenSource&) = delete;

  std::string next();

 private:
  struct Page;
  Page* page_ = nullptr;  // null: no wipe-on-fork page, make_token() every time
};

}  // namespace redlock::detail

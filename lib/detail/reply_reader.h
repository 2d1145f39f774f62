// SPDX-License-Identifier: Apache-2.0
// detail/reply_reader.h — hiredis's RESP reply parser, bounded against a hostile master.
//
// Anything at a master's address may send anything (DESIGN.md "Hostile masters"). hiredis
// 0.14's redisReader parses RESP well but trusts its peer: it buffers a bulk string of any
// declared length, callocs an array's element vector straight from its header
// (`*200000000` asks for 1.6 GB), and on every call rescans an unfinished line from its
// start, so a line streamed without CRLF costs time quadratic in its length. ReplyReader
// keeps hiredis for the parsing and bounds it from outside:
//   - memory: one reply may take at most ReplyLimits::max_reply_bytes (a bulk string that
//     declares more is refused at its header, a line at the first byte over), and the
//     arrays of one reply may declare at most max_elements elements in total (refused at
//     the header, before hiredis allocates the vector). A caller that takes every reply
//     with next() after each feed() holds at most max_reply_bytes plus one feed unparsed,
//     and reply objects for at most that many bytes and max_elements + 1 replies (in the
//     arena: the replies' bytes plus blocks for the small objects, about twice their size
//     plus ReplyArena::kMaxGrowth; reply_reader_test checks one max-size reply);
//   - CPU: hiredis is asked for a reply only when the bytes fed since it last looked can
//     finish the item it is on (a CRLF for a line, the declared length for a bulk string),
//     so each byte is scanned a bounded number of times, whatever the chunking.
// Once refused, the stream is unusable: every later call returns false and error() keeps
// the first reason, which names the limit and the value that broke it.
//
// Reply objects are built in memory of the reader's own (ReplyArena), not with malloc per
// object: a connection reads two or three of them per lock operation and master. A reply
// is valid while its ReplyPtr lives; the arena is reused once none is held and no reply is
// half built, and keeps only its first block between replies (a large INFO reply does not
// pin its memory).
//
// Not thread-safe; one owner. Not copyable or movable (hiredis calls back into it). Every
// ReplyPtr must be gone before the reader is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "detail/hiredis_ptr.h"

struct redisReadTask;
struct redisReply;

namespace redlock::detail {

class ReplyReader;

// Gives a reply back to the reader that made it (its memory is the reader's).
struct ReplyRelease {
  ReplyReader* reader = nullptr;
  void operator()(const redisReply* reply) const noexcept;
};
using ReplyPtr = std::unique_ptr<const redisReply, ReplyRelease>;

// Bump allocation for the objects of the replies being built; reset() frees them all at once.
class ReplyArena {
 public:
  static constexpr std::size_t kFirstBlock = 4096;  // room for every lock reply and most handshake ones
  static constexpr std::size_t kMaxGrowth = 64 * 1024;  // a doubled block is never larger than this
  [[nodiscard]] void* allocate(std::size_t bytes);  // null when out of memory
  void reset() noexcept;                            // keeps the first block only
  [[nodiscard]] std::size_t capacity() const noexcept;

 private:
  struct Block {
    std::unique_ptr<std::byte[]> data;
    std::size_t size = 0;
  };
  std::vector<Block> blocks_;
  std::size_t used_ = 0;  // bytes used in blocks_.back()
};

struct ReplyLimits {
  // Bytes one reply may take, from its type byte to its final CRLF. The replies this library
  // expects are small (INFO server, the largest, is a few KiB), so 1 MiB leaves a wide
  // margin while bounding what one master can make us hold. Must be in [1, 1 GiB].
  std::size_t max_reply_bytes = 1 << 20;
  // Elements the arrays of one reply may declare in total, nested arrays included (each
  // declared element costs a pointer and a reply object before any of its bytes arrive).
  // The largest array the library expects is CONFIG GET's 2. 0 refuses every non-empty array.
  std::size_t max_elements = 1024;
};

class ReplyReader {
 public:
  // Throws std::invalid_argument naming the value if max_reply_bytes is out of range.
  explicit ReplyReader(ReplyLimits limits = {});
  ~ReplyReader();
  ReplyReader(const ReplyReader&) = delete;
  ReplyReader& operator=(const ReplyReader&) = delete;

  // Appends received bytes. False once the stream is unusable; error() says why.
  bool feed(const char* data, std::size_t size);
  // Takes the next complete reply: true with `out` set, or true with `out` null when none is
  // complete yet; false on a protocol error or a limit (error() says which, naming the limit).
  // Releases what `out` held first.
  bool next(ReplyPtr& out);
  // Drops the bytes held and any reply half built (the connection is gone); replies still
  // held stay valid. Every later call returns false, like after a refusal.
  void close(std::string why);

  [[nodiscard]] std::size_t buffered() const noexcept;  // bytes held that no reply has consumed
  // True when bytes have arrived that next() has not yet returned as part of a complete reply.
  [[nodiscard]] bool partial() const noexcept;
  [[nodiscard]] const std::string& error() const noexcept { return error_; }
  [[nodiscard]] const ReplyLimits& limits() const noexcept { return limits_; }
  // Bytes handed to hiredis's parser to scan, summed over every call: the reader's work.
  // Stays linear in the bytes fed however they are chunked (tests assert that).
  [[nodiscard]] std::uint64_t bytes_examined() const noexcept { return examined_; }
  // Bytes of reply memory the reader holds (its arena's blocks).
  [[nodiscard]] std::size_t arena_capacity() const noexcept { return arena_.capacity(); }

 private:
  // What must arrive before hiredis can get further with the item it stopped on.
  enum class Wait : std::uint8_t {
    anything,  // a new item (its type byte) or a fresh start: any byte may help
    line_end,  // a status/error/integer line or an array/bulk header: a CRLF
    bulk_end,  // a bulk string whose header was read: the stream must reach bulk_end_
  };

  // hiredis's object hooks: each builds in arena_ and links the object into its parent.
  // create_array also counts declared elements against max_elements.
  static void* create_string(const redisReadTask* task, char* str, std::size_t len);
  static void* create_array(const redisReadTask* task, int elements);
  static void* create_integer(const redisReadTask* task, long long value);
  static void* create_nil(const redisReadTask* task);
  static void free_object(void* reply);
  redisReply* new_reply(const redisReadTask* task, std::size_t extra_bytes);
  void release(const redisReply* reply) noexcept;
  void reuse_arena_if_idle() noexcept;
  friend struct ReplyRelease;
  bool refuse(std::string why);
  bool refuse_size(std::uint64_t taken);
  bool can_progress() const noexcept;
  bool after_incomplete();  // sets wait_ for the item hiredis stopped on; false if refused
  [[nodiscard]] std::uint64_t consumed() const noexcept;  // stream offset hiredis has parsed up to

  const ReplyLimits limits_;
  ReplyArena arena_;             // outlives reader_ (redisReaderFree frees a half-built reply)
  std::size_t held_ = 0;         // replies handed out and not yet released
  ReaderPtr reader_;
  std::string error_;            // first refusal; empty while the stream is usable
  std::string array_refusal_;    // set by create_array when it refuses (hiredis then says "Out of memory")
  std::uint64_t fed_ = 0;        // bytes fed since construction
  std::uint64_t reply_start_ = 0;    // stream offset where the reply in progress began
  std::size_t reply_elements_ = 0;   // elements declared so far by the reply in progress
  Wait wait_ = Wait::anything;
  bool crlf_fed_ = false;        // a CRLF arrived since hiredis last scanned
  bool last_was_cr_ = false;     // the last byte fed was '\r' (a CRLF split across feeds)
  std::uint64_t bulk_end_ = 0;   // stream offset where the bulk string in progress ends
  std::uint64_t examined_ = 0;
};

}  // namespace redlock::detail

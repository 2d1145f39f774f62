// SPDX-License-Identifier: Apache-2.0
// ReplyReader: hiredis's RESP parser with limits a hostile master cannot get past. Pure unit
// tests (no server): replies come out as hiredis would parse them however the bytes are
// split, each limit is refused at the earliest byte that breaks it with an error naming the
// limit, and the parser's work stays linear in the bytes fed.
#include "detail/reply_reader.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace redlock::detail {
namespace {

// A reply as text, to compare trees: "+OK", ":5", "$foo", "nil", "[a,b]".
std::string show(const redisReply* reply) {
  switch (reply->type) {
    case REDIS_REPLY_STATUS: return "+" + std::string(reply->str, reply->len);
    case REDIS_REPLY_ERROR: return "-" + std::string(reply->str, reply->len);
    case REDIS_REPLY_STRING: return "$" + std::string(reply->str, reply->len);
    case REDIS_REPLY_INTEGER: return ":" + std::to_string(reply->integer);
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_ARRAY: {
      std::string text = "[";
      for (std::size_t i = 0; i < reply->elements; ++i) text += (i ? "," : "") + show(reply->element[i]);
      return text + "]";
    }
    default: return "?";
  }
}

// Feeds `chunks` one by one, taking every reply after each; stops at the first refusal.
struct Parsed {
  std::vector<std::string> replies;
  bool refused = false;
  std::string error;
};

Parsed parse(ReplyReader& reader, const std::vector<std::string>& chunks) {
  Parsed result;
  for (const auto& chunk : chunks) {
    bool ok = reader.feed(chunk.data(), chunk.size());
    ReplyPtr reply;
    while (ok && (ok = reader.next(reply)) && reply) result.replies.push_back(show(reply.get()));
    if (!ok) {
      result.refused = true;
      result.error = reader.error();
      return result;
    }
  }
  return result;
}

Parsed parse(const std::vector<std::string>& chunks, ReplyLimits limits = {}) {
  ReplyReader reader(limits);
  return parse(reader, chunks);
}

std::vector<std::string> bytes_of(const std::string& stream) {
  std::vector<std::string> chunks;
  for (const char c : stream) chunks.emplace_back(1, c);
  return chunks;
}

// What hiredis alone makes of the stream fed whole: the reference.
std::vector<std::string> hiredis_replies(const std::string& stream) {
  std::vector<std::string> replies;
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, stream.data(), stream.size());
  void* raw = nullptr;
  while (redisReaderGetReply(reader, &raw) == REDIS_OK && raw != nullptr) {
    replies.push_back(show(static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  redisReaderFree(reader);
  return replies;
}

const std::string kMixed =
    "+OK\r\n-ERR wrong\r\n:42\r\n:-7\r\n$3\r\nfoo\r\n$0\r\n\r\n$-1\r\n*-1\r\n*0\r\n"
    "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n"
    "*3\r\n*2\r\n:1\r\n:2\r\n$4\r\na\r\nb\r\n+x\r\n"
    "$28\r\n# Server\r\nrun_id:abc\r\nup:1\r\n\r\n";

TEST(ReplyReaderTest, ParsesWhatHiredisParses) {
  const Parsed whole = parse({kMixed});
  ASSERT_FALSE(whole.refused) << whole.error;
  EXPECT_EQ(whole.replies, hiredis_replies(kMixed));
  EXPECT_EQ(whole.replies.size(), 12u);
  EXPECT_EQ(whole.replies[9], "[$maxmemory-policy,$noeviction]");
  EXPECT_EQ(whole.replies[10], "[[:1,:2],$a\r\nb,+x]");
}

TEST(ReplyReaderTest, ByteByByteGivesTheSameReplies) {
  const Parsed dripped = parse(bytes_of(kMixed));
  ASSERT_FALSE(dripped.refused) << dripped.error;
  EXPECT_EQ(dripped.replies, hiredis_replies(kMixed));
}

TEST(ReplyReaderTest, EverySplitPointGivesTheSameReplies) {
  const auto expected = hiredis_replies(kMixed);
  for (std::size_t at = 0; at <= kMixed.size(); ++at) {
    const Parsed split = parse({kMixed.substr(0, at), kMixed.substr(at)});
    ASSERT_FALSE(split.refused) << "split at " << at << ": " << split.error;
    EXPECT_EQ(split.replies, expected) << "split at " << at;
  }
}

// Random valid replies (nested arrays, bulks with CRLF inside), random chunking: the same
// replies as hiredis fed the whole stream.
TEST(ReplyReaderTest, RandomStreamsInRandomChunks) {
  std::mt19937 rng(20240611);  // fixed seed: a failure reproduces
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
  std::function<std::string(int)> reply = [&](int depth) -> std::string {
    switch (pick(depth < 3 ? 7 : 6)) {
      case 0: return "+st" + std::to_string(pick(1000)) + "\r\n";
      case 1: return "-ERR e" + std::to_string(pick(1000)) + "\r\n";
      case 2: return ":" + std::to_string(pick(200000) - 100000) + "\r\n";
      case 3: {
        std::string body(static_cast<std::size_t>(pick(40)), 'b');
        for (auto& c : body) c = "ab\r\n"[pick(4)];
        return "$" + std::to_string(body.size()) + "\r\n" + body + "\r\n";
      }
      case 4: return "$-1\r\n";
      case 5: return pick(2) ? "*-1\r\n" : "*0\r\n";
      default: {
        const int n = 1 + pick(4);
        std::string text = "*" + std::to_string(n) + "\r\n";
        for (int i = 0; i < n; ++i) text += reply(depth + 1);
        return text;
      }
    }
  };
  for (int round = 0; round < 200; ++round) {
    std::string stream;
    for (int i = 0; i < 20; ++i) stream += reply(0);
    std::vector<std::string> chunks;
    for (std::size_t at = 0; at < stream.size();) {
      const auto size = std::min(stream.size() - at, static_cast<std::size_t>(1 + pick(round % 2 ? 3 : 50)));
      chunks.push_back(stream.substr(at, size));
      at += size;
    }
    const Parsed chunked = parse(chunks);
    ASSERT_FALSE(chunked.refused) << chunked.error;
    ASSERT_EQ(chunked.replies, hiredis_replies(stream)) << "round " << round;
  }
}

TEST(ReplyReaderTest, PartialAndBufferedFollowTheReplyInProgress) {
  ReplyReader reader;
  ReplyPtr reply;
  EXPECT_FALSE(reader.partial());
  ASSERT_TRUE(reader.feed("+O", 2));
  EXPECT_TRUE(reader.partial());
  EXPECT_EQ(reader.buffered(), 2u);
  ASSERT_TRUE(reader.next(reply));
  EXPECT_FALSE(reply);
  EXPECT_TRUE(reader.partial());
  ASSERT_TRUE(reader.feed("K\r\n:1", 5));
  ASSERT_TRUE(reader.next(reply));
  ASSERT_TRUE(reply);
  EXPECT_EQ(show(reply.get()), "+OK");
  EXPECT_TRUE(reader.partial());  // ":1" has begun
  ASSERT_TRUE(reader.next(reply));
  EXPECT_FALSE(reply);
  ASSERT_TRUE(reader.feed("\r\n", 2));
  ASSERT_TRUE(reader.next(reply));
  ASSERT_TRUE(reply);
  EXPECT_FALSE(reader.partial());
  EXPECT_EQ(reader.buffered(), 0u);
}

// ---- reply memory (the reader's arena) ----

TEST(ReplyReaderTest, AHeldReplyStaysIntactWhileLaterRepliesAreBuilt) {
  // Replies are built in the reader's own memory, reused only once none is held: the first
  // reply must not be overwritten by the second while its ReplyPtr lives.
  ReplyReader reader;
  const std::string stream = "$5\r\nfirst\r\n*2\r\n$6\r\nsecond\r\n:7\r\n";
  ASSERT_TRUE(reader.feed(stream.data(), stream.size()));
  ReplyPtr first;
  ASSERT_TRUE(reader.next(first));
  ASSERT_TRUE(first);
  ReplyPtr second;
  ASSERT_TRUE(reader.next(second));
  ASSERT_TRUE(second);
  EXPECT_EQ(show(first.get()), "$first");
  EXPECT_EQ(show(second.get()), "[$second,:7]");
  // Giving one back while another is held must not let the next reply overwrite the held one.
  second.reset();
  ASSERT_TRUE(reader.feed("+third\r\n", 8));
  ReplyPtr third;
  ASSERT_TRUE(reader.next(third));
  EXPECT_EQ(show(first.get()), "$first");
  EXPECT_EQ(show(third.get()), "+third");
}

TEST(ReplyReaderTest, AReplyOutlivesItsReaderBeingClosed) {
  // A connection that fails while it delivers a reply closes its reader (Connection::fail):
  // the reply being delivered must stay readable (ASan would report a use after free).
  ReplyReader reader;
  const std::string big(100000, 'x');
  const std::string stream = "$" + std::to_string(big.size()) + "\r\n" + big + "\r\n+OK\r";
  ASSERT_TRUE(reader.feed(stream.data(), stream.size()));
  ReplyPtr reply;
  ASSERT_TRUE(reader.next(reply));
  ASSERT_TRUE(reply);
  reader.close("the connection was closed");
  EXPECT_EQ(show(reply.get()), "$" + big);
  EXPECT_FALSE(reader.next(reply));
  EXPECT_EQ(reader.error(), "the connection was closed");
}

TEST(ReplyReaderTest, ReplyMemoryIsBoundedByTheReplyNotAMultipleOfIt) {
  // A reply of max_reply_bytes whose large string fills a block of its own size, followed by a
  // small one: doubling from the large block would reserve twice max_reply_bytes more (3.1 MiB
  // for a 1 MiB reply, seen in review). The arena holds the reply's bytes plus small blocks.
  ReplyReader reader;
  const std::size_t limit = reader.limits().max_reply_bytes;
  const std::string big(limit - 100, 'x');
  const std::string stream = "*2\r\n$" + std::to_string(big.size()) + "\r\n" + big + "\r\n$0\r\n\r\n";
  ASSERT_LE(stream.size(), limit);
  ASSERT_TRUE(reader.feed(stream.data(), stream.size()));
  ReplyPtr reply;
  ASSERT_TRUE(reader.next(reply)) << reader.error();
  ASSERT_TRUE(reply);
  EXPECT_LE(reader.arena_capacity(), limit + 2 * ReplyArena::kMaxGrowth) << "arena for one reply of " << stream.size();
  reply.reset();
  ASSERT_TRUE(reader.feed("+OK\r\n", 5));
  ASSERT_TRUE(reader.next(reply));
  EXPECT_LE(reader.arena_capacity(), ReplyArena::kFirstBlock) << "the large reply's memory was not given back";
}

// ---- limits ----

TEST(ReplyReaderTest, HugeBulkIsRefusedAtItsHeader) {
  const Parsed result = parse({"$2000000000\r\n"});
  ASSERT_TRUE(result.refused);
  EXPECT_NE(result.error.find("bulk string of 2000000000 bytes"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("max_reply_bytes (1048576)"), std::string::npos) << result.error;
}

TEST(ReplyReaderTest, HugeArrayIsRefusedAtItsHeader) {
  const Parsed result = parse({"*200000000\r\n"});
  ASSERT_TRUE(result.refused);
  EXPECT_NE(result.error.find("array of 200000000 elements"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("max_elements (1024)"), std::string::npos) << result.error;
}

TEST(ReplyReaderTest, NestedArraysCountTogether) {
  // Each header alone is under the limit; together they would allocate 4 x 1000 slots.
  std::string stream = "*4\r\n";
  for (int i = 0; i < 4; ++i) stream += "*300\r\n";
  const Parsed result = parse(bytes_of(stream));
  ASSERT_TRUE(result.refused);
  EXPECT_NE(result.error.find("array of 300 elements: reply over max_elements (1024), 904 already declared"),
            std::string::npos)
      << result.error;
}

TEST(ReplyReaderTest, RefusedNestedArrayFreesWhatWasBuilt) {
  // The outer array and a finished inner one exist when the third header is refused;
  // ASan's leak check fails this test if they are not freed.
  const Parsed result = parse({"*3\r\n*2\r\n:1\r\n:2\r\n$3\r\nabc\r\n*5\r\n"}, {.max_reply_bytes = 1024, .max_elements = 5});
  ASSERT_TRUE(result.refused);
  EXPECT_NE(result.error.find("max_elements (5)"), std::string::npos) << result.error;
}

TEST(ReplyReaderTest, LimitsAreInclusive) {
  const ReplyLimits small{.max_reply_bytes = 17, .max_elements = 3};
  EXPECT_FALSE(parse({"*3\r\n:1\r\n:2\r\n:3\r\n"}, small).refused);  // 16 bytes, 3 elements
  EXPECT_TRUE(parse({"*4\r\n"}, small).refused);                        // 4 elements
  EXPECT_FALSE(parse({"$10\r\n0123456789\r\n"}, small).refused);        // 17 bytes
  EXPECT_TRUE(parse({"$11\r\n"}, small).refused);                       // would be 18 bytes
  const Parsed line = parse({"+", std::string(16, 'x')}, small);         // 17 bytes, no CRLF yet
  EXPECT_FALSE(line.refused) << line.error;
  const Parsed longer = parse({"+", std::string(16, 'x'), "x"}, small);  // 18 bytes
  ASSERT_TRUE(longer.refused);
  EXPECT_NE(longer.error.find("max_reply_bytes (17): 18 bytes"), std::string::npos) << longer.error;
  // A reply at the limit, then the next one: each counts alone.
  const Parsed two = parse({"$10\r\n0123456789\r\n$10\r\n", "0123456789\r\n"}, small);
  EXPECT_FALSE(two.refused) << two.error;
  EXPECT_EQ(two.replies.size(), 2u);
}

TEST(ReplyReaderTest, RefusalDoesNotDependOnHowTheBytesArrive) {
  // One byte over, whether it arrives whole (complete before any check) or dripped.
  const ReplyLimits small{.max_reply_bytes = 17, .max_elements = 3};
  for (const std::string& stream : std::vector<std::string>{"$11\r\n0123456789X\r\n", "+" + std::string(17, 'x') + "\r\n"}) {
    const Parsed whole = parse({stream}, small);
    const Parsed dripped = parse(bytes_of(stream), small);
    EXPECT_TRUE(whole.refused) << stream;
    EXPECT_TRUE(dripped.refused) << stream;
    EXPECT_NE(whole.error.find("max_reply_bytes (17)"), std::string::npos) << whole.error;
    EXPECT_NE(dripped.error.find("max_reply_bytes (17)"), std::string::npos) << dripped.error;
  }
}

TEST(ReplyReaderTest, ManySmallElementsCountTheirBytes) {
  // Elements are consumed as they complete, so the unparsed buffer stays small; the reply's
  // own byte count is what stops it.
  std::vector<std::string> chunks{"*1000\r\n"};
  for (int i = 0; i < 1000; ++i) chunks.emplace_back(":1\r\n");
  const Parsed result = parse(chunks, {.max_reply_bytes = 2000, .max_elements = 1024});
  ASSERT_TRUE(result.refused);
  EXPECT_NE(result.error.find("max_reply_bytes (2000)"), std::string::npos) << result.error;
  EXPECT_NE(result.error.find("without a complete reply"), std::string::npos) << result.error;
}

TEST(ReplyReaderTest, EndlessLineIsRefusedAtTheCap) {
  ReplyReader reader;
  std::vector<std::string> chunks{"+"};
  const std::string chunk(64 * 1024, 'x');
  for (int i = 0; i < 20; ++i) chunks.push_back(chunk);
  const Parsed result = parse(reader, chunks);
  ASSERT_TRUE(result.refused);
  EXPECT_NE(result.error.find("max_reply_bytes (1048576)"), std::string::npos) << result.error;
  EXPECT_EQ(reader.buffered(), 0u);  // what it held is dropped at the refusal
}

TEST(ReplyReaderTest, ProtocolErrorsAreNamedAndFinal) {
  const Parsed push = parse({"+OK\r\n>2\r\n+message\r\n"});  // RESP3 push: hiredis 0.14 does not know '>'
  EXPECT_EQ(push.replies, std::vector<std::string>{"+OK"});
  ASSERT_TRUE(push.refused);
  EXPECT_NE(push.error.find("protocol error"), std::string::npos) << push.error;
  EXPECT_NE(push.error.find("\">\""), std::string::npos) << push.error;

  ReplyReader reader;
  ASSERT_TRUE(reader.feed(":12x\r\n", 6));
  ReplyPtr reply;
  EXPECT_FALSE(reader.next(reply));
  const std::string first = reader.error();
  EXPECT_NE(first.find("Bad integer value"), std::string::npos) << first;
  EXPECT_FALSE(reader.feed(":1\r\n", 4));
  EXPECT_FALSE(reader.next(reply));
  EXPECT_EQ(reader.error(), first);
}

TEST(ReplyReaderTest, BadLimitsAreRefusedByValue) {
  try {
    ReplyReader reader({.max_reply_bytes = 0, .max_elements = 1});
    FAIL() << "max_reply_bytes 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("max_reply_bytes must be in [1, 1073741824], got 0"), std::string::npos)
        << e.what();
  }
}

// ---- work per read ----

// hiredis alone, as the connection used it: feed each read, ask for a reply. Returns the
// bytes its parser was handed to scan on the worst read.
std::size_t raw_hiredis_worst_read(const std::vector<std::string>& chunks, std::uint64_t& total) {
  redisReader* reader = redisReaderCreate();
  std::size_t worst = 0;
  total = 0;
  for (const auto& chunk : chunks) {
    redisReaderFeed(reader, chunk.data(), chunk.size());
    for (;;) {
      const std::size_t scanned = reader->len - reader->pos;
      worst = std::max(worst, scanned);
      total += scanned;
      void* raw = nullptr;
      if (redisReaderGetReply(reader, &raw) != REDIS_OK || raw == nullptr) break;
      freeReplyObject(raw);
    }
  }
  redisReaderFree(reader);
  return worst;
}

std::size_t reader_worst_read(const std::vector<std::string>& chunks, std::uint64_t& total) {
  ReplyReader reader;
  std::size_t worst = 0;
  for (const auto& chunk : chunks) {
    const auto before = reader.bytes_examined();
    if (!reader.feed(chunk.data(), chunk.size())) break;
    ReplyPtr reply;
    bool ok = true;
    while ((ok = reader.next(reply)) && reply) {
    }
    worst = std::max<std::size_t>(worst, static_cast<std::size_t>(reader.bytes_examined() - before));
    if (!ok) break;
  }
  total = reader.bytes_examined();
  return worst;
}

TEST(ReplyReaderTest, EndlessLineWorkStaysLinear) {
  // A status line streamed without CRLF, up to just under the cap, in reads of 1 KiB (a
  // master dripping) and of 64 KiB (the connection's read buffer).
  for (const std::size_t read_size : {std::size_t{1024}, std::size_t{64 * 1024}}) {
    std::vector<std::string> chunks{"+"};
    const std::size_t total = (1 << 20) - 2;
    for (std::size_t sent = 1; sent < total; sent += read_size) {
      chunks.emplace_back(std::min(read_size, total - sent), 'x');
    }
    chunks.emplace_back("\r\n");
    std::uint64_t raw_total = 0;
    std::uint64_t our_total = 0;
    const auto raw_worst = raw_hiredis_worst_read(chunks, raw_total);
    const auto our_worst = reader_worst_read(chunks, our_total);
    std::printf("endless line, %zu-byte reads, %zu bytes: hiredis alone scans %llu bytes in all, %zu on the worst "
                "read; ReplyReader %llu in all, %zu on the worst read\n",
                read_size, total, static_cast<unsigned long long>(raw_total), raw_worst,
                static_cast<unsigned long long>(our_total), our_worst);
    // Linear: hiredis scans the line once, on the read that brings its CRLF. That read's
    // work is bounded by max_reply_bytes; every other read costs hiredis nothing.
    EXPECT_LE(our_total, 2u * total);
    EXPECT_LE(our_worst, std::size_t{1} << 20);
    // And the baseline really is quadratic (so the bound above means something): about
    // reads/2 times the line.
    EXPECT_GT(raw_total, chunks.size() / 4 * total);
  }
}

TEST(ReplyReaderTest, DrippedBulkIsParsedOnce) {
  // A 100 KiB bulk string full of CRLFs (like INFO), one byte per read: hiredis is asked
  // once the declared length is there, not on every CRLF.
  std::string body;
  while (body.size() < 100 * 1024) body += "field:value\r\n";
  const std::string stream = "$" + std::to_string(body.size()) + "\r\n" + body + "\r\n";
  std::uint64_t total = 0;
  reader_worst_read(bytes_of(stream), total);
  std::printf("dripped 100 KiB bulk: ReplyReader handed hiredis %llu bytes for %zu fed\n",
              static_cast<unsigned long long>(total), stream.size());
  EXPECT_LE(total, 2u * stream.size());
  const Parsed result = parse(bytes_of(stream));
  ASSERT_FALSE(result.refused) << result.error;
  ASSERT_EQ(result.replies.size(), 1u);
  EXPECT_EQ(result.replies[0], "$" + body);
}

TEST(ReplyReaderTest, PipelinedSmallRepliesWorkStaysLinear) {
  std::string stream;
  for (int i = 0; i < 20000; ++i) stream += i % 2 ? "+OK\r\n" : ":1\r\n";
  std::vector<std::string> chunks;
  for (std::size_t at = 0; at < stream.size(); at += 7) chunks.push_back(stream.substr(at, 7));
  std::uint64_t total = 0;
  reader_worst_read(chunks, total);
  EXPECT_LE(total, 2u * stream.size());
  EXPECT_EQ(parse(chunks).replies.size(), 20000u);
}

}  // namespace
}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
#include "detail/reply_reader.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <cstddef>
#include <new>
#include <stdexcept>
#include <string_view>

namespace redlock::detail {
namespace {

// A valid bulk header is '$', at most 20 digits (or "-1") and CRLF; hiredis has already
// rejected anything longer, so looking this far for the CRLF is enough.
constexpr std::size_t kMaxBulkHeader = 24;

bool has_crlf(const char* data, std::size_t size, bool after_cr) {
  if (size == 0) return false;
  if (after_cr && data[0] == '\n') return true;
  return std::string_view(data, size).find("\r\n") != std::string_view::npos;
}

constexpr std::size_t kAlign = alignof(std::max_align_t);

constexpr std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void* ReplyArena::allocate(std::size_t bytes) {
  bytes = aligned(bytes);
  if (blocks_.empty() || blocks_.back().size - used_ < bytes) {
    // Each new block doubles the room, up to kMaxGrowth: a reply of many objects costs few
    // blocks. A large string gets a block of its own size and does not double the next one:
    // the arena holds at most the reply's bytes plus the small objects' blocks (at most about
    // twice their size, plus kMaxGrowth), not a multiple of max_reply_bytes.
    const std::size_t grown = blocks_.empty() ? 0 : std::min(2 * blocks_.back().size, kMaxGrowth);
    const std::size_t size = std::max({bytes, kFirstBlock, grown});
    Block block;
    block.data.reset(new (std::nothrow) std::byte[size]);
    if (block.data == nullptr) return nullptr;
    block.size = size;
    // Called from hiredis's C code: out of memory is a null return (hiredis reports it), never
    // an exception through C frames.
    try {
      blocks_.push_back(std::move(block));
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
    used_ = 0;
  }
  void* at = blocks_.back().data.get() + used_;
  used_ += bytes;
  return at;
}

void ReplyArena::reset() noexcept {
  if (blocks_.size() > 1 || (!blocks_.empty() && blocks_.front().size > kFirstBlock)) {
    // Only the usual size is kept: a large reply (a hostile master's, or INFO) gives its memory back.
    blocks_.clear();
  }
  used_ = 0;
}

std::size_t ReplyArena::capacity() const noexcept {
  std::size_t total = 0;
  for (const auto& block : blocks_) total += block.size;
  return total;
}

void ReplyRelease::operator()(const redisReply* reply) const noexcept {
  if (reader != nullptr) reader->release(reply);
}

ReplyReader::ReplyReader(ReplyLimits limits) : limits_(limits) {
  // hiredis scans lines with an int index: keep every buffer well inside that.
  constexpr std::size_t kMaxMaxReplyBytes = std::size_t{1} << 30;
  if (limits_.max_reply_bytes == 0 || limits_.max_reply_bytes > kMaxMaxReplyBytes) {
    throw std::invalid_argument("ReplyLimits::max_reply_bytes must be in [1, " + std::to_string(kMaxMaxReplyBytes) +
                                "], got " + std::to_string(limits_.max_reply_bytes));
  }
  // One table for every reader: hiredis never writes through `fn`.
  static redisReplyObjectFunctions bounded = {&ReplyReader::create_string, &ReplyReader::create_array,
                                              &ReplyReader::create_integer, &ReplyReader::create_nil,
                                              &ReplyReader::free_object};
  reader_.reset(redisReaderCreateWithFunctions(&bounded));
  if (!reader_) throw std::bad_alloc();
  // Every read task carries this pointer to the hooks.
  reader_->privdata = this;
}

ReplyReader::~ReplyReader() = default;

// A reply object and `extra_bytes` after it, in the arena, linked into its parent array as
// hiredis's own constructors do. Null when out of memory (hiredis then fails the stream).
redisReply* ReplyReader::new_reply(const redisReadTask* task, std::size_t extra_bytes) {
  void* memory = arena_.allocate(sizeof(redisReply) + extra_bytes);
  if (memory == nullptr) return nullptr;
  auto* reply = new (memory) redisReply{};
  reply->type = task->type;
  if (task->parent != nullptr) {
    auto* parent = static_cast<redisReply*>(task->parent->obj);
    parent->element[task->idx] = reply;
  }
  return reply;
}

void* ReplyReader::create_string(const redisReadTask* task, char* str, std::size_t len) {
  auto* self = static_cast<ReplyReader*>(task->privdata);
  // len is bounded by max_reply_bytes (<= 1 GiB): the sum cannot overflow.
  redisReply* reply = self->new_reply(task, len + 1);
  if (reply == nullptr) return nullptr;
  reply->str = reinterpret_cast<char*>(reply + 1);
  std::memcpy(reply->str, str, len);
  reply->str[len] = '\0';
  reply->len = len;
  return reply;
}

void* ReplyReader::create_array(const redisReadTask* task, int elements) {
  auto* self = static_cast<ReplyReader*>(task->privdata);
  // hiredis passes 0..INT_MAX; refusing here, before the element vector is made, is what
  // keeps `*200000000` from costing 1.6 GB. reply_elements_ <= max_elements always holds.
  const auto count = static_cast<std::size_t>(std::max(elements, 0));
  if (count > self->limits_.max_elements - self->reply_elements_) {
    self->array_refusal_ = "array of " + std::to_string(elements) + " elements: reply over max_elements (" +
                           std::to_string(self->limits_.max_elements) + ")";
    if (self->reply_elements_ > 0) {
      self->array_refusal_ += ", " + std::to_string(self->reply_elements_) + " already declared";
    }
    return nullptr;  // hiredis reports this as "Out of memory"; next() names the limit instead
  }
  self->reply_elements_ += count;
  redisReply* reply = self->new_reply(task, count * sizeof(redisReply*));
  if (reply == nullptr) return nullptr;
  reply->elements = count;
  if (count > 0) {
    reply->element = reinterpret_cast<redisReply**>(reply + 1);
    std::fill_n(reply->element, count, nullptr);
  }
  return reply;
}

void* ReplyReader::create_integer(const redisReadTask* task, long long value) {
  redisReply* reply = static_cast<ReplyReader*>(task->privdata)->new_reply(task, 0);
  if (reply != nullptr) reply->integer = value;
  return reply;
}

void* ReplyReader::create_nil(const redisReadTask* task) {
  // The task's type is the header's ('$-1' or '*-1'); the object is a nil either way.
  redisReply* reply = static_cast<ReplyReader*>(task->privdata)->new_reply(task, 0);
  if (reply != nullptr) reply->type = REDIS_REPLY_NIL;
  return reply;
}

// The arena owns every object: hiredis's frees (of a half-built reply it gives up on) are
// the arena's next reset.
void ReplyReader::free_object(void*) {}

void ReplyReader::release(const redisReply* reply) noexcept {
  if (reply == nullptr || held_ == 0) return;
  --held_;
  reuse_arena_if_idle();
}

// Nothing handed out, nothing half built (hiredis holds a reply in progress in reader->reply).
void ReplyReader::reuse_arena_if_idle() noexcept {
  if (held_ == 0 && (!reader_ || reader_->reply == nullptr)) arena_.reset();
}

bool ReplyReader::feed(const char* data, std::size_t size) {
  if (!error_.empty()) return false;
  if (size == 0) return true;
  if (!crlf_fed_) crlf_fed_ = has_crlf(data, size, last_was_cr_);
  last_was_cr_ = data[size - 1] == '\r';
  // A line that these bytes cannot end is refused before they are held. (Otherwise the new
  // bytes may finish the reply, and next() judges; a bulk string's end was checked at its
  // header.) So a caller that drains next() after every feed holds at most
  // max_reply_bytes plus one feed.
  const std::uint64_t taken = fed_ + size - reply_start_;
  if (wait_ == Wait::line_end && !crlf_fed_ && taken > limits_.max_reply_bytes) return refuse_size(taken);
  if (redisReaderFeed(reader_.get(), data, size) != REDIS_OK) {
    return refuse(std::string("reply reader: ") + reader_->errstr);
  }
  fed_ += size;
  return true;
}

bool ReplyReader::next(ReplyPtr& out) {
  out.reset();
  if (!error_.empty()) return false;
  if (can_progress()) {
    examined_ += buffered();
    crlf_fed_ = false;
    void* raw = nullptr;
    if (redisReaderGetReply(reader_.get(), &raw) != REDIS_OK) {
      if (!array_refusal_.empty()) return refuse(std::move(array_refusal_));
      return refuse(std::string("protocol error: ") + reader_->errstr);
    }
    if (raw != nullptr) {
      ++held_;
      out = ReplyPtr(static_cast<const redisReply*>(raw), ReplyRelease{this});
      // A reply that arrived whole is held to the same limit as one that arrived in pieces,
      // so whether a stream is refused does not depend on how it was split.
      if (const std::uint64_t size = consumed() - reply_start_; size > limits_.max_reply_bytes) {
        out.reset();
        return refuse("reply over max_reply_bytes (" + std::to_string(limits_.max_reply_bytes) + "): " +
                      std::to_string(size) + " bytes");
      }
      reply_start_ = consumed();
      reply_elements_ = 0;
      wait_ = Wait::anything;
      return true;
    }
    if (!after_incomplete()) return false;
  }
  const std::uint64_t taken = fed_ - reply_start_;
  if (taken > limits_.max_reply_bytes) return refuse_size(taken);
  return true;
}

bool ReplyReader::refuse_size(std::uint64_t taken) {
  return refuse("reply over max_reply_bytes (" + std::to_string(limits_.max_reply_bytes) + "): " +
                std::to_string(taken) + " bytes without a complete reply");
}

bool ReplyReader::can_progress() const noexcept {
  if (buffered() == 0) return false;  // hiredis cannot finish anything without bytes
  switch (wait_) {
    case Wait::anything: return true;
    case Wait::line_end: return crlf_fed_;
    case Wait::bulk_end: return fed_ >= bulk_end_;
  }
  return true;
}

// hiredis stopped inside a reply. Work out what it is waiting for, so that it is not asked
// again (and does not rescan) before that can have arrived.
bool ReplyReader::after_incomplete() {
  wait_ = Wait::anything;
  if (reader_->ridx < 0) return true;
  const redisReadTask& task = reader_->rstack[reader_->ridx];
  if (task.type < 0) return true;  // stopped before a type byte: everything was consumed
  if (task.type != REDIS_REPLY_STRING) {
    wait_ = Wait::line_end;
    return true;
  }
  // A bulk string: hiredis has consumed '$' and re-reads the header on every call; the
  // body only needs its declared length.
  const std::string_view header(reader_->buf + reader_->pos, std::min(buffered(), kMaxBulkHeader));
  const auto crlf = header.find("\r\n");
  if (crlf == std::string_view::npos) {
    wait_ = Wait::line_end;
    return true;
  }
  long long declared = 0;
  const auto [end, ec] = std::from_chars(header.data(), header.data() + crlf, declared);
  if (ec != std::errc() || end != header.data() + crlf || declared < 0) return true;  // hiredis will say
  const auto length = static_cast<std::uint64_t>(declared);
  const std::uint64_t end_offset = consumed() + crlf + 2 + length + 2;
  if (length > limits_.max_reply_bytes || end_offset - reply_start_ > limits_.max_reply_bytes) {
    return refuse("bulk string of " + std::to_string(length) + " bytes: reply over max_reply_bytes (" +
                  std::to_string(limits_.max_reply_bytes) + ")");
  }
  bulk_end_ = end_offset;
  wait_ = Wait::bulk_end;
  return true;
}

bool ReplyReader::refuse(std::string why) {
  if (error_.empty()) error_ = std::move(why);
  reader_.reset();  // drop what is held now, not when the owner gets round to destroying us
  reuse_arena_if_idle();
  return false;
}

void ReplyReader::close(std::string why) { refuse(std::move(why)); }

std::size_t ReplyReader::buffered() const noexcept {
  return reader_ ? reader_->len - reader_->pos : 0;
}

bool ReplyReader::partial() const noexcept { return fed_ > reply_start_; }

std::uint64_t ReplyReader::consumed() const noexcept { return fed_ - buffered(); }

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
#include "detail/reply_reader.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string_view>

namespace redlock::detail {
namespace {

// hiredis keeps its reply constructors (defaultFunctions) static; the one way to reach them
// is through a reader created with them. Copied once; our table delegates to the copy.
const redisReplyObjectFunctions& hiredis_functions() {
  static const redisReplyObjectFunctions functions = [] {
    const ReaderPtr probe(redisReaderCreate());
    if (probe == nullptr || probe->fn == nullptr) throw std::bad_alloc();
    return *probe->fn;
  }();
  return functions;
}

void* create_string(const redisReadTask* task, char* str, std::size_t len) {
  return hiredis_functions().createString(task, str, len);
}
void* create_integer(const redisReadTask* task, long long value) {
  return hiredis_functions().createInteger(task, value);
}
void* create_nil(const redisReadTask* task) { return hiredis_functions().createNil(task); }
void free_object(void* reply) { hiredis_functions().freeObject(reply); }

// A valid bulk header is '$', at most 20 digits (or "-1") and CRLF; hiredis has already
// rejected anything longer, so looking this far for the CRLF is enough.
constexpr std::size_t kMaxBulkHeader = 24;

bool has_crlf(const char* data, std::size_t size, bool after_cr) {
  if (size == 0) return false;
  if (after_cr && data[0] == '\n') return true;
  return std::string_view(data, size).find("\r\n") != std::string_view::npos;
}

}  // namespace



ReplyReader::ReplyReader(ReplyLimits limits) : limits_(limits) {
  // hiredis scans lines with an int index: keep every buffer well inside that.
  constexpr std::size_t kMaxMaxReplyBytes = std::size_t{1} << 30;
  if (limits_.max_reply_bytes == 0 || limits_.max_reply_bytes > kMaxMaxReplyBytes) {
    throw std::invalid_argument("ReplyLimits::max_reply_bytes must be in [1, " + std::to_string(kMaxMaxReplyBytes) +
                                "], got " + std::to_string(limits_.max_reply_bytes));
  }
  // One table for every reader: hiredis never writes through `fn`.
  static redisReplyObjectFunctions bounded = {create_string, &ReplyReader::create_array, create_integer, create_nil,
                                              free_object};
  (void)hiredis_functions();  // before the first reply, so a failure throws here, not in a callback
  reader_.reset(redisReaderCreateWithFunctions(&bounded));
  if (!reader_) throw std::bad_alloc();
  // Every read task carries this pointer to create_array.
  reader_->privdata = this;
}

ReplyReader::~ReplyReader() = default;

void* ReplyReader::create_array(const redisReadTask* task, int elements) {
  auto* self = static_cast<ReplyReader*>(task->privdata);
  if (self != nullptr) {
    // hiredis passes 0..INT_MAX; refusing here, before the calloc, is what keeps
    // `*200000000` from costing 1.6 GB. reply_elements_ <= max_elements always holds.
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
  }
  return hiredis_functions().createArray(task, elements);
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
      out.reset(static_cast<redisReply*>(raw));
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
  return false;
}

std::size_t ReplyReader::buffered() const noexcept {
  return reader_ ? reader_->len - reader_->pos : 0;
}

bool ReplyReader::partial() const noexcept { return fed_ > reply_start_; }

std::uint64_t ReplyReader::consumed() const noexcept { return fed_ - buffered(); }

}  // namespace redlock::detail

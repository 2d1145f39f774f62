// SPDX-License-Identifier: Apache-2.0
// fuzz/reply_fuzz.cpp — the reply path of one connection: arbitrary bytes from a master.
//
// The bytes go to a ReplyReader (lib/detail/reply_reader.h) in chunks the input chooses;
// every complete reply goes through classify_reply (lib/detail/quorum.h), the library's own
// reading of a reply as one master's status, for every round kind. Checked:
//   - never a crash, a leak or undefined behaviour (the sanitizers);
//   - never more than the cap buffered: at most max_reply_bytes plus the chunk just fed
//     after a feed, at most max_reply_bytes once every complete reply is taken; no reply
//     longer than max_reply_bytes and no reply declaring more than max_elements elements;
//   - always a per-master outcome: a refused stream names its reason (and stays refused,
//     with the same reason); an accepted one holds replies exactly as hiredis alone parses
//     the same bytes; each reply yields exactly one status per round kind, an error status
//     always with a reason and any other status without one;
//   - hiredis is not asked again for nothing: an ask that neither returns a reply nor
//     consumes a byte happens only when the bytes fed since the last ask can finish the
//     item hiredis is on, so the bytes those asks hand it stay linear in the bytes fed.
//
// Input layout (so that hand-written seeds stay readable: 4 bytes, then the stream as sent):
//   [0] reply cap: < 192 the library's default (1 MiB), else (b - 191) * 16 bytes (16..1024)
//   [1] element cap: < 192 the default (1024), else b - 192 (0..63)
//   [2] the fence round's token
//   [3] chunking: 0 one chunk; 1..127 chunk sizes from a generator seeded with it, at most
//       1 << (b % 8) bytes each; >= 128 the last b - 127 bytes of the input are chunk sizes,
//       used in turn (0: an empty feed, then one byte).
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "detail/lock_commands.h"
#include "detail/quorum.h"
#include "detail/reply_reader.h"
#include "detail/server_info.h"
#include "fuzz_check.h"
#include "redlock/result.h"

namespace {

using redlock::MasterStatus;
using redlock::detail::classify_reply;
using redlock::detail::read_config_get;
using redlock::detail::read_info_persistence;
using redlock::detail::read_info_replication;
using redlock::detail::read_info_server;
using redlock::detail::ReplyLimits;
using redlock::detail::ReplyPtr;
using redlock::detail::ReplyReader;
using redlock::detail::ReplyVote;
using redlock::detail::RoundKind;
using redlock::detail::ServerInfo;

// A reply tree as text, to compare with hiredis alone: "+OK", ":5", "$foo", "nil", "[a,b]".
std::string show(const redisReply& reply) {
  switch (reply.type) {
    case REDIS_REPLY_STATUS:
      return "+" + std::string(reply.str, reply.len);
    case REDIS_REPLY_ERROR:
      return "-" + std::string(reply.str, reply.len);
    case REDIS_REPLY_STRING:
      return "$" + std::string(reply.str, reply.len);
    case REDIS_REPLY_INTEGER:
      return ":" + std::to_string(reply.integer);
    case REDIS_REPLY_NIL:
      return "nil";
    case REDIS_REPLY_ARRAY: {
      std::string text = "[";
      for (std::size_t i = 0; i < reply.elements; ++i) text += (i ? "," : "") + show(*reply.element[i]);
      return text + "]";
    }
    default:
      return "?" + std::to_string(reply.type);
  }
}

std::size_t declared_elements(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY) return 0;
  std::size_t total = reply.elements;
  for (std::size_t i = 0; i < reply.elements; ++i) total += declared_elements(*reply.element[i]);
  return total;
}

// One master's status for this reply in a round of `kind`: exactly one, and it says why.
// `learn_pttl`: an unfenced acquire's waiting variant (integer PTTL when held).
void check_vote(const redisReply& reply, RoundKind kind, bool fencing, std::uint64_t fence, bool learn_pttl = false) {
  const ReplyVote vote = classify_reply(kind, fencing, fence, reply, learn_pttl);
  switch (vote.status) {
    case MasterStatus::ok:
    case MasterStatus::held_by_other:
    case MasterStatus::server_error:
      break;
    case MasterStatus::not_found:
      FUZZ_CHECK(kind == RoundKind::extend || kind == RoundKind::release, "not_found outside extend/release");
      break;
    default:
      FUZZ_CHECK(false, "a reply classified as a status no reply can give (timeout, not_connected, ...)");
  }
  FUZZ_CHECK((vote.status == MasterStatus::server_error) == !vote.error.empty(),
             "an error status must name its reason, and only an error status has one");
  if (reply.type == REDIS_REPLY_ERROR)
    FUZZ_CHECK(vote.status == MasterStatus::server_error, "error reply not an error");
  if (vote.status != MasterStatus::server_error) {
    // The one array that is an answer: a release's {1, receivers} (deleted, and announced).
    const bool announced_release = kind == RoundKind::release && vote.status == MasterStatus::ok &&
                                   reply.type == REDIS_REPLY_ARRAY;
    FUZZ_CHECK(reply.type == REDIS_REPLY_STATUS || reply.type == REDIS_REPLY_INTEGER || reply.type == REDIS_REPLY_NIL ||
                   announced_release,
               "a string or an array counted as an answer");
    if (announced_release) FUZZ_CHECK(vote.receivers > 0, "an announced release without receivers");
  }
  FUZZ_CHECK(vote.receivers >= 0 && (vote.receivers == 0 || (kind == RoundKind::release && vote.status == MasterStatus::ok)),
             "receivers outside a successful release");
  FUZZ_CHECK(vote.pttl == redlock::detail::kPttlUnknown ||
                 (learn_pttl && kind == RoundKind::acquire && !fencing && vote.status == MasterStatus::held_by_other &&
                  vote.pttl >= -1),
             "a PTTL outside a waiting acquire that found the key held, or below -1");
  if (vote.status == MasterStatus::ok) {
    if (kind == RoundKind::acquire && fencing) {
      FUZZ_CHECK(reply.type == REDIS_REPLY_INTEGER && vote.counter == reply.integer && vote.counter > 0,
                 "fenced grant without a positive counter");
    }
    if (kind == RoundKind::fence) {
      FUZZ_CHECK(
          reply.type == REDIS_REPLY_INTEGER && reply.integer >= 0 && static_cast<std::uint64_t>(reply.integer) >= fence,
          "fence acknowledged below the token");
    }
  }
}

// The same reply as the handshake's INFO server, INFO persistence or CONFIG GET answer (a hostile master may
// send anything there too): either a run_id with a start not after the read, or a reason.
void check_handshake_reply(const redisReply& reply, std::uint64_t read_at_ns) {
  ServerInfo info;
  read_info_server(reply, read_at_ns, info);
  FUZZ_CHECK(info.run_id.empty() != info.error.empty(), "INFO read gave both or neither of a run_id and a reason");
  FUZZ_CHECK(info.started_ns <= read_at_ns, "a server started after its INFO was read");
  ServerInfo config;
  read_config_get(reply, config);
  if (reply.type != REDIS_REPLY_ARRAY) {
    FUZZ_CHECK(config.appendonly.empty() && config.appendfsync.empty() && config.maxmemory_policy.empty() &&
                   config.no_appendfsync_on_rewrite.empty(),
               "CONFIG GET read a value from a reply that is not an array");
  }
  ServerInfo persistence;
  read_info_persistence(reply, persistence);
  FUZZ_CHECK(persistence.aof_rewrites >= -1, "INFO persistence read a negative rewrite count");
  FUZZ_CHECK(reply.type == REDIS_REPLY_STRING || (persistence.aof_rewrites == -1 && !persistence.aof_rewriting),
             "INFO persistence read a value from a reply that is not text");
  ServerInfo replication;
  read_info_replication(reply, replication);
  FUZZ_CHECK(replication.role.empty() != replication.role_error.empty(),
             "INFO replication gave both or neither of a role and a reason");
  FUZZ_CHECK(replication.role.empty() || replication.role == "master" || replication.role == "replica",
             "INFO replication read a role that is neither master nor replica");
  FUZZ_CHECK(replication.replica_of.size() <= 600, "INFO replication kept a long master address");
}

// Chunk sizes, as the input's byte [3] says.
class Chunker {
 public:
  Chunker(std::uint8_t mode, std::string_view sizes) : mode_(mode), sizes_(sizes), rng_(mode) {}
  std::size_t next(std::size_t left) {
    if (mode_ == 0) return left;
    if (mode_ < 128) {
      std::uniform_int_distribution<std::size_t> size(1, std::size_t{1} << (mode_ % 8));
      return std::min(left, size(rng_));
    }
    const auto size = static_cast<std::uint8_t>(sizes_[turn_++ % sizes_.size()]);
    return std::min<std::size_t>(left, size);  // 0: an empty feed (then 1 byte, so the stream moves)
  }

 private:
  std::uint8_t mode_;
  std::string_view sizes_;
  std::minstd_rand rng_;
  std::size_t turn_ = 0;
};

// hiredis alone on the whole stream: the reference for an accepted stream. Called only when
// the ReplyReader accepted every byte, so no array header in it declared more than the
// element cap and hiredis allocates no more than the bounded reader did.
std::vector<std::string> hiredis_alone(std::string_view stream, bool& failed) {
  std::vector<std::string> replies;
  redisReader* reader = redisReaderCreate();
  failed = redisReaderFeed(reader, stream.data(), stream.size()) != REDIS_OK;
  while (!failed) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader, &raw) != REDIS_OK) {
      failed = true;
      break;
    }
    if (raw == nullptr) break;
    replies.push_back(show(*static_cast<redisReply*>(raw)));
    freeReplyObject(raw);
  }
  redisReaderFree(reader);
  return replies;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  ReplyLimits limits;
  if (data[0] >= 192) limits.max_reply_bytes = std::size_t{data[0] - 191u} * 16;
  if (data[1] >= 192) limits.max_elements = data[1] - 192u;
  const std::uint64_t fence = data[2];
  const std::uint8_t mode = data[3];
  std::string_view stream(reinterpret_cast<const char*>(data) + 4, size - 4);
  std::string_view sizes;
  if (mode >= 128) {
    const std::size_t count = std::min<std::size_t>(mode - 127u, stream.size());
    if (count == 0) return 0;
    sizes = stream.substr(stream.size() - count);
    stream.remove_suffix(count);
  }
  Chunker chunker(mode, sizes);

  ReplyReader reader(limits);
  const std::size_t cap = limits.max_reply_bytes;
  std::vector<std::string> replies;
  std::uint64_t fed = 0;
  std::uint64_t reply_end = 0;    // stream offset where the last complete reply ended
  std::uint64_t wasted_scan = 0;  // bytes handed to hiredis by asks that got nothing
  bool refused = false;
  std::size_t at = 0;
  while (at < stream.size() && !refused) {
    std::size_t n = chunker.next(stream.size() - at);
    if (n == 0) {
      const std::size_t held = reader.buffered();
      FUZZ_CHECK(reader.feed(stream.data() + at, 0) && reader.buffered() == held, "an empty feed changed something");
      n = 1;
    }
    refused = !reader.feed(stream.data() + at, n);
    at += n;
    if (!refused) fed += n;
    FUZZ_CHECK(reader.buffered() <= cap + n, "more than the cap plus one chunk buffered after a feed");
    ReplyPtr reply;
    while (!refused) {
      const std::uint64_t examined = reader.bytes_examined();
      const std::uint64_t consumed = fed - reader.buffered();
      if (!reader.next(reply)) {
        refused = true;
        break;
      }
      if (!reply) {
        if (reader.bytes_examined() > examined && fed - reader.buffered() == consumed) {
          wasted_scan += reader.bytes_examined() - examined;
        }
        break;
      }
      const std::uint64_t end = fed - reader.buffered();
      FUZZ_CHECK(end - reply_end <= cap, "a reply longer than max_reply_bytes came out");
      reply_end = end;
      FUZZ_CHECK(declared_elements(*reply) <= limits.max_elements, "a reply over max_elements came out");
      for (const RoundKind kind : {RoundKind::acquire, RoundKind::extend, RoundKind::release, RoundKind::fence}) {
        check_vote(*reply, kind, false, fence);
      }
      check_vote(*reply, RoundKind::acquire, true, fence);
      check_vote(*reply, RoundKind::acquire, false, fence, true);
      check_handshake_reply(*reply, fence);
      replies.push_back(show(*reply));
    }
    if (!refused) {
      FUZZ_CHECK(reader.buffered() <= cap, "more than the cap buffered with every complete reply taken");
      FUZZ_CHECK(reader.buffered() == 0 || reader.partial(), "bytes held but no reply in progress");
    }
    FUZZ_CHECK(wasted_scan <= 2 * fed + 64, "hiredis asked again and again without new bytes that could help");
  }

  if (refused) {
    const std::string reason = reader.error();
    FUZZ_CHECK(!reason.empty(), "a refused stream without a reason");
    FUZZ_CHECK(reader.buffered() == 0, "a refused stream still holds bytes");
    ReplyPtr reply;
    FUZZ_CHECK(!reader.feed("+OK\r\n", 5) && !reader.next(reply) && !reply, "a refused stream became usable again");
    FUZZ_CHECK(reader.error() == reason, "a refused stream changed its reason");
    return 0;
  }
  FUZZ_CHECK(reader.error().empty(), "an error without a refusal");
  FUZZ_CHECK(reader.partial() == (fed > reply_end), "partial() disagrees with the bytes after the last reply");
  bool hiredis_failed = false;
  const std::vector<std::string> reference = hiredis_alone(stream.substr(0, at), hiredis_failed);
  FUZZ_CHECK(!hiredis_failed, "hiredis alone fails on a stream the reader accepted");
  FUZZ_CHECK(reference == replies, "replies differ from what hiredis alone parses");
  return 0;
}

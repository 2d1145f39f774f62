// SPDX-License-Identifier: Apache-2.0
// alloc_counter.cpp counts every allocation of the process once: C and C++, every thread,
// inside C libraries too (hiredis reply objects).
#include "alloc_counter.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <malloc.h>

#include <cstdlib>
#include <new>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace {

// Keeps the compiler from pairing an allocation with its free and removing both.
void escape(void* pointer) { asm volatile("" : : "g"(pointer) : "memory"); }

struct Delta {
  bench::AllocCount start = bench::alloc_count();
  [[nodiscard]] std::uint64_t calls() const { return bench::alloc_count().calls - start.calls; }
  [[nodiscard]] std::uint64_t bytes() const { return bench::alloc_count().bytes - start.bytes; }
};

TEST(AllocCounter, EveryCFunctionCountsOnceWithItsBytes) {
  {
    const Delta d;
    void* p = std::malloc(100);
    escape(p);
    std::free(p);
    EXPECT_EQ(d.calls(), 1u);
    EXPECT_EQ(d.bytes(), 100u);
  }
  {
    const Delta d;
    void* p = std::calloc(3, 40);
    escape(p);
    std::free(p);
    EXPECT_EQ(d.calls(), 1u);
    EXPECT_EQ(d.bytes(), 120u);
  }
  {
    const Delta d;
    void* p = std::realloc(nullptr, 10);
    escape(p);
    p = std::realloc(p, 5000);
    escape(p);
    std::free(p);
    EXPECT_EQ(d.calls(), 2u);
    EXPECT_EQ(d.bytes(), 5010u);
  }
  {
    const Delta d;
    void* p = std::aligned_alloc(64, 128);
    escape(p);
    std::free(p);
    void* q = nullptr;
    ASSERT_EQ(posix_memalign(&q, 64, 32), 0);
    escape(q);
    std::free(q);
    void* r = memalign(32, 16);
    escape(r);
    std::free(r);
    EXPECT_EQ(d.calls(), 3u);
    EXPECT_EQ(d.bytes(), 176u);
  }
}

TEST(AllocCounter, OperatorNewCountsOnce) {
  const Delta d;
  void* p = ::operator new(48);
  escape(p);
  ::operator delete(p);
  void* q = ::operator new(64, std::align_val_t{64});
  escape(q);
  ::operator delete(q, std::align_val_t{64});
  EXPECT_EQ(d.calls(), 2u);
  EXPECT_EQ(d.bytes(), 112u);
}

TEST(AllocCounter, StringBeyondSmallBuffer) {
  const Delta d;
  std::string s(100, 'x');
  escape(s.data());
  EXPECT_EQ(d.calls(), 1u);
}

TEST(AllocCounter, OtherThreadsCount) {
  // Counted here, on the main thread, around what another thread allocates: a per-thread
  // counter would miss its 1000. (Thread creation allocates a few more: at least.)
  const Delta d;
  std::thread t([] {
    for (int i = 0; i < 1000; ++i) {
      void* p = std::malloc(16);
      escape(p);
      std::free(p);
    }
  });
  t.join();
  EXPECT_GE(d.calls(), 1000u);
}

TEST(AllocCounter, HiredisReplyObjectsCount) {
  redisReader* reader = redisReaderCreate();
  ASSERT_NE(reader, nullptr);
  ASSERT_EQ(redisReaderFeed(reader, "+OK\r\n", 5), REDIS_OK);
  const Delta d;
  void* reply = nullptr;
  ASSERT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  ASSERT_NE(reply, nullptr);
  EXPECT_GE(d.calls(), 2u);  // the redisReply and its string
  freeReplyObject(reply);
  redisReaderFree(reader);
}

}  // namespace

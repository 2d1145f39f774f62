// SPDX-License-Identifier: Apache-2.0
// BlockCache (lib/detail/pool_allocator.h): freed blocks of its one size are handed out again,
// and it keeps no more of them than its capacity. Heap traffic is counted with a replaced
// global operator new/delete (this test binary only), so the bound is seen, not inferred.
#include "detail/pool_allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

namespace {

std::atomic<long> heap_allocations{0};
std::atomic<long> heap_frees{0};

}  // namespace

// new_delete_resource uses the aligned forms; the plain ones are counted too.
void* operator new(std::size_t size) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, std::align_val_t align) {
  heap_allocations.fetch_add(1, std::memory_order_relaxed);
  const auto alignment = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p != nullptr) heap_frees.fetch_add(1, std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
void operator delete(void* p, std::align_val_t) noexcept { operator delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { operator delete(p); }

namespace redlock::detail {
namespace {

struct Counts {
  long allocations;
  long frees;
};
Counts counts() { return {heap_allocations.load(), heap_frees.load()}; }

TEST(BlockCacheTest, ReusesFreedBlocksAndKeepsNoMoreThanItsCapacity) {
  constexpr std::size_t kCapacity = 4;
  constexpr std::size_t kBlocks = 10;
  constexpr std::size_t kSize = 96;
  BlockCache cache(kCapacity);  // reserves its free list here, before counting
  std::vector<void*> blocks;
  blocks.reserve(kBlocks);

  auto before = counts();
  for (std::size_t i = 0; i < kBlocks; ++i) blocks.push_back(cache.allocate(kSize));
  EXPECT_EQ(counts().allocations - before.allocations, static_cast<long>(kBlocks)) << "an empty cache takes from the heap";

  before = counts();
  for (void* block : blocks) cache.deallocate(block, kSize);
  blocks.clear();
  EXPECT_EQ(counts().frees - before.frees, static_cast<long>(kBlocks - kCapacity))
      << "the cache keeps exactly its capacity and returns the rest to the heap";
  EXPECT_EQ(counts().allocations, before.allocations) << "keeping a block must not allocate";

  before = counts();
  for (std::size_t i = 0; i < kBlocks; ++i) blocks.push_back(cache.allocate(kSize));
  EXPECT_EQ(counts().allocations - before.allocations, static_cast<long>(kBlocks - kCapacity))
      << "the kept blocks are handed out again first";

  // Another size is never kept: it goes to the heap and back.
  before = counts();
  void* other = cache.allocate(kSize * 2);
  cache.deallocate(other, kSize * 2);
  EXPECT_EQ(counts().allocations - before.allocations, 1);
  EXPECT_EQ(counts().frees - before.frees, 1);

  for (void* block : blocks) cache.deallocate(block, kSize);
}

// What allocate_shared makes through a PoolAllocator keeps the cache alive: a block freed after
// its maker dropped the cache still goes back to it (ASan would see a use after free otherwise),
// and the cache's kept blocks are freed with it (LeakSanitizer would see them otherwise).
TEST(BlockCacheTest, AnObjectOutlivingItsMakerReturnsItsBlockToALiveCache) {
  auto cache = std::make_shared<BlockCache>(2);
  std::weak_ptr<BlockCache> watch = cache;
  auto object = std::allocate_shared<std::vector<int>>(PoolAllocator<std::vector<int>>(cache), 3, 7);
  cache.reset();
  EXPECT_FALSE(watch.expired()) << "the object's control block holds the cache";
  EXPECT_EQ((*object)[2], 7);
  object.reset();
  EXPECT_TRUE(watch.expired()) << "the last block went back and the cache went with it";
}

}  // namespace
}  // namespace redlock::detail

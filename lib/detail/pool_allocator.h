// SPDX-License-Identifier: Apache-2.0
// detail/pool_allocator.h — reuse of the blocks of objects made once per operation or round
// (Operation, Round), so that a lock cycle costs no heap allocation for them.
//
// BlockCache is a std::pmr::memory_resource that keeps up to `capacity` freed blocks of the
// one size it serves and hands them out again; any other size, and blocks beyond the
// capacity, go to and come from the heap (new_delete_resource). Any thread: one mutex, held
// for a push or a pop. (libstdc++'s pool resources were measured first: a pool allocation
// cost about 340 instructions for unsynchronized_pool_resource, which searches a bitmap, and
// more for the synchronized one, against glibc malloc's thread cache at a fraction of that;
// a free list costs a few dozen.) It holds at most `capacity` blocks beyond those in use.
//
// In a child of a fork() made after the cache was, the mutex is never taken: the parent's
// loop thread may have held it at the fork, and the child's next operation then waited for
// ever (a clean-clone CI run; AsyncTest.AChildForkedWhileTheLoopFreesOperationsIsAnswered
// Cancelled). There every block goes to and comes from the heap; the free list is left as
// the fork found it.
//
// PoolAllocator is the allocator for std::allocate_shared over such a resource. Every
// allocation keeps the resource alive (the shared_ptr's control block holds a copy of the
// allocator), because what is made may outlive its maker: a Round waits in its connections'
// queues after its operation ended.
#pragma once

#include <cstddef>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <vector>

#include "detail/fork_generation.h"

namespace redlock::detail {

class BlockCache final : public std::pmr::memory_resource {
 public:
  explicit BlockCache(std::size_t capacity) : capacity_(capacity) { free_.reserve(capacity_); }
  ~BlockCache() override {
    if (made_before_fork(generation_)) return;  // the parent's list: left as it is
    for (void* block : free_) heap()->deallocate(block, size_, kAlign);
  }
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

 private:
  static constexpr std::size_t kAlign = alignof(std::max_align_t);
  static std::pmr::memory_resource* heap() noexcept { return std::pmr::new_delete_resource(); }

  // The free list is this process's (detail/fork_generation.h).
  [[nodiscard]] bool pooled(std::size_t align) const noexcept {
    return align <= kAlign && !made_before_fork(generation_);
  }

  void* do_allocate(std::size_t bytes, std::size_t align) override {
    if (pooled(align)) {
      const std::lock_guard lock(mutex_);
      if (size_ == 0) size_ = bytes;  // the first size asked for is the one served
      if (bytes == size_ && !free_.empty()) {
        void* block = free_.back();
        free_.pop_back();
        return block;
      }
    }
    return heap()->allocate(bytes, align <= kAlign ? kAlign : align);
  }

  void do_deallocate(void* block, std::size_t bytes, std::size_t align) override {
    if (pooled(align)) {
      const std::lock_guard lock(mutex_);
      if (bytes == size_ && free_.size() < capacity_) {
        free_.push_back(block);  // (reserved: no allocation here)
        return;
      }
    }
    heap()->deallocate(block, bytes, align <= kAlign ? kAlign : align);
  }

  bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }

  const std::size_t capacity_;
  const std::uint64_t generation_ = fork_generation();
  std::mutex mutex_;
  std::size_t size_ = 0;
  std::vector<void*> free_;
};

template <typename T>
class PoolAllocator {
 public:
  using value_type = T;

  explicit PoolAllocator(std::shared_ptr<std::pmr::memory_resource> pool) noexcept : pool_(std::move(pool)) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& other) noexcept : pool_(other.pool_) {}  // NOLINT: rebinding

  T* allocate(std::size_t n) { return static_cast<T*>(pool_->allocate(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { pool_->deallocate(p, n * sizeof(T), alignof(T)); }

  template <typename U>
  bool operator==(const PoolAllocator<U>& other) const noexcept {
    return pool_ == other.pool_;
  }

 private:
  template <typename U>
  friend class PoolAllocator;
  std::shared_ptr<std::pmr::memory_resource> pool_;
};

}  // namespace redlock::detail

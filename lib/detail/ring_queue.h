// SPDX-License-Identifier: Apache-2.0
// detail/ring_queue.h — a FIFO on one reusable buffer. Once it has grown to the most ever
// queued, push_back and pop_front allocate nothing (std::deque allocates a block every few
// dozen pushes and frees one every few dozen pops: a connection's reply queue did that on
// every lock operation). It gives its memory back when it empties after having held more
// than kKeptSlots, so a backlog does not pin its peak.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace redlock::detail {

template <typename T>  // default-constructible and movable; a popped slot is reset to T{}
class RingQueue {
 public:
  static constexpr std::size_t kKeptSlots = 1024;

  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] T& front() noexcept { return slots_[head_]; }
  [[nodiscard]] T& operator[](std::size_t index) noexcept { return slots_[(head_ + index) & (slots_.size() - 1)]; }
  [[nodiscard]] const T& operator[](std::size_t index) const noexcept {
    return slots_[(head_ + index) & (slots_.size() - 1)];
  }

  void push_back(T value) {
    if (size_ == slots_.size()) grow();
    slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(value);
    ++size_;
  }

  void pop_front() {
    slots_[head_] = T{};  // what the slot held (a sink) is released now, not when it is reused
    head_ = (head_ + 1) & (slots_.size() - 1);
    if (--size_ == 0) {
      head_ = 0;
      if (slots_.size() > kKeptSlots) slots_ = {};
    }
  }

  void swap(RingQueue& other) noexcept {
    slots_.swap(other.slots_);
    std::swap(head_, other.head_);
    std::swap(size_, other.size_);
  }

 private:
  void grow() {
    std::vector<T> bigger(slots_.empty() ? 16 : slots_.size() * 2);  // a power of two: indices wrap by mask
    for (std::size_t i = 0; i < size_; ++i) bigger[i] = std::move((*this)[i]);
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t size_ = 0;
};

}  // namespace redlock::detail

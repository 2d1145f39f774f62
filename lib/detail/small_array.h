// SPDX-License-Identifier: Apache-2.0
// detail/small_array.h — an array whose size is set when it is filled: inline for up to
// `Inline` elements, on the heap beyond. Per-master bookkeeping uses it so that the usual
// fleets (1, 3, 5 or 7 masters) cost no allocation per lock or per round.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

namespace redlock::detail {

inline constexpr std::size_t kInlineMasters = 7;

template <typename T, std::size_t Inline = kInlineMasters>
class SmallArray {
 public:
  SmallArray() = default;
  SmallArray(std::size_t size, const T& value) { assign(size, value); }

  void assign(std::size_t size, const T& value) {
    heap_.clear();
    if (size > Inline) {
      heap_.assign(size, value);
    } else {
      std::fill_n(inline_.begin(), size, value);
    }
    size_ = size;
  }

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] T& operator[](std::size_t index) noexcept { return data()[index]; }
  [[nodiscard]] const T& operator[](std::size_t index) const noexcept { return data()[index]; }

 private:
  [[nodiscard]] T* data() noexcept { return size_ > Inline ? heap_.data() : inline_.data(); }
  [[nodiscard]] const T* data() const noexcept { return size_ > Inline ? heap_.data() : inline_.data(); }

  std::array<T, Inline> inline_{};
  std::vector<T> heap_;
  std::size_t size_ = 0;
};

}  // namespace redlock::detail

// SPDX-License-Identifier: Apache-2.0
// detail/uv_handle.h — the one way this library owns a libuv handle.
//
// libuv may touch a handle until its close callback has run, so a handle is never deleted
// directly: its owner calls uv_close, and the close callback frees the memory (as uvw's
// Handle does). UvHandlePtr<T> packages that: resetting or destroying it closes the handle,
// and the memory goes once libuv is done with it. T is a libuv handle type (uv_timer_t,
// ...) or a standard-layout struct whose first member is one (a socket with its buffers);
// `data` stays free for the owner's callbacks.
#pragma once

#include <uv.h>

#include <memory>
#include <type_traits>

namespace redlock::detail {

template <class T>
struct UvClose {
  void operator()(T* owned) const noexcept {
    static_assert(std::is_standard_layout_v<T>, "the libuv handle must be T's first member");
    uv_close(reinterpret_cast<uv_handle_t*>(owned), [](uv_handle_t* handle) { delete reinterpret_cast<T*>(handle); });
  }
};

template <class T>
using UvHandlePtr = std::unique_ptr<T, UvClose<T>>;

// A zeroed T, not yet initialised (the caller runs uv_*_init on it). Until then it must not
// be reset: uv_close needs an initialised handle.
template <class T>
UvHandlePtr<T> make_uv_handle() {
  return UvHandlePtr<T>(new T{});
}

}  // namespace redlock::detail

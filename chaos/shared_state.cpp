// SPDX-License-Identifier: Apache-2.0
#include "shared_state.h"

#include <sys/mman.h>

#include <new>
#include <stdexcept>

namespace redlock::chaos {

SharedMapping::SharedMapping() {
  memory_ = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory_ == MAP_FAILED) throw std::runtime_error("mmap of the shared state failed");
  shared_ = new (memory_) Shared;
}

SharedMapping::~SharedMapping() {
  shared_->~Shared();
  ::munmap(memory_, sizeof(Shared));
}

}  // namespace redlock::chaos

// SPDX-License-Identifier: Apache-2.0
#include "support/process_memory.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace redlock::support {
namespace {

long status_field_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::size_t len = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, len, field) == 0 && line.size() > len && line[len] == ':') {
      return std::strtol(line.c_str() + len + 1, nullptr, 10);
    }
  }
  return -1;
}

}  // namespace

long rss_kib() { return status_field_kib("VmRSS"); }
long hwm_kib() { return status_field_kib("VmHWM"); }

bool reset_hwm() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace redlock::support

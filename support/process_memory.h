// SPDX-License-Identifier: Apache-2.0
// support/process_memory.h — this process's resident memory, from /proc/self (Linux).
// For the benchmarks' memory figures and the tests' bounds on what a bad master may cost.
#pragma once

namespace redlock::support {

long rss_kib();    // VmRSS now, in KiB; -1 if unreadable
long hwm_kib();    // VmHWM: peak RSS since the process started or since reset_hwm()
bool reset_hwm();  // sets VmHWM to the current RSS (/proc/self/clear_refs "5"); false if refused

}  // namespace redlock::support

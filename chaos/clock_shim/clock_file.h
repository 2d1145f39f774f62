// SPDX-License-Identifier: Apache-2.0
/* The control file shared by the clock shim (clock_shim.c, C, preloaded into a redis-server)
 * and its controller (chaos/clock_control.cpp, C++, in the chaos harness). This header is
 * the one description of its layout; both sides include it.
 *
 * The file holds one struct redlock_clock_file, mapped MAP_SHARED by both sides. The
 * controller is the only writer; every process running the shim reads it. The fields are
 * plain integers and a double, always accessed with atomic loads and stores (GCC/Clang
 * __atomic builtins in C, std::atomic_ref in C++), under a seqlock:
 *
 *   writer: sequence = s + 1 (odd), store the fields (release), sequence = s + 2 (release)
 *   reader: s = sequence (acquire), skip if odd; load the fields; acquire fence;
 *           retry unless sequence still equals s
 *
 * Readers never block and never write, so they are async-signal-safe and lock-free.
 *
 * The fake wall clock is a straight line through one anchor point:
 *
 *   fake_ns = anchor_fake_ns + (real_ns - anchor_real_ns) * rate
 *
 * where real_ns is the real CLOCK_REALTIME in nanoseconds since the epoch. Identity is
 * anchor_fake_ns == anchor_real_ns, rate == 1. A jump moves anchor_fake_ns; a rate change
 * re-anchors at "now" so the clock stays continuous. */
#ifndef REDLOCK_CHAOS_CLOCK_FILE_H
#define REDLOCK_CHAOS_CLOCK_FILE_H

#include <stddef.h>
#include <stdint.h>

/* The environment variable naming the control file. Unset or missing file: no change. */
#define REDLOCK_CLOCK_FILE_ENV "REDLOCK_CLOCK_FILE"
/* "RLCK" little-endian; a file without it (e.g. still all zeroes) is ignored. */
#define REDLOCK_CLOCK_MAGIC 0x4b434c52u
#define REDLOCK_CLOCK_VERSION 1u

struct redlock_clock_file {
  uint32_t magic;         /* REDLOCK_CLOCK_MAGIC */
  uint32_t version;       /* REDLOCK_CLOCK_VERSION */
  uint64_t sequence;      /* seqlock counter: odd while the writer is updating */
  int64_t anchor_real_ns; /* real CLOCK_REALTIME at the anchor */
  int64_t anchor_fake_ns; /* fake wall clock at the anchor */
  double rate;            /* fake nanoseconds per real nanosecond; > 0 */
  uint8_t reserved[24];   /* zero; pads the file to 64 bytes */
};

#ifdef __cplusplus
#define REDLOCK_CLOCK_STATIC_ASSERT static_assert
#else
#define REDLOCK_CLOCK_STATIC_ASSERT _Static_assert
#endif
REDLOCK_CLOCK_STATIC_ASSERT(sizeof(struct redlock_clock_file) == 64, "clock file layout");
REDLOCK_CLOCK_STATIC_ASSERT(offsetof(struct redlock_clock_file, sequence) == 8, "clock file layout");
REDLOCK_CLOCK_STATIC_ASSERT(offsetof(struct redlock_clock_file, anchor_real_ns) == 16, "clock file layout");
REDLOCK_CLOCK_STATIC_ASSERT(offsetof(struct redlock_clock_file, anchor_fake_ns) == 24, "clock file layout");
REDLOCK_CLOCK_STATIC_ASSERT(offsetof(struct redlock_clock_file, rate) == 32, "clock file layout");
#undef REDLOCK_CLOCK_STATIC_ASSERT

/* One consistent copy of the parameters (what a reader gets out of the seqlock). */
struct redlock_clock_params {
  int64_t anchor_real_ns;
  int64_t anchor_fake_ns;
  double rate;
};

/* The fake clock at real_ns. Both sides use this one function, so the controller's
 * offset() and the shim agree to the nanosecond. A rate of exactly 1 stays in integer
 * arithmetic (no rounding); other rates go through a double, which is exact to well under
 * a microsecond for spans of days. Results that would overflow are clamped. */
static inline int64_t redlock_clock_fake_ns(const struct redlock_clock_params* params, int64_t real_ns) {
  int64_t delta = 0;
  int64_t fake = 0;
  if (__builtin_sub_overflow(real_ns, params->anchor_real_ns, &delta)) {
    delta = real_ns < params->anchor_real_ns ? INT64_MIN : INT64_MAX;
  }
  if (params->rate != 1.0) {
    /* 9.2e18 is just under INT64_MAX. A NaN rate (never written) leaves delta unscaled. */
    const double scaled = (double)delta * params->rate;
    if (scaled >= 9.2e18) {
      delta = INT64_MAX;
    } else if (scaled <= -9.2e18) {
      delta = INT64_MIN;
    } else if (scaled == scaled) {
      delta = (int64_t)scaled;
    }
  }
  if (__builtin_add_overflow(params->anchor_fake_ns, delta, &fake)) {
    fake = delta < 0 ? INT64_MIN : INT64_MAX;
  }
  return fake;
}

#endif /* REDLOCK_CHAOS_CLOCK_FILE_H */

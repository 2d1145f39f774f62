// SPDX-License-Identifier: Apache-2.0
/* redlock_clock_shim: an LD_PRELOAD library that moves one process's wall clock.
 *
 * Preloaded into a redis-server with REDLOCK_CLOCK_FILE naming a control file written by
 * redlock::chaos::ClockControl, it rewrites what the process reads from the wall clock:
 * gettimeofday(), time() and clock_gettime(CLOCK_REALTIME / CLOCK_REALTIME_COARSE). Every
 * other clock, CLOCK_MONOTONIC above all, passes through untouched, so redis's timers and
 * latency measurements stay honest while its key expiry (driven by the wall clock) jumps or
 * races. The layout and the formula are in clock_file.h.
 *
 * Without REDLOCK_CLOCK_FILE, or when the file cannot be opened or is too short, or does
 * not carry the magic and version, every call is passed through unchanged.
 *
 * The read path (every call) takes no lock, allocates nothing and calls only the real
 * clock functions, so it is safe in signal handlers and in any thread. The control file
 * is mapped once: from the library constructor, or by the first call that comes earlier.
 * The real functions are looked up with dlsym(RTLD_NEXT) in the constructor only; a call
 * that arrives before that uses the system calls directly. */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clock_file.h"

/* ------------------------------------------------------------------ exported overrides
 *
 * Defined under their own C names and given the libc symbol names with asm labels, so the
 * libc declarations' nonnull attributes (gettimeofday's tv, clock_gettime's tp) do not let
 * the compiler drop our NULL checks. */
#define SHIM_EXPORT __attribute__((visibility("default")))

SHIM_EXPORT int shim_gettimeofday(struct timeval* restrict tv, void* restrict tz) __asm__("gettimeofday");
SHIM_EXPORT int shim_clock_gettime(clockid_t clock_id, struct timespec* tp) __asm__("clock_gettime");
SHIM_EXPORT time_t shim_time(time_t* out) __asm__("time");

/* ------------------------------------------------------------------ the real functions */

typedef int (*clock_gettime_fn)(clockid_t, struct timespec*);
typedef int (*gettimeofday_fn)(struct timeval*, void*);
typedef time_t (*time_fn)(time_t*);

/* NULL until the constructor found them; read and written with __atomic builtins. */
static clock_gettime_fn real_clock_gettime_fn;
static gettimeofday_fn real_gettimeofday_fn;
static time_fn real_time_fn;

static int real_clock_gettime(clockid_t clock_id, struct timespec* tp) {
  const clock_gettime_fn fn = __atomic_load_n(&real_clock_gettime_fn, __ATOMIC_ACQUIRE);
  if (fn != NULL) return fn(clock_id, tp);
  return (int)syscall(SYS_clock_gettime, clock_id, tp);
}

static int real_gettimeofday(struct timeval* tv, void* tz) {
  const gettimeofday_fn fn = __atomic_load_n(&real_gettimeofday_fn, __ATOMIC_ACQUIRE);
  if (fn != NULL) return fn(tv, tz);
  return (int)syscall(SYS_gettimeofday, tv, tz);
}

static time_t real_time(time_t* out) {
  const time_fn fn = __atomic_load_n(&real_time_fn, __ATOMIC_ACQUIRE);
  if (fn != NULL) return fn(out);
  struct timespec now;
  if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &now) != 0) return (time_t)-1;
  if (out != NULL) *out = now.tv_sec;
  return now.tv_sec;
}

/* dlsym hands back an object pointer; copying its bytes is the portable way to turn it
 * into a function pointer. A lookup that finds nothing, or finds us, is left NULL so the
 * system-call fallback stays in use. */
static void* next_symbol(const char* name, const void* ours) {
  void* symbol = dlsym(RTLD_NEXT, name);
  return symbol == ours ? NULL : symbol;
}

static void resolve_real_functions(void) {
  _Static_assert(sizeof(void*) == sizeof(clock_gettime_fn), "function pointers are object-sized");
  const int saved_errno = errno;
  void* symbol = NULL;
  clock_gettime_fn clock_gettime_real = NULL;
  gettimeofday_fn gettimeofday_real = NULL;
  time_fn time_real = NULL;

  const clock_gettime_fn clock_gettime_ours = shim_clock_gettime;
  const gettimeofday_fn gettimeofday_ours = shim_gettimeofday;
  const time_fn time_ours = shim_time;
  void* ours = NULL;

  memcpy(&ours, &clock_gettime_ours, sizeof ours);
  symbol = next_symbol("clock_gettime", ours);
  memcpy(&clock_gettime_real, &symbol, sizeof symbol);
  memcpy(&ours, &gettimeofday_ours, sizeof ours);
  symbol = next_symbol("gettimeofday", ours);
  memcpy(&gettimeofday_real, &symbol, sizeof symbol);
  memcpy(&ours, &time_ours, sizeof ours);
  symbol = next_symbol("time", ours);
  memcpy(&time_real, &symbol, sizeof symbol);

  __atomic_store_n(&real_clock_gettime_fn, clock_gettime_real, __ATOMIC_RELEASE);
  __atomic_store_n(&real_gettimeofday_fn, gettimeofday_real, __ATOMIC_RELEASE);
  __atomic_store_n(&real_time_fn, time_real, __ATOMIC_RELEASE);
  errno = saved_errno;
}

/* ------------------------------------------------------------------ the control file */

#define CONTROL_UNTRIED ((uintptr_t)0)
#define CONTROL_UNAVAILABLE ((uintptr_t)1)

/* CONTROL_UNTRIED, CONTROL_UNAVAILABLE or the address of the mapped file. Set once. */
static uintptr_t control_word = CONTROL_UNTRIED;

/* Opens and maps the file named by REDLOCK_CLOCK_FILE. Only system calls and getenv (a
 * plain read of environ), so it is fine on any path, including a signal handler. If two
 * threads race, one mapping wins and the other is unmapped. */
static uintptr_t map_control_file(void) {
  const int saved_errno = errno;
  uintptr_t word = CONTROL_UNAVAILABLE;
  const char* path = getenv(REDLOCK_CLOCK_FILE_ENV);
  if (path != NULL && path[0] != '\0') {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st;
      if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(struct redlock_clock_file)) {
        void* mapped = mmap(NULL, sizeof(struct redlock_clock_file), PROT_READ, MAP_SHARED, fd, 0);
        if (mapped != MAP_FAILED) word = (uintptr_t)mapped;
      }
      close(fd);
    }
  }
  uintptr_t expected = CONTROL_UNTRIED;
  if (!__atomic_compare_exchange_n(&control_word, &expected, word, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    if (word != CONTROL_UNAVAILABLE) munmap((void*)word, sizeof(struct redlock_clock_file));
    word = expected;
  }
  errno = saved_errno;
  return word;
}

static const struct redlock_clock_file* control_file(void) {
  uintptr_t word = __atomic_load_n(&control_word, __ATOMIC_ACQUIRE);
  if (word == CONTROL_UNTRIED) word = map_control_file();
  return word == CONTROL_UNAVAILABLE ? NULL : (const struct redlock_clock_file*)word;
}

/* A writer holds the seqlock for a handful of stores, so a reader normally retries at
 * most once or twice. If the writer died half-way the sequence stays odd forever; after
 * this many attempts (yielding the CPU between the later ones) the reader gives up and
 * the call passes through rather than hang the process. */
#define SEQLOCK_SPINS 64u
#define SEQLOCK_ATTEMPTS 4096u

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Returns 1 with a consistent copy of the parameters, 0 to pass through. */
static int read_params(const struct redlock_clock_file* file, struct redlock_clock_params* out) {
  for (unsigned attempt = 0; attempt < SEQLOCK_ATTEMPTS; ++attempt) {
    const uint64_t before = __atomic_load_n(&file->sequence, __ATOMIC_ACQUIRE);
    if ((before & 1u) == 0) {
      if (__atomic_load_n(&file->magic, __ATOMIC_RELAXED) != REDLOCK_CLOCK_MAGIC ||
          __atomic_load_n(&file->version, __ATOMIC_RELAXED) != REDLOCK_CLOCK_VERSION) {
        return 0;
      }
      out->anchor_real_ns = __atomic_load_n(&file->anchor_real_ns, __ATOMIC_RELAXED);
      out->anchor_fake_ns = __atomic_load_n(&file->anchor_fake_ns, __ATOMIC_RELAXED);
      __atomic_load(&file->rate, &out->rate, __ATOMIC_RELAXED);
      __atomic_thread_fence(__ATOMIC_ACQUIRE);
      if (__atomic_load_n(&file->sequence, __ATOMIC_RELAXED) == before) return 1;
    }
    if (attempt < SEQLOCK_SPINS) {
      cpu_relax();
    } else {
      sched_yield();
    }
  }
  return 0;
}

/* Returns 1 and sets *fake_ns if the control file is in use, 0 to pass through. */
static int fake_from_real(int64_t real_ns, int64_t* fake_ns) {
  const struct redlock_clock_file* file = control_file();
  if (file == NULL) return 0;
  struct redlock_clock_params params;
  if (!read_params(file, &params)) return 0;
  *fake_ns = redlock_clock_fake_ns(&params, real_ns);
  return 1;
}

/* ------------------------------------------------------------------ conversions */

#define NS_PER_SEC INT64_C(1000000000)
#define NS_PER_USEC INT64_C(1000)

static int64_t timespec_to_ns(const struct timespec* ts) {
  return (int64_t)ts->tv_sec * NS_PER_SEC + (int64_t)ts->tv_nsec;
}

/* Floor division, so times before the epoch keep a non-negative sub-second part. */
static int64_t floor_seconds(int64_t ns) {
  int64_t seconds = ns / NS_PER_SEC;
  if (ns % NS_PER_SEC < 0) --seconds;
  return seconds;
}

static void ns_to_timespec(int64_t ns, struct timespec* ts) {
  const int64_t seconds = floor_seconds(ns);
  ts->tv_sec = (time_t)seconds;
  ts->tv_nsec = (long)(ns - seconds * NS_PER_SEC);
}

static void ns_to_timeval(int64_t ns, struct timeval* tv) {
  const int64_t seconds = floor_seconds(ns);
  tv->tv_sec = (time_t)seconds;
  tv->tv_usec = (suseconds_t)((ns - seconds * NS_PER_SEC) / NS_PER_USEC);
}

/* Reads the real CLOCK_REALTIME and maps it. Returns 1 with *fake_ns, 0 to pass through. */
static int fake_now(int64_t* fake_ns) {
  if (control_file() == NULL) return 0;
  struct timespec now;
  if (real_clock_gettime(CLOCK_REALTIME, &now) != 0) return 0;
  return fake_from_real(timespec_to_ns(&now), fake_ns);
}

/* ------------------------------------------------------------------ overrides */

int shim_clock_gettime(clockid_t clock_id, struct timespec* tp) {
  const int rc = real_clock_gettime(clock_id, tp);
  if (rc != 0 || tp == NULL || (clock_id != CLOCK_REALTIME && clock_id != CLOCK_REALTIME_COARSE)) return rc;
  int64_t fake = 0;
  if (fake_from_real(timespec_to_ns(tp), &fake)) ns_to_timespec(fake, tp);
  return 0;
}

int shim_gettimeofday(struct timeval* restrict tv, void* restrict tz) {
  int64_t fake = 0;
  if (tv == NULL || !fake_now(&fake)) return real_gettimeofday(tv, tz);
  /* The obsolete timezone argument is still filled in by the real function. */
  if (tz != NULL) {
    struct timeval scratch;
    if (real_gettimeofday(&scratch, tz) != 0) return -1;
  }
  ns_to_timeval(fake, tv);
  return 0;
}

time_t shim_time(time_t* out) {
  int64_t fake = 0;
  if (!fake_now(&fake)) return real_time(out);
  const time_t seconds = (time_t)floor_seconds(fake);
  if (out != NULL) *out = seconds;
  return seconds;
}

/* ------------------------------------------------------------------ load time */

__attribute__((constructor)) static void shim_init(void) {
  resolve_real_functions();
  (void)control_file();
}

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The packaging check (ctest `packaging`, ci preset only): installs redlock twice, static from
# the already-built tree and shared from a lib-only build of its own, then builds two
# throwaway consumers against each prefix, one with find_package (cmake/) and one with a
# pkg-config command line (Makefile), and runs each against a real redis-server that this
# script starts on a free loopback port and stops by PID. Then configures the find_package
# consumer with libuv, hiredis and OpenSSL hidden: the configure must succeed, with
# redlock_FOUND false and the reason printed for the static package, and find the shared one.
#
# usage: run.sh SOURCE_DIR BUILD_DIR WORK_DIR   (env: CMAKE_GENERATOR, CXX)
set -euo pipefail
src=$(realpath "$1")
build=$(realpath "$2")
work=$3
mkdir -p "$work"
work=$(realpath "$work")
here="$src/tests/packaging"
generator=${CMAKE_GENERATOR:-Ninja}
export CXX=${CXX:-c++}

step() { echo; echo "=== $*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

redis_pid=""
cleanup() {
  if [ -n "$redis_pid" ]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

step "static: install the built tree into $work/static"
rm -rf "$work/static"
cmake --install "$build" --prefix "$work/static" >/dev/null

step "shared: build only the library (BUILD_SHARED_LIBS=ON) and install it into $work/shared"
if [ ! -f "$work/shared-build/CMakeCache.txt" ]; then
  cmake -S "$src" -B "$work/shared-build" -G "$generator" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER="$CXX" -DBUILD_SHARED_LIBS=ON -DREDLOCK_WERROR=ON \
    -DREDLOCK_BUILD_TESTS=OFF -DREDLOCK_BUILD_TOOLS=OFF -DREDLOCK_BUILD_BENCH=OFF -DREDLOCK_BUILD_CHAOS=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_GTest=TRUE \
    -DCMAKE_DISABLE_FIND_PACKAGE_benchmark=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_CLI11=TRUE >/dev/null
fi
nice cmake --build "$work/shared-build" --target redlock --parallel 2
rm -rf "$work/shared"
cmake --install "$work/shared-build" --prefix "$work/shared" >/dev/null

so=$(find "$work/shared" -name 'libredlock.so.*.*.*' | head -1)
[ -n "$so" ] || fail "no versioned libredlock.so in $work/shared"
soname=$(readelf -d "$so" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
exported=$(nm -DC --defined-only "$so" | grep -c ' redlock::' || true)
detail=$(nm -DC --defined-only "$so" | grep -c 'redlock::detail' || true)
other=$(nm -DC --defined-only "$so" | grep -vc 'redlock::' || true)
echo "$(basename "$so"): SONAME $soname, $exported redlock:: symbols exported, $detail of redlock::detail, $other others"
[ "$soname" = "libredlock.so.$(basename "$so" | sed 's/^libredlock\.so\.\([0-9]*\.[0-9]*\).*/\1/')" ] || fail "SONAME $soname"
[ "$detail" -eq 0 ] || { nm -DC --defined-only "$so" | grep 'redlock::detail' | head; fail "redlock::detail symbols exported"; }
[ "$exported" -gt 0 ] || fail "no redlock:: symbol exported"

step "a redis-server on a free loopback port"
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  port=$(( 20000 + (RANDOM * 32768 + RANDOM) % 40000 ))
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no \
    --dir "$work" --logfile "$work/redis.log" &
  redis_pid=$!
  for _ in $(seq 50); do
    if [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = PONG ]; then break 2; fi
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  cleanup
  redis_pid=""
done
[ -n "$redis_pid" ] || fail "could not start redis-server (log: $work/redis.log)"
uri="redis://127.0.0.1:$port"
echo "redis-server pid $redis_pid on $uri"

run_consumer() {  # name binary
  echo "--- run $1"
  "$2" "$uri" || fail "$1 did not lock and release"
}

for kind in static shared; do
  prefix="$work/$kind"
  pcdir=$(dirname "$(find "$prefix" -name redlock.pc | head -1)")

  step "$kind: find_package consumer"
  rm -rf "$work/$kind-cmake"
  cmake -S "$here/cmake" -B "$work/$kind-cmake" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release | grep redlock
  cmake --build "$work/$kind-cmake" >/dev/null || fail "$kind find_package consumer did not build"
  [ -x "$work/$kind-cmake/app" ] || fail "$kind find_package consumer: redlock was not found"
  run_consumer "$kind find_package consumer" "$work/$kind-cmake/app"

  step "$kind: pkg-config consumer"
  flags=""
  [ "$kind" = static ] && flags=--static
  echo "pkg-config $flags --cflags --libs redlock: $(PKG_CONFIG_PATH="$pcdir" pkg-config $flags --cflags --libs redlock)"
  PKG_CONFIG_PATH="$pcdir" make -s -C "$here" OUT="$work/$kind-pc-app" PKGCONFIG_FLAGS="$flags" \
    || fail "$kind pkg-config consumer did not build"
  run_consumer "$kind pkg-config consumer" "$work/$kind-pc-app"
  if [ "$kind" = shared ]; then
    # A shared libredlock links with --static too (its private dependencies come along).
    PKG_CONFIG_PATH="$pcdir" make -s -C "$here" OUT="$work/$kind-pc-static-flags-app" PKGCONFIG_FLAGS=--static \
      || fail "shared pkg-config --static consumer did not build"
    run_consumer "shared pkg-config --static consumer" "$work/$kind-pc-static-flags-app"
  fi
  if [ "$kind" = shared ]; then
    for app in "$work/$kind-cmake/app" "$work/$kind-pc-app"; do
      libs=$(ldd "$app")
      grep -q "libredlock.so.* => $prefix" <<<"$libs" || { echo "$libs"; fail "$app does not load $prefix's libredlock"; }
    done
    echo "both shared consumers load $(ldd "$work/$kind-pc-app" | grep -o 'libredlock[^ ]*' | head -1) from $prefix"
  else
    for app in "$work/$kind-cmake/app" "$work/$kind-pc-app"; do
      libs=$(ldd "$app")
      ! grep -q libredlock <<<"$libs" || fail "$app links a shared libredlock"
    done
  fi

  step "$kind: find_package(redlock QUIET) with libuv, hiredis (pkg-config) and OpenSSL hidden"
  rm -rf "$work/$kind-missing"
  out=$(PKG_CONFIG_LIBDIR=/nonexistent PKG_CONFIG_PATH= cmake -S "$here/cmake" -B "$work/$kind-missing" \
        -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=TRUE 2>&1) \
    || { echo "$out"; fail "$kind: the consumer's configure failed with a dependency missing"; }
  grep 'redlock ' <<<"$out"
  if [ "$kind" = static ]; then
    for missing in libuv hiredis OpenSSL; do
      grep -q "redlock not found: .*$missing" <<<"$out" || fail "static: reason does not name $missing"
    done
  else
    grep -q "redlock found" <<<"$out" || fail "shared: a shared redlock needs none of its dependencies at configure time"
  fi
done

echo
echo "packaging: 5 consumers locked and released (find_package and pkg-config, static and shared); missing dependencies reported"

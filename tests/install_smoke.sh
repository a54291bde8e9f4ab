#!/usr/bin/env bash
# Installs the built library into a temporary prefix and builds a consumer through
# find_package(vkh2o) and through pkg-config. Usage: tests/install_smoke.sh <build-dir>
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mkdir -p "$tmp/app"
cat > "$tmp/app/main.c" <<'C'
#include <vkh2o.h>
#include <stdio.h>
int main(void) { vkh2o_mla_config c; vkh2o_mla_config_kimi_k26(&c);
  printf("%s %u\n", vkh2o_result_string(VKH2O_OK), c.hidden_size); return c.hidden_size == 7168 ? 0 : 1; }
C
cat > "$tmp/app/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.20)
project(app C)
find_package(vkh2o REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE vkh2o::vkh2o)
C
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/app/build" >/dev/null
"$tmp/app/build/app"
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig" \
    cc "$tmp/app/main.c" -o "$tmp/app/pc" $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig" pkg-config --cflags --libs --static vkh2o)
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/x86_64-linux-gnu" "$tmp/app/pc"
echo "install smoke test: ok"

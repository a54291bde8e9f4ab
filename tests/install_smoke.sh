#!/usr/bin/env bash
# Installs the built library into a temporary prefix and builds a consumer through
# find_package(vkh2o) and through pkg-config. Usage: tests/install_smoke.sh <build-dir>
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mkdir -p "$tmp/app"
# the consumer links the Vulkan loader and calls it itself, before and after vkh2o
cat > "$tmp/app/main.c" <<'C'
#include <vulkan/vulkan.h>
#include <vkh2o.h>
#include <stdio.h>
int main(void) {
  uint32_t v = 0;
  if (vkEnumerateInstanceVersion(&v) != VK_SUCCESS) return 2;
  vkh2o_mla_config c; vkh2o_mla_config_kimi_k26(&c);
  uint32_t n = 0;
  vkh2o_result r = vkh2o_enumerate_devices(NULL, 0, &n);
  if (vkEnumerateInstanceVersion(&v) != VK_SUCCESS) return 3;
  printf("%s %u, Vulkan %u.%u, %u devices (%s)\n", vkh2o_result_string(VKH2O_OK), c.hidden_size,
         VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), n, vkh2o_result_string(r));
  return c.hidden_size == 7168 ? 0 : 1; }
C
cat > "$tmp/app/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.20)
project(app C)
find_package(vkh2o REQUIRED)
find_package(Vulkan REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE vkh2o::vkh2o Vulkan::Vulkan)
C
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/app/build" >/dev/null
"$tmp/app/build/app"
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig" \
    cc "$tmp/app/main.c" -o "$tmp/app/pc" $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig" pkg-config --cflags --libs --static vkh2o) -lvulkan
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/x86_64-linux-gnu" "$tmp/app/pc"
echo "install smoke test: ok"

#!/usr/bin/env bash
# Installs the built library into a temporary prefix and builds a consumer through
# find_package(vkh2o) and through pkg-config. Usage: tests/install_smoke.sh <build-dir>
set -euo pipefail
build=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mkdir -p "$tmp/app"
# the consumer links the Vulkan loader and calls it itself, before, between and after vkh2o,
# and runs the decode loop an embedder writes: a prefill into the one KV cache (H2O eviction), then
# tokens decoded one at a time (append, attend, score, evict back to the capacity)
cat > "$tmp/app/main.c" <<'C'
#include <vulkan/vulkan.h>
#include <vkh2o.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
/* a tiny MLA layer with deterministic F32 weights, decoding against an H2O-evicting KV cache */
static float* fill(size_t n, float s) {
  float* p = malloc(n * sizeof *p);
  for (size_t i = 0; p && i < n; i++) p[i] = s * (float)((int)((i * 2654435761u) % 2001) - 1000) / 1000.0f;
  return p; }
static int decode_demo(void) {
  vkh2o_context* ctx = NULL;
  if (vkh2o_context_create(&(vkh2o_context_desc){ 0 }, &ctx) != VKH2O_OK) return 10;
  vkh2o_mla_config c; vkh2o_mla_config_kimi_k26(&c);
  c.hidden_size = 32; c.num_heads = 2; c.q_lora_rank = 16; c.kv_lora_rank = 16;
  c.qk_nope_head_dim = 8; c.qk_rope_head_dim = 8; c.v_head_dim = 8; c.rope_scaling = VKH2O_ROPE_NONE;
  const uint64_t D = 32, H = 2, QL = 16, KL = 16, QK = 16, R = 8, V = 8;
  const uint64_t shapes[7][2] = { { QL, D }, { QL, 0 }, { H * QK, QL }, { 0, 0 }, { KL + R, D }, { KL, 0 }, { H * (8 + V), KL } };
  vkh2o_tensor_view views[VKH2O_W_COUNT] = { { 0 } };
  float* data[VKH2O_W_COUNT] = { 0 };
  for (int w = 0; w < VKH2O_W_COUNT; w++) {
    uint64_t r = w < 7 ? shapes[w][0] : w == VKH2O_W_O_PROJ ? D : 0, k = w < 7 ? shapes[w][1] : w == VKH2O_W_O_PROJ ? H * V : 0;
    if (!r) continue;
    uint64_t n = k ? r * k : r;
    data[w] = fill(n, k ? 1.0f / sqrtf((float)k) : 0.0f);
    if (!k) for (uint64_t i = 0; i < n; i++) data[w][i] = 1.0f;
    views[w] = (vkh2o_tensor_view){ .name = vkh2o_mla_weight_short_name((vkh2o_mla_weight)w), .file = "(app)",
                                    .dtype = VKH2O_DTYPE_F32, .ndim = k ? 2 : 1, .shape = { r, k }, .numel = n,
                                    .data = data[w], .nbytes = n * 4 };
  }
  vkh2o_error err = { 0 };
  vkh2o_mla_host_weights* hw = NULL;
  vkh2o_mla_layer* layer = NULL;
  vkh2o_kvcache* cache = NULL;
  int rc = 11;
  if (vkh2o_mla_host_weights_wrap(&c, views, &hw, &err) != VKH2O_OK) { fprintf(stderr, "%s\n", err.message); goto out; }
  if (vkh2o_mla_layer_create(ctx, &c, hw, &(vkh2o_mla_layer_desc){ .max_seq_len = 16 }, &layer) != VKH2O_OK) goto out;
  vkh2o_kvcache_desc cd = { .max_tokens = 12, .capacity_tokens = 6, .n_sink = 1, .n_recent = 2 };
  vkh2o_kvcache_desc_from_mla(&c, &cd);
  if (vkh2o_kvcache_create(ctx, &cd, &cache) != VKH2O_OK) goto out;
  float* hidden = fill(12 * D, 1.0f);
  float* out = calloc(12 * D, sizeof *out);
  rc = 12;
  if (vkh2o_host_mla_prefill(layer, cache, 0, hidden, 8, out) == VKH2O_OK) {
    rc = 0;
    for (uint32_t t = 8; t < 12 && rc == 0; t++)   /* append, attend, score, evict */
      if (vkh2o_host_mla_decode(layer, cache, 0, hidden + t * D, 1, t, out + t * D) != VKH2O_OK) rc = 13;
    for (uint64_t i = 0; i < 12 * D && rc == 0; i++) if (!isfinite(out[i])) rc = 14;
    vkh2o_kvcache_stats st;
    if (rc == 0 && (vkh2o_kvcache_read_stats(cache, 0, &st) != VKH2O_OK || st.len != 6 || st.position != 12)) rc = 15;
  }
  if (rc) fprintf(stderr, "decode (%d): %s\n", rc, vkh2o_last_error(ctx));
  free(hidden); free(out);
out:
  vkh2o_kvcache_destroy(cache);
  vkh2o_mla_layer_destroy(layer);
  vkh2o_mla_host_weights_destroy(hw);
  for (int w = 0; w < VKH2O_W_COUNT; w++) free(data[w]);
  vkh2o_context_destroy(ctx);
  return rc; }
int main(void) {
  uint32_t v = 0;
  if (vkEnumerateInstanceVersion(&v) != VK_SUCCESS) return 2;
  vkh2o_mla_config c; vkh2o_mla_config_kimi_k26(&c);
  uint32_t n = 0;
  vkh2o_result r = vkh2o_enumerate_devices(NULL, 0, &n);
  if (vkEnumerateInstanceVersion(&v) != VK_SUCCESS) return 3;
  int d = decode_demo();
  if (vkEnumerateInstanceVersion(&v) != VK_SUCCESS) return 4;
  printf("%s %u, Vulkan %u.%u, %u devices (%s), decode %s\n", vkh2o_result_string(VKH2O_OK), c.hidden_size,
         VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), n, vkh2o_result_string(r), d ? "FAILED" : "ok");
  return c.hidden_size == 7168 && d == 0 ? 0 : 1; }
C
cat > "$tmp/app/CMakeLists.txt" <<'C'
cmake_minimum_required(VERSION 3.20)
project(app C)
find_package(vkh2o REQUIRED)
find_package(Vulkan REQUIRED)
add_executable(app main.c)
target_link_libraries(app PRIVATE vkh2o::vkh2o Vulkan::Vulkan m)
C
cmake -S "$tmp/app" -B "$tmp/app/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/app/build" >/dev/null
"$tmp/app/build/app"
PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig" \
    cc "$tmp/app/main.c" -o "$tmp/app/pc" $(PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig:$tmp/prefix/lib/x86_64-linux-gnu/pkgconfig" pkg-config --cflags --libs --static vkh2o) -lvulkan -lm
LD_LIBRARY_PATH="$tmp/prefix/lib:$tmp/prefix/lib/x86_64-linux-gnu" "$tmp/app/pc"
echo "install smoke test: ok"

/* Choice of the CPU tier's kernel table (see tier.h and vnc/device.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../internal.h"
#include "tier.h"

static const char *const tier_names[VNC_TIER_COUNT] = {"baseline", "avx2", "avx512"};

static const vnc_tier_ops *table_of(int tier) {
#if defined(VNC_HAVE_X86_TIERS)
  if (tier == VNC_TIER_AVX512) return &vnc_tier_ops_avx512;
  if (tier == VNC_TIER_AVX2) return &vnc_tier_ops_avx2;
#endif
  (void)tier;
  return &vnc_tier_ops_baseline;
}

static _Atomic(const vnc_tier_ops *) current = &vnc_tier_ops_baseline;
static atomic_int current_tier = VNC_TIER_BASELINE;

const vnc_tier_ops *vnc_tier(void) { return atomic_load_explicit(&current, memory_order_acquire); }

/* The best tier this CPU (and its OS: the AVX state must be enabled) can run. */
static int best_supported(void) {
#if defined(VNC_HAVE_X86_TIERS)
  __builtin_cpu_init();
  /* The -march of each table: x86-64-v4 (AVX-512 F/BW/CD/DQ/VL) and x86-64-v3 (AVX2, FMA,
   * BMI1/2, F16C, LZCNT, MOVBE). */
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2"))
    return VNC_TIER_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
      __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("movbe"))
    return VNC_TIER_AVX2;
#endif
  return VNC_TIER_BASELINE;
}

static int tier_by_name(const char *name) {
  for (int t = 0; t < VNC_TIER_COUNT; t++)
    if (strcmp(name, tier_names[t]) == 0) return t;
  return -1;
}

int vnc_tier_init(char *err, size_t errlen) {
  int tier = best_supported();
  const char *cap = getenv("TORCH_NEURONX_ISA");
  if (cap && *cap) {
    int want = tier_by_name(cap);
    if (want < 0) {
      snprintf(err, errlen, "TORCH_NEURONX_ISA='%s' is not one of avx512, avx2, baseline", cap);
      return -1;
    }
    if (want < tier) tier = want;
  }
  atomic_store(&current_tier, tier);
  atomic_store_explicit(&current, table_of(tier), memory_order_release);
  return 0;
}

const char *vnc_cpu_isa(void) { return tier_names[atomic_load(&current_tier)]; }

int vnc_cpu_isa_supported(const char *name) {
  int t = name ? tier_by_name(name) : -1;
  return t >= 0 && t <= best_supported();
}

vnc_status vnc_set_cpu_isa(const char *name) {
  int t = name ? tier_by_name(name) : -1;
  if (t < 0)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "CPU tier '%s' is not one of avx512, avx2, baseline",
                         name ? name : "(null)");
  if (t > best_supported())
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "CPU tier '%s' is not supported by this CPU (best: %s)", name,
                         tier_names[best_supported()]);
  atomic_store(&current_tier, t);
  atomic_store_explicit(&current, table_of(t), memory_order_release);
  return VNC_OK;
}

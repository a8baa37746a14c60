/*
** cpu.c: which vector path our own loops take, decided once at run time.
*/
#include "relattn.h"

#include <string.h>

static const char *find_path(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  /* Every path but "scalar" implies AVX2 and FMA: callers rely on it. */
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    return "scalar";
  if (__builtin_cpu_supports("avx512f")) return "avx512";
  return "avx2";
#endif
  return "scalar";
}

/* Asked on every product (src/gemm.c): decided once. */
const char *relattn_simd_path(void) {
  static const char *chosen = NULL;
  const char *p = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
  if (!p) {
    p = find_path();
    __atomic_store_n(&chosen, p, __ATOMIC_RELEASE);
  }
  return p;
}

int relattn_simd_fma(void) {
  return strcmp(relattn_simd_path(), "scalar") != 0;
}

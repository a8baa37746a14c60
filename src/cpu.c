/*
** cpu.c: which vector path our own loops take, decided once at run time.
*/
#include "relattn.h"

const char *relattn_simd_path(void) {
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

/*
** unit.h: a minimal harness for the C unit tests of src/.
**
**   CHECK(cond, "fmt", ...)   counts a failure and prints where, goes on
**   UNIT_DONE()               prints "N passed, M failed"; exit status 1 on failure
*/
#ifndef RELATTN_UNIT_H
#define RELATTN_UNIT_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int unit_passed = 0, unit_failed = 0;

#define CHECK(cond, ...)                                        \
  do {                                                          \
    if (cond) {                                                 \
      unit_passed++;                                            \
    } else {                                                    \
      unit_failed++;                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
      fprintf(stderr, __VA_ARGS__);                             \
      fprintf(stderr, "\n");                                    \
    }                                                           \
  } while (0)

#define UNIT_DONE()                                             \
  do {                                                          \
    printf("%d passed, %d failed\n", unit_passed, unit_failed); \
    return unit_failed ? 1 : 0;                                 \
  } while (0)

/* xorshift64*: fresh seed per run unless UNIT_SEED is set; printed. */
static uint64_t unit_rng_state;
static inline void unit_seed(void) {
  const char *s = getenv("UNIT_SEED");
  FILE *f;
  unit_rng_state = 0;
  if (s) unit_rng_state = strtoull(s, NULL, 10);
  if (!unit_rng_state && (f = fopen("/dev/urandom", "rb"))) {
    if (fread(&unit_rng_state, sizeof unit_rng_state, 1, f) != 1)
      unit_rng_state = 0;
    fclose(f);
  }
  if (!unit_rng_state) unit_rng_state = 88172645463325252ull;
  printf("UNIT_SEED=%llu\n", (unsigned long long)unit_rng_state);
}
static inline uint64_t unit_next(void) {
  unit_rng_state ^= unit_rng_state >> 12;
  unit_rng_state ^= unit_rng_state << 25;
  unit_rng_state ^= unit_rng_state >> 27;
  return unit_rng_state * 2685821657736338717ull;
}
/* Uniform in [-1, 1). */
static inline double unit_uniform(void) {
  return (double)(unit_next() >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

#endif /* RELATTN_UNIT_H */

/*
** mem.c: aligned allocation, overflow-checked sizes, error formatting.
*/
#include "relattn.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int relattn_errorf(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

void *relattn_alloc(size_t size) {
  void *p = NULL;
  /* 64 bytes: a cache line, and the widest vector load we issue. */
  size_t rounded = (size + 63) & ~(size_t)63;
  if (rounded < size) return NULL;
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) return NULL;
  return p;
}

void relattn_free(void *p) { free(p); }

int relattn_mul_ok(size_t a, size_t b, size_t *out) {
  if (a != 0 && b > SIZE_MAX / a) return 0;
  *out = a * b;
  return 1;
}

int relattn_add_ok(size_t a, size_t b, size_t *out) {
  if (b > SIZE_MAX - a) return 0;
  *out = a + b;
  return 1;
}

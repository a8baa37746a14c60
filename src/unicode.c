/*
** unicode.c: lookups in the generated tables (src/unicode_data.c) and UTF-8
** decoding, for the tokenizers.
*/
#include "unicode.h"

static int flagsIn(const relattn_uflag_range *r, int n, uint32_t cp) {
  int lo = 0, hi = n - 1;
  if (cp >= 0x110000) return RELATTN_U_CONTROL; /* never decoded; be safe */
  while (lo < hi) { /* the last range starting at or before cp */
    int mid = (lo + hi + 1) / 2;
    if (r[mid].start <= cp) lo = mid;
    else hi = mid - 1;
  }
  return r[lo].flags;
}

int relattn_uflags_of(uint32_t cp) {
  return flagsIn(relattn_uflags, relattn_n_uflags, cp);
}

int relattn_uflags8_of(uint32_t cp) {
  return flagsIn(relattn_uflags8, relattn_n_uflags8, cp);
}

static const uint32_t *lookup(const relattn_umap *map, int n,
                              const uint32_t *pool, uint32_t cp, int *len) {
  int lo = 0, hi = n - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (map[mid].cp == cp) {
      *len = map[mid].len;
      return pool + map[mid].off;
    }
    if (map[mid].cp < cp) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

const uint32_t *relattn_ulower(uint32_t cp, int *n) {
  if (cp < 0x80) { /* the common case, without a search */
    static const uint32_t ascii[26] = {'a','b','c','d','e','f','g','h','i',
      'j','k','l','m','n','o','p','q','r','s','t','u','v','w','x','y','z'};
    if (cp >= 'A' && cp <= 'Z') {
      *n = 1;
      return &ascii[cp - 'A'];
    }
    return NULL;
  }
  return lookup(relattn_lower, relattn_n_lower, relattn_lower_pool, cp, n);
}

const uint32_t *relattn_unfd(uint32_t cp, int *n) {
  if (cp < 0xC0) return NULL;
  return lookup(relattn_nfd, relattn_n_nfd, relattn_nfd_pool, cp, n);
}

int relattn_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
  uint32_t c = s[0];
  int len, i;
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) len = 2, c &= 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, c &= 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, c &= 0x07;
  else return 0;
  if (n < (size_t)len) return 0;
  for (i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (s[i] & 0x3F);
  }
  if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) ||
      (c >= 0xD800 && c < 0xE000))
    return 0;
  *cp = c;
  return len;
}

int relattn_utf8_encode(uint32_t cp, uint8_t *out) {
  if (cp < 0x80) {
    out[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (uint8_t)(0xC0 | (cp >> 6));
    out[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (uint8_t)(0xE0 | (cp >> 12));
    out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (uint8_t)(0xF0 | (cp >> 18));
  out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

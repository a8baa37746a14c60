/*
** unicode.c: lookups in the generated tables (src/unicode_data.c) and UTF-8
** decoding, for the tokenizers.
*/
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

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

/* ---- NFC and NFKC (UAX #15) --------------------------------------------- */

static int known11(uint32_t cp) {
  return cp < 0x300 || flagsIn(relattn_uin11, relattn_n_uin11, cp);
}

static int cccOf(uint32_t cp) {
  return cp < 0x300 || !known11(cp)
             ? 0
             : flagsIn(relattn_uccc_ranges, relattn_n_uccc, cp);
}

/* The primary composite of a and b, or 0; Hangul by its rule (UAX #15,
** 1.3: L V to LV, LV T to LVT). */
static uint32_t composeOf(uint32_t a, uint32_t b) {
  int lo = 0, hi = relattn_n_ucompose - 1;
  if (a >= 0x1100 && a < 0x1113 && b >= 0x1161 && b < 0x1176)
    return 0xAC00 + ((a - 0x1100) * 21 + (b - 0x1161)) * 28;
  if (a >= 0xAC00 && a < 0xAC00 + 11172 && (a - 0xAC00) % 28 == 0 &&
      b > 0x11A7 && b < 0x11C3)
    return a + (b - 0x11A7);
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    const uint32_t *p = relattn_ucompose_pairs[mid];
    if (p[0] == a && p[1] == b)
      return known11(a) && known11(b) && known11(p[2]) ? p[2] : 0;
    if (p[0] < a || (p[0] == a && p[1] < b)) lo = mid + 1;
    else hi = mid - 1;
  }
  return 0;
}

int relattn_unfkc(const uint32_t *in, size_t n, int compat, uint32_t **out,
                  size_t *out_n) {
  size_t cap = n + 16, m = 0, i, o, sp;
  uint32_t *d = malloc(cap * sizeof *d);
  int have_sp = 0, prev_cc = 0;
  if (!d) return 1;
  /* decomposed (Hangul syllables stay: they compose back to themselves) */
  for (i = 0; i < n; i++) {
    int len = 0;
    const uint32_t *r = NULL;
    if (in[i] >= 0xA0 && !(in[i] >= 0xAC00 && in[i] < 0xAC00 + 11172) &&
        known11(in[i]))
      r = compat ? lookup(relattn_nfkd, relattn_n_nfkd, relattn_nfkd_pool,
                          in[i], &len)
                 : lookup(relattn_nfd, relattn_n_nfd, relattn_nfd_pool, in[i],
                          &len);
    if (!r) r = &in[i], len = 1;
    if (m + (size_t)len > cap) {
      uint32_t *q;
      cap = 2 * cap + (size_t)len;
      q = realloc(d, cap * sizeof *d);
      if (!q) {
        free(d);
        return 1;
      }
      d = q;
    }
    memcpy(d + m, r, (size_t)len * sizeof *d);
    m += (size_t)len;
  }
  /* canonical order: each run of non-starters sorted by class, stably */
  for (i = 1; i < m; i++) {
    uint32_t c = d[i];
    int cc = cccOf(c);
    size_t j = i;
    if (cc == 0) continue;
    while (j > 0 && cccOf(d[j - 1]) > cc) {
      d[j] = d[j - 1];
      j--;
    }
    d[j] = c;
  }
  /* composed: each character with the last starter, unless blocked */
  for (i = 0, o = 0, sp = 0; i < m; i++) {
    uint32_t c = d[i], comp;
    int cc = cccOf(c);
    if (have_sp && (o - 1 == sp || prev_cc < cc) && cc >= 0 &&
        (comp = composeOf(d[sp], c)) != 0 && !(o - 1 != sp && cc == 0)) {
      d[sp] = comp;
      continue;
    }
    if (cc == 0) sp = o, have_sp = 1;
    d[o++] = c;
    prev_cc = cc;
  }
  *out = d;
  *out_n = o;
  return 0;
}

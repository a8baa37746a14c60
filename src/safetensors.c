/*
** safetensors.c: the numbers of the safetensors format (Hugging Face):
**
**   [8 bytes: header length N, little-endian u64][N bytes: JSON header][data]
**   header: {"name": {"dtype": "F32", "shape": [2,3], "data_offsets": [b, e]},
**            ..., "__metadata__": {"key": "string value"}}
**
** The JSON itself is decoded by ext/ with SQLite's JSON functions; this file
** checks what came out of it (offsets, overlaps, sizes, overflow) and writes
** the fixed part of a file on export.
*/
#include "relattn.h"

#include <stdlib.h>
#include <string.h>

int relattn_st_header(const uint8_t *file, size_t n, const char *what,
                      size_t *header_len, char *err, size_t errlen) {
  uint64_t len = 0;
  int i;
  if (n < 8)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "%s has %zu bytes, too short for a safetensors file "
                          "(an 8-byte header length comes first)",
                          what, n);
  for (i = 7; i >= 0; i--) len = (len << 8) | file[i];
  if (len > n - 8)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "%s: header length %llu runs past the "
                          "end of the file (%zu bytes)",
                          what, (unsigned long long)len, n);
  *header_len = (size_t)len;
  return RELATTN_OK;
}

/* qsort has no context argument in C11: sort an index array with a merge
** sort of our own instead of a global (two connections may import at once). */
static void sort_idx(int *idx, int *tmp, int n, const relattn_st_tensor *t) {
  int width, i;
  for (width = 1; width < n; width *= 2) {
    for (i = 0; i < n; i += 2 * width) {
      int lo = i, mid = i + width < n ? i + width : n;
      int hi = i + 2 * width < n ? i + 2 * width : n;
      int a = lo, b = mid, k = lo;
      while (a < mid && b < hi) {
        const relattn_st_tensor *x = &t[idx[a]], *y = &t[idx[b]];
        int take_b = y->begin < x->begin ||
                     (y->begin == x->begin && y->end < x->end);
        tmp[k++] = take_b ? idx[b++] : idx[a++];
      }
      while (a < mid) tmp[k++] = idx[a++];
      while (b < hi) tmp[k++] = idx[b++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
  }
}

int relattn_st_check(relattn_st_tensor *t, int n, uint64_t data_size,
                     const char *what, char *err, size_t errlen) {
  int i, d, *idx, *tmp;
  uint64_t covered = 0;
  for (i = 0; i < n; i++) {
    relattn_st_tensor *x = &t[i];
    size_t numel = 1, bytes, esize = relattn_dtype_size(x->dtype);
    if (esize == 0)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: tensor '%s' has an unknown dtype", what,
                            x->name);
    if (x->ndim < 0 || x->ndim > RELATTN_ST_MAX_DIMS)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: tensor '%s' has %d dimensions, more than %d",
                            what, x->name, x->ndim, RELATTN_ST_MAX_DIMS);
    for (d = 0; d < x->ndim; d++)
      if (x->shape[d] < 0)
        return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                              "%s: tensor '%s' has a negative dimension "
                              "(%lld) in its shape",
                              what, x->name, (long long)x->shape[d]);
    for (d = 0; d < x->ndim; d++)
      if ((uint64_t)x->shape[d] > SIZE_MAX ||
          !relattn_mul_ok(numel, (size_t)x->shape[d], &numel))
        return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                              "%s: tensor '%s' has a shape whose size "
                              "overflows",
                              what, x->name);
    if (!relattn_mul_ok(numel, esize, &bytes))
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: tensor '%s' has a shape whose size overflows",
                            what, x->name);
    if (x->begin < 0 || x->end < 0 || (uint64_t)x->begin > data_size ||
        (uint64_t)x->end > data_size)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: tensor '%s' has data_offsets [%lld,%lld] "
                            "outside the data (%llu bytes)",
                            what, x->name, (long long)x->begin,
                            (long long)x->end, (unsigned long long)data_size);
    if (x->end < x->begin)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: tensor '%s' has reversed data_offsets "
                            "[%lld,%lld]",
                            what, x->name, (long long)x->begin,
                            (long long)x->end);
    if ((uint64_t)(x->end - x->begin) != (uint64_t)bytes)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: tensor '%s' has %lld bytes of data, but "
                            "dtype %s and its shape need %zu",
                            what, x->name, (long long)(x->end - x->begin),
                            relattn_dtype_name(x->dtype), bytes);
    x->numel = numel;
  }
  if (n == 0) {
    if (data_size != 0)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: %llu bytes of data are not covered by any "
                            "tensor",
                            what, (unsigned long long)data_size);
    return RELATTN_OK;
  }
  idx = malloc(2 * (size_t)n * sizeof *idx);
  if (!idx)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM, "%s: out of memory",
                          what);
  tmp = idx + n;
  for (i = 0; i < n; i++) idx[i] = i;
  sort_idx(idx, tmp, n, t);
  {
    const relattn_st_tensor *prev = NULL; /* the non-empty one ending last */
    int64_t gap = -1;
    for (i = 0; i < n; i++) {
      const relattn_st_tensor *x = &t[idx[i]];
      if (x->end == x->begin) continue; /* empty: takes no bytes */
      if (prev && x->begin < prev->end) {
        int rc = relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                                "%s: tensors '%s' and '%s' overlap in the data",
                                what, prev->name, x->name);
        free(idx);
        return rc;
      }
      if (gap < 0 && (uint64_t)x->begin > covered) gap = (int64_t)covered;
      covered = (uint64_t)x->end;
      prev = x;
    }
    if (gap >= 0) covered = (uint64_t)gap;
  }
  free(idx);
  if (covered != data_size)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "%s: the safetensors data has bytes not covered by any "
                          "tensor "
                          "(from offset %llu)",
                          what, (unsigned long long)covered);
  return RELATTN_OK;
}

size_t relattn_st_prefix_size(size_t json_len) {
  size_t padded = (json_len + 7) & ~(size_t)7;
  if (padded < json_len || padded > SIZE_MAX - 8) return 0;
  return 8 + padded;
}

size_t relattn_st_write_prefix(uint8_t *out, const char *json,
                               size_t json_len) {
  size_t total = relattn_st_prefix_size(json_len), padded = total - 8;
  uint64_t len = padded;
  int i;
  for (i = 0; i < 8; i++) out[i] = (uint8_t)(len >> (8 * i));
  memcpy(out + 8, json, json_len);
  memset(out + 8 + json_len, ' ', padded - json_len);
  return total;
}

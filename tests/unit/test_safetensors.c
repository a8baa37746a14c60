/* test_safetensors.c: src/safetensors.c, the numbers of the format. */
#include <string.h>

#include "relattn.h"
#include "unit.h"

static char err[256];

static relattn_st_tensor T(const char *name, int dtype, int ndim, int64_t d0,
                           int64_t d1, int64_t b, int64_t e) {
  relattn_st_tensor t;
  memset(&t, 0, sizeof t);
  t.name = name, t.dtype = dtype, t.ndim = ndim;
  t.shape[0] = d0, t.shape[1] = d1;
  t.begin = b, t.end = e;
  return t;
}

static int check(relattn_st_tensor *t, int n, uint64_t size, const char *want) {
  int rc = relattn_st_check(t, n, size, "f", err, sizeof err);
  if (!want) return rc == RELATTN_OK;
  if (rc == RELATTN_OK || strcmp(err, want) != 0) {
    fprintf(stderr, "  got rc %d '%s', want '%s'\n", rc, err, want);
    return 0;
  }
  return 1;
}

int main(void) {
  uint8_t file[64] = {0};
  size_t hlen = 0;
  relattn_st_tensor t[4];
  unit_seed();

  /* the header length */
  CHECK(relattn_st_header(file, 7, "f", &hlen, err, sizeof err) ==
            RELATTN_ERR_FORMAT, "7 bytes");
  file[0] = 56;
  CHECK(relattn_st_header(file, 64, "f", &hlen, err, sizeof err) == RELATTN_OK &&
            hlen == 56, "56 of 64");
  file[0] = 57;
  CHECK(relattn_st_header(file, 64, "f", &hlen, err, sizeof err) ==
            RELATTN_ERR_FORMAT, "57 of 64");
  memset(file, 0xff, 8); /* 2^64 - 1: no wrap-around in the bound */
  CHECK(relattn_st_header(file, 64, "f", &hlen, err, sizeof err) ==
            RELATTN_ERR_FORMAT, "2^64-1");

  /* good layouts, in any order, empty tensors anywhere */
  t[0] = T("a", RELATTN_F32, 2, 2, 3, 0, 24);
  t[1] = T("b", RELATTN_F16, 1, 4, 0, 24, 32);
  t[2] = T("c", RELATTN_BF16, 2, 0, 5, 32, 32);
  CHECK(check(t, 3, 32, NULL), "good: %s", err);
  CHECK(t[0].numel == 6 && t[1].numel == 4 && t[2].numel == 0, "numel");
  t[2] = T("c", RELATTN_BF16, 2, 0, 5, 8, 8); /* empty, inside another */
  CHECK(check(t, 3, 32, NULL), "empty inside: %s", err);
  t[0] = T("a", RELATTN_F32, 2, 2, 3, 8, 32);
  t[1] = T("b", RELATTN_F16, 1, 4, 0, 0, 8);
  CHECK(check(t, 2, 32, NULL), "reordered: %s", err);
  CHECK(check(t, 0, 0, NULL), "no tensors");

  /* each defect */
  CHECK(check(t, 2, 40, "f: the safetensors data has bytes not covered by any "
                        "tensor (from offset 32)"), "tail");
  t[0] = T("a", RELATTN_F32, 2, 2, 3, 16, 40);
  CHECK(check(t, 2, 40, "f: the safetensors data has bytes not covered by any "
                        "tensor (from offset 8)"), "hole");
  t[0] = T("a", RELATTN_F32, 2, 2, 3, 4, 28);
  CHECK(check(t, 2, 32, "f: tensors 'b' and 'a' overlap in the data"), "overlap");
  /* an overlap hidden behind an empty tensor */
  t[0] = T("a", RELATTN_F32, 1, 10, 0, 0, 40);
  t[1] = T("e", RELATTN_F32, 1, 0, 0, 8, 8);
  t[2] = T("c", RELATTN_F32, 1, 2, 0, 16, 24);
  CHECK(check(t, 3, 40, "f: tensors 'a' and 'c' overlap in the data"), "hidden");
  t[0] = T("a", RELATTN_F32, 1, 2, 0, 8, 0);
  CHECK(check(t, 1, 8, "f: tensor 'a' has reversed data_offsets [8,0]"), "rev");
  t[0] = T("a", RELATTN_F32, 1, 2, 0, 0, 16);
  CHECK(check(t, 1, 8, "f: tensor 'a' has data_offsets [0,16] outside the data "
                       "(8 bytes)"), "range");
  t[0] = T("a", RELATTN_F32, 1, 2, 0, -8, 0);
  CHECK(check(t, 1, 8, "f: tensor 'a' has data_offsets [-8,0] outside the data "
                       "(8 bytes)"), "negative offset");
  t[0] = T("a", RELATTN_F32, 1, 3, 0, 0, 8);
  CHECK(check(t, 1, 8, "f: tensor 'a' has 8 bytes of data, but dtype F32 and "
                       "its shape need 12"), "size");
  t[0] = T("a", RELATTN_F32, 2, 3, -1, 0, 8);
  CHECK(check(t, 1, 8, "f: tensor 'a' has a negative dimension (-1) in its "
                       "shape"), "negative dim");
  t[0] = T("a", RELATTN_F16, 2, (int64_t)1 << 40, (int64_t)1 << 40, 0, 8);
  CHECK(check(t, 1, 8, "f: tensor 'a' has a shape whose size overflows"),
        "overflow");
  t[0] = T("a", RELATTN_F32, 2, (int64_t)1 << 31, (int64_t)1 << 31, 0, 8);
  CHECK(check(t, 1, 8, "f: tensor 'a' has a shape whose size overflows"),
        "overflow in bytes");
  t[0] = T("a", 7, 1, 2, 0, 0, 8);
  CHECK(check(t, 1, 8, "f: tensor 'a' has an unknown dtype"), "dtype");

  /* the prefix: length, header, spaces to a multiple of 8 */
  {
    uint8_t out[32];
    size_t n = relattn_st_write_prefix(out, "{\"a\":1}", 7);
    CHECK(n == 16 && relattn_st_prefix_size(7) == 16, "prefix size %zu", n);
    CHECK(out[0] == 8 && out[1] == 0 && out[7] == 0, "length");
    CHECK(memcmp(out + 8, "{\"a\":1} ", 8) == 0, "padding");
    CHECK(relattn_st_prefix_size(16) == 24, "no padding when aligned");
  }
  UNIT_DONE();
}

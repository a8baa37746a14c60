/*
** fuzz_attention.c: relattn_attention's argument decoding, and the kernel on
** odd shapes.
**
** First input byte, low bit 0 (structured): heads, d_head, n (to 12, or to
** 400 with flag bit 7, where clip goes to 70), clip and flags from the input, BLOBs of consistent sizes filled from the input, options
** built to match; sometimes one BLOB is cut short, a NaN planted, or the
** options spelled wrongly. When everything is valid the result must be
** (n, H*d) and agree with a float64 reference computed here (DESIGN section
** 5, written independently of src/attention.c) to 1e-4 relative error.
** Low bit 1 (raw): options text and five arguments (NULL, BLOB, TEXT such as
** JSON matrices, integer, real) straight from the input, and up to two more
** (a position scheme's tables: options.position is in the dictionary).
*/
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_db();
  return 0;
}

/* out (n, H*d) = Shaw et al. 2018 eq. 3-4, float64. */
static void reference(int n, int H, int d, int clip, int causal, int per_head,
                      const float *q, const float *k, const float *v,
                      const float *rk, const float *rv, double *out) {
  int h, i, j, c, rows = 2 * clip + 1;
  double s = 1.0 / sqrt((double)d);
  double *e = malloc(sizeof(double) * (size_t)n);
  if (!e) abort();
  for (h = 0; h < H; h++) {
    const float *tk = rk ? rk + (per_head ? (size_t)h * rows * d : 0) : NULL;
    const float *tv = rv ? rv + (per_head ? (size_t)h * rows * d : 0) : NULL;
    for (i = 0; i < n; i++) {
      double mx = -INFINITY, sum = 0;
      int last = causal ? i : n - 1;
      for (j = 0; j <= last; j++) {
        int r = j - i < -clip ? 0 : j - i > clip ? 2 * clip : j - i + clip;
        double dot = 0;
        for (c = 0; c < d; c++) {
          double kv = k[(size_t)j * H * d + h * d + c];
          if (tk) kv += tk[(size_t)r * d + c];
          dot += q[(size_t)i * H * d + h * d + c] * kv;
        }
        e[j] = s * dot;
        if (e[j] > mx) mx = e[j];
      }
      for (j = 0; j <= last; j++) sum += (e[j] = exp(e[j] - mx));
      for (c = 0; c < d; c++) {
        double z = 0;
        for (j = 0; j <= last; j++) {
          int r = j - i < -clip ? 0 : j - i > clip ? 2 * clip : j - i + clip;
          double vv = v[(size_t)j * H * d + h * d + c];
          if (tv) vv += tv[(size_t)r * d + c];
          z += e[j] / sum * vv;
        }
        out[(size_t)i * H * d + h * d + c] = z;
      }
    }
  }
  free(e);
}

/* count values in [-2, 2) from the input; past its end, from a generator
** seeded by it (so long sequences need no long inputs). */
static uint32_t lcg = 12345;
static float *fill(size_t count, fuzz_in *in) {
  float *a = malloc(sizeof(float) * (count ? count : 1));
  size_t i;
  if (!a) abort();
  for (i = 0; i < count; i++) {
    int b;
    if (in->n) {
      b = (int)fuzz_u8(in);
      lcg = lcg * 1664525u + 1013904223u + (uint32_t)b;
    } else {
      lcg = lcg * 1664525u + 1013904223u;
      b = (int)(lcg >> 24);
    }
    a[i] = (b - 128) / 64.0f;
  }
  return a;
}

static void structured(sqlite3 *db, fuzz_in *in, unsigned head) {
  int H = 1 + (int)fuzz_u8(in) % 4, d = 1 + (int)fuzz_u8(in) % 8;
  int n = (int)fuzz_u8(in), clip = (int)fuzz_u8(in) % 4;
  unsigned flags = fuzz_u8(in), spoil = fuzz_u8(in);
  int causal = flags & 1, per_head = flags >> 1 & 1;
  /* Mostly short; with flag bit 7, up to 400 rows and clip up to 70, so
  ** several query and key blocks, and the far-left/far-right/band split,
  ** are crossed. */
  if (flags & 128) {
    n = 13 + n * 3 / 2;
    clip = (int)(spoil >> 1) % 71;
    spoil &= ~7u; /* all valid */
  } else {
    n %= 13;
  }
  lcg = 12345u + (uint32_t)n;
  int has_rk = flags >> 2 & 1, has_rv = flags >> 3 & 1;
  size_t qn = (size_t)n * H * d;
  size_t tn = (size_t)(per_head ? H : 1) * (2 * clip + 1) * d;
  float *q = fill(qn, in), *k = fill(qn, in), *v = fill(qn, in);
  float *rk = fill(tn, in), *rv = fill(tn, in);
  size_t bytes[5] = {qn * 4, qn * 4, qn * 4, tn * 4, tn * 4};
  float *arg[5] = {q, k, v, rk, rv};
  int valid = n > 0, i;
  char opt[200];
  sqlite3_stmt *st;

  (void)head;
  if (spoil % 8 == 1) { /* one argument the wrong size */
    int a = (spoil >> 3) % 5;
    if (bytes[a]) bytes[a] -= 4 * (1 + (spoil >> 6) % 2 * (size_t)d);
    valid = 0;
  } else if (spoil % 8 == 2 && qn) { /* a NaN or an infinity */
    q[(spoil >> 3) % qn] = spoil & 128 ? NAN : -INFINITY;
    valid = 0;
  }
  if (spoil % 8 == 3) {
    snprintf(opt, sizeof opt, "{\"heads\":%d,\"d_head\":%d,\"causal\":%d%s}",
             H, d, causal, spoil & 8 ? ",\"extra\":1" : "");
    valid = 0; /* causal as 0/1 or an unknown key: either answer is fine */
  } else if (spoil % 8 == 4) {
    snprintf(opt, sizeof opt, "{\"heads\":%d,\"d_head\":%d}",
             (int)(int8_t)fuzz_u8(in), (int)(int8_t)fuzz_u8(in));
    valid = 0;
  } else {
    snprintf(opt, sizeof opt,
             "{\"heads\":%d,\"d_head\":%d,\"causal\":%s,\"per_head\":%s}", H, d,
             causal ? "true" : "false", per_head ? "true" : "false");
  }
  if (sqlite3_prepare_v2(db, "SELECT relattn_attention(?1,?2,?3,?4,?5,?6)", -1,
                         &st, 0) != SQLITE_OK)
    goto done;
  for (i = 0; i < 5; i++) {
    if ((i == 3 && !has_rk) || (i == 4 && !has_rv))
      sqlite3_bind_null(st, i + 1);
    else
      sqlite3_bind_blob64(st, i + 1, arg[i], bytes[i], SQLITE_STATIC);
  }
  sqlite3_bind_text(st, 6, opt, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) {
    if (valid) {
      const float *z = sqlite3_column_blob(st, 0);
      double *ref = malloc(sizeof(double) * (qn ? qn : 1)), num = 0, den = 0;
      size_t j;
      if (!ref) abort();
      FUZZ_CHECK((size_t)sqlite3_column_bytes(st, 0) == qn * 4,
                 "result has %d bytes, not %zu", sqlite3_column_bytes(st, 0),
                 qn * 4);
      reference(n, H, d, clip, causal, per_head, q, k, v, has_rk ? rk : NULL,
                has_rv ? rv : NULL, ref);
      for (j = 0; j < qn; j++) {
        num += (z[j] - ref[j]) * (z[j] - ref[j]);
        den += ref[j] * ref[j];
      }
      FUZZ_CHECK(num <= 1e-8 * (den > 1e-6 ? den : 1e-6),
                 "n=%d H=%d d=%d clip=%d causal=%d per_head=%d rk=%d rv=%d: "
                 "relative error %g",
                 n, H, d, clip, causal, per_head, has_rk, has_rv,
                 sqrt(num / (den > 1e-6 ? den : 1e-6)));
      if (getenv("FUZZ_TRACE"))
        fprintf(stderr, "fuzz_attention: n=%d H=%d d=%d clip=%d causal=%d "
                "per_head=%d rk=%d rv=%d: relative error %.2g\n", n, H, d,
                clip, causal, per_head, has_rk, has_rv,
                sqrt(num / (den > 1e-6 ? den : 1e-6)));
      free(ref);
    }
  } else if (valid) {
    FUZZ_CHECK(0, "valid arguments failed (n=%d H=%d d=%d clip=%d): %s", n, H,
               d, clip, sqlite3_errmsg(db));
  }
  sqlite3_finalize(st);
done:
  free(q);
  free(k);
  free(v);
  free(rk);
  free(rv);
}

/* Raw: six arguments, then (when input remains) a count of 0-2 more, the
** position schemes' tables after options. */
static void raw(sqlite3 *db, fuzz_in *in) {
  static const char *const sql[3] = {
      "SELECT relattn_attention(?1,?2,?3,?4,?5,?6)",
      "SELECT relattn_attention(?1,?2,?3,?4,?5,?6,?7)",
      "SELECT relattn_attention(?1,?2,?3,?4,?5,?6,?7,?8)"};
  sqlite3_stmt *st;
  unsigned kinds[8];
  const uint8_t *ps[8];
  size_t lens[8];
  int i, count = 6;
  for (i = 0; i < 8; i++) {
    if (i == 6) count += (int)(fuzz_u8(in) % 3);
    if (i >= count) break;
    kinds[i] = fuzz_u8(in) % 5;
    ps[i] = fuzz_take(in, fuzz_u16(in) % 2048, &lens[i]);
    if (i == 5 && kinds[i] != 0) kinds[i] = 2; /* options: mostly text */
  }
  if (sqlite3_prepare_v2(db, sql[count - 6], -1, &st, 0) != SQLITE_OK) return;
  for (i = 0; i < count; i++) {
    const uint8_t *p = ps[i];
    const size_t len = lens[i];
    switch (kinds[i]) {
      case 0: sqlite3_bind_null(st, i + 1); break;
      case 1: sqlite3_bind_blob(st, i + 1, p, (int)len, SQLITE_STATIC); break;
      case 2: sqlite3_bind_text(st, i + 1, (const char *)p, (int)len, SQLITE_STATIC); break;
      case 3: sqlite3_bind_int64(st, i + 1, len ? (int8_t)p[0] : 0); break;
      default: sqlite3_bind_double(st, i + 1, len ? p[0] / 7.0 : 0); break;
    }
  }
  fuzz_run(st);
  sqlite3_finalize(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = fuzz_db();
  fuzz_in in = {data, size};
  unsigned head = fuzz_u8(&in);
  if (head & 1)
    raw(db, &in);
  else
    structured(db, &in, head);
  return 0;
}

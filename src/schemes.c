/*
** schemes.c: the relative-position schemes, each turned into the
** kernel's scheme-neutral relative terms (relattn_rel). The only file that
** knows scheme names: bucket maps, slopes, rotations and table layouts.
**
**   scheme          b(delta), delta = j - i        terms, scale
**   shaw            clip(delta, -k, k) + k         rk (+ rv); 1/sqrt(d)
**   rel_key(_query) -delta + M - 1 (table flipped  rk (+ rq = rk); 1/sqrt(d)
**                   so that it is delta + M - 1)
**   t5              T5's bucket of delta           beta only; s = 1
**   deberta         clamp(logbucket(-delta) + S)   rk (c2p), rq (p2c);
**                                                  1/sqrt(d (1 + terms))
**   alibi           -                              slope; 1/sqrt(d)
**   rope            -                              rotation; 1/sqrt(d)
**   xl              clip(delta, -c, c) + c         u, w, rk; 1/sqrt(d)
**   none            -                              -; 1/sqrt(d)
**
** Each map is constant beyond a band D, found here by walking out from 0
** until both sides reach their last row; D is at most n - 1 (no distance is
** farther), so the bucket array stays O(n) whatever the parameters.
*/
#include "relattn.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[RELATTN_POS_COUNT] = {
    "none", "shaw", "rel_key", "rel_key_query", "t5", "deberta", "alibi",
    "rope", "xl"};

int relattn_position_parse(const char *name) {
  int i;
  if (!name) return -1;
  for (i = 0; i < RELATTN_POS_COUNT; i++)
    if (strcmp(name, names[i]) == 0) return i;
  return -1;
}

const char *relattn_position_name(int type) {
  if (type == RELATTN_POS_ABSOLUTE) return "absolute";
  return type >= 0 && type < RELATTN_POS_COUNT ? names[type] : "?";
}

const char *relattn_position_names(void) {
  return "none, shaw, rel_key, rel_key_query, t5, deberta, alibi, rope, xl";
}

void relattn_position_defaults(relattn_position *p, int type) {
  memset(p, 0, sizeof *p);
  p->type = type;
  p->num_buckets = 32;             /* T5Config.relative_attention_num_buckets */
  p->max_distance = 128; /* T5Config.relative_attention_max_distance */
  p->position_buckets = 256;       /* DeBERTa-v3's config */
  p->max_relative_positions = 512;
  p->rotary_half = 1;
  p->rotary_dim = 0;
  p->base = 10000.0;
}

static const char *const keys_none[] = {NULL};
static const char *const keys_t5[] = {"num_buckets", "max_distance", NULL};
static const char *const keys_deberta[] = {"position_buckets",
                                           "max_relative_positions", NULL};
static const char *const keys_rope[] = {"rotary", "rotary_dim", "base", NULL};

const char *const *relattn_position_keys(int type) {
  switch (type) {
    case RELATTN_POS_T5: return keys_t5;
    case RELATTN_POS_DEBERTA: return keys_deberta;
    case RELATTN_POS_ROPE: return keys_rope;
    default: return keys_none;
  }
}

static const char *const extra_t5[] = {"bias", NULL};
static const char *const extra_deberta[] = {"pos_query", NULL};
static const char *const extra_xl[] = {"u", "w", NULL};

const char *const *relattn_position_extra(int type) {
  switch (type) {
    case RELATTN_POS_T5: return extra_t5;
    case RELATTN_POS_DEBERTA: return extra_deberta;
    case RELATTN_POS_XL: return extra_xl;
    default: return keys_none;
  }
}

/* ---- bucket maps ----------------------------------------------------------- */

/* HF modeling_t5.py, T5Attention._relative_position_bucket, in float32 as
** the reference computes it (log of a float tensor, truncation to long). */
int relattn_t5_bucket(int delta, int bidirectional, int num_buckets,
                      int max_distance) {
  int ret = 0, n, max_exact, large;
  float x;
  if (bidirectional) {
    num_buckets /= 2;
    if (delta > 0) ret += num_buckets;
    n = delta < 0 ? -delta : delta;
  } else {
    n = delta < 0 ? -delta : 0;
  }
  max_exact = num_buckets / 2;
  if (n < max_exact) return ret + n;
  x = logf((float)n / (float)max_exact) /
      (float)log((double)max_distance / max_exact) *
      (float)(num_buckets - max_exact);
  large = max_exact + (int)x;
  if (large > num_buckets - 1) large = num_buckets - 1;
  return ret + large;
}

/* HF modeling_deberta_v2.py, make_log_bucket_position, in float32 as there:
** distances up to mid = bucket_size/2 as they are, farther ones on a log
** scale reaching mid + (mid - 1) at max_position - 1. */
int relattn_deberta_log_position(int rel, int bucket_size, int max_position) {
  const int mid = bucket_size / 2;
  const int sign = rel > 0 ? 1 : (rel < 0 ? -1 : 0);
  int abs_pos;
  float lp;
  if (bucket_size <= 0 || max_position <= 0) return rel;
  abs_pos = rel < mid && rel > -mid ? mid - 1 : (rel < 0 ? -rel : rel);
  if (abs_pos <= mid) return rel;
  lp = ceilf(logf((float)abs_pos / (float)mid) /
             logf((float)((double)(max_position - 1) / mid)) *
             (float)(mid - 1)) +
       (float)mid;
  return (int)(lp * (float)sign);
}

/* BLOOM's build_alibi_tensor: for the largest power of two c <= heads,
** slopes base^1 .. base^c with base = 2^(-8/c); the heads past c take the odd
** powers of 2^(-4/c). */
void relattn_alibi_slopes(float *out, int heads) {
  int c = 1, i, k = 0;
  double base;
  while (c * 2 <= heads) c *= 2;
  base = pow(2.0, -pow(2.0, -(log2((double)c) - 3.0)));
  for (i = 1; i <= c; i++) out[k++] = (float)pow((float)base, i);
  if (c != heads) {
    const double extra = pow(2.0, -pow(2.0, -(log2(2.0 * c) - 3.0)));
    const int rest = heads - c < c ? heads - c : c;
    for (i = 0; i < rest; i++) out[k++] = (float)pow((float)extra, 2 * i + 1);
  }
}

/* ---- table builders ---------------------------------------------------------- */

/* Transformer-XL mem_transformer.py, PositionalEmbedding and r_net. */
int relattn_xl_table(float *out, const float *w_r, int d_model, int heads,
                     int d_head, int c, char *err, size_t errlen) {
  const int rows = 2 * c + 1, half = d_model / 2, width = heads * d_head;
  float *pe, *r;
  int t, i, h;
  if (d_model < 2 || d_model % 2 || c < 0 || heads < 1 || d_head < 1)
    return relattn_errorf(
        err, errlen, RELATTN_ERR_ARG,
        "xl table: d_model %d (even), clip %d, heads %d, d_head %d", d_model, c,
        heads, d_head);
  pe = relattn_alloc(sizeof(float) * (size_t)rows * d_model);
  r = relattn_alloc(sizeof(float) * (size_t)rows * width);
  if (!pe || !r) {
    relattn_free(pe);
    relattn_free(r);
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "xl table: out of memory");
  }
  for (t = 0; t < rows; t++) {
    const double pos = (double)(c - t); /* -delta for delta = t - c */
    for (i = 0; i < half; i++) {
      const double a = pos / pow(10000.0, 2.0 * i / d_model);
      pe[(size_t)t * d_model + i] = (float)sin(a);
      pe[(size_t)t * d_model + half + i] = (float)cos(a);
    }
  }
  relattn_sgemm(0, 1, rows, width, d_model, 1.0f, pe, d_model, w_r, d_model,
                0.0f, r, width);
  for (h = 0; h < heads; h++)
    for (t = 0; t < rows; t++)
      memcpy(out + ((size_t)h * rows + t) * d_head,
             r + (size_t)t * width + (size_t)h * d_head,
             sizeof(float) * (size_t)d_head);
  relattn_free(pe);
  relattn_free(r);
  return RELATTN_OK;
}

/* modeling_deberta_v2.py, disentangled_attention_bias: the projection and
** transpose_for_scores of the relative embeddings. */
void relattn_project_table(float *out, const float *rel, const float *w,
                           const float *b, int rows, int d_model, int heads,
                           int d_head) {
  int h, t, i;
  for (h = 0; h < heads; h++) {
    float *o = out + (size_t)h * rows * d_head;
    relattn_sgemm(0, 1, rows, d_head, d_model, 1.0f, rel, d_model,
                  w + (size_t)h * d_head * d_model, d_model, 0.0f, o, d_head);
    if (b)
      for (t = 0; t < rows; t++)
        for (i = 0; i < d_head; i++)
          o[(size_t)t * d_head + i] += b[h * d_head + i];
  }
}

typedef struct map_args {
  int type, causal, rows;
  const relattn_position *p;
} map_args;

/* The table row of distance delta for a bucketed scheme. */
static int map_row(const map_args *m, int delta) {
  if (m->type == RELATTN_POS_T5)
    return relattn_t5_bucket(delta, !m->causal, m->p->num_buckets,
                             m->p->max_distance);
  {
    /* DeBERTa: relative_pos = i - j, c2p index clamp(rel + span, 0, 2 span - 1);
    ** p2c's index, clamp(-rel(j, i) + span), is the same (rel is odd). */
    const int span = m->rows / 2;
    long long r = relattn_deberta_log_position(-delta, m->p->position_buckets,
                                               m->p->max_relative_positions);
    r += span;
    return (int)(r < 0 ? 0 : (r > m->rows - 1 ? m->rows - 1 : r));
  }
}

/* The band past which the map is constant on both sides, at most limit: the
** maps are monotone in |delta| on each side, so it is where both sides first
** reach their last row. Fills bucket (2D+1) when given. */
static int map_band(const map_args *m, int limit) {
  const int far_l = map_row(m, -INT_MAX / 2), far_r = map_row(m, INT_MAX / 2);
  int D;
  for (D = 0; D < limit; D++)
    if (map_row(m, -D) == far_l && map_row(m, D) == far_r) break;
  return D;
}

/* ---- checks ---------------------------------------------------------------- */

static const char *const table_names[RELATTN_POS_TABLES] = {"rel_k", "rel_v",
                                                            NULL, NULL};

static const char *tname(int type, int slot) {
  const char *const *extra = relattn_position_extra(type);
  if (slot < 2) return table_names[slot];
  if (!extra[0] || (slot == 3 && !extra[1])) return "an argument after options";
  return extra[slot - 2];
}

/* Rows of table slot: its floats must be rows x d_head (x heads when per_head). */
static int rows_of(const relattn_pos_tables *t, int type, int slot, int heads,
                   int d_head, int per_head, long long *rows, char *err,
                   size_t errlen) {
  const long long unit = per_head ? (long long)heads * d_head : d_head;
  if (t->count[slot] % unit != 0) {
    if (per_head)
      return relattn_errorf(
          err, errlen, RELATTN_ERR_ARG,
          "%s has %lld floats, not a multiple of heads*d_head = "
          "%lld (per_head)",
          tname(type, slot), (long long)t->count[slot], unit);
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s has %lld floats, not a multiple of d_head = %lld",
                          tname(type, slot), (long long)t->count[slot], unit);
  }
  *rows = t->count[slot] / unit;
  return RELATTN_OK;
}

/* Tables a scheme takes: bit per slot; required ones. */
static unsigned allowed_tables(int type) {
  switch (type) {
    case RELATTN_POS_SHAW: return 1u | 2u;
    case RELATTN_POS_REL_KEY:
    case RELATTN_POS_REL_KEY_QUERY: return 1u;
    case RELATTN_POS_T5: return 4u;
    case RELATTN_POS_DEBERTA: return 1u | 4u;
    case RELATTN_POS_XL: return 1u | 4u | 8u;
    default: return 0u;
  }
}

static unsigned required_tables(int type) {
  switch (type) {
    case RELATTN_POS_REL_KEY:
    case RELATTN_POS_REL_KEY_QUERY: return 1u;
    case RELATTN_POS_T5: return 4u;
    case RELATTN_POS_XL: return 1u | 4u | 8u;
    default: return 0u;
  }
}

/* "rel_k", "rel_k, rel_v", ... for messages. */
static void list_tables(int type, unsigned bits, char *out, size_t n) {
  int slot;
  out[0] = '\0';
  for (slot = 0; slot < RELATTN_POS_TABLES; slot++)
    if (bits & (1u << slot)) {
      size_t len = strlen(out);
      snprintf(out + len, n - len, "%s%s", len ? ", " : "", tname(type, slot));
    }
  if (!out[0]) snprintf(out, n, "none");
}

/* The bucket parameters take what Hugging Face's formulas take, except
** where they divide by zero or take log(0) (a result of NaN or Inf cast to
** an index) or, for T5, give a negative bucket (max_distance under
** max_exact: far distances fall before row 0). T5's _relative_position_bucket
** divides by max_exact = num_buckets/2 (num_buckets/4 bidirectional, its
** buckets halved per side) and by log(max_distance/max_exact); DeBERTa's
** make_log_bucket_position by mid = position_buckets/2 and by
** log((max_relative_positions - 1)/mid). */
int relattn_position_check_buckets(const relattn_position *p, int causal,
                                   const char *pre, const char *post,
                                   char *err, size_t errlen) {
  if (p->type == RELATTN_POS_T5) {
    const int lo = causal ? 2 : 4, me = p->num_buckets / (causal ? 2 : 4);
    if (p->num_buckets < lo || p->num_buckets > 1 << 20)
      return relattn_errorf(
          err, errlen, RELATTN_ERR_ARG,
          "%snum_buckets%s must be between %d and %d %s, not %d (T5's log "
          "buckets divide by max_exact = num_buckets/%d)",
          pre, post, lo, 1 << 20, causal ? "when causal" : "when bidirectional",
          p->num_buckets, causal ? 2 : 4);
    if (p->max_distance <= me || p->max_distance > 1 << 24)
      return relattn_errorf(
          err, errlen, RELATTN_ERR_ARG,
          "%smax_distance%s must be over max_exact = num_buckets/%d = %d and "
          "at most %d, not %d (T5's log buckets divide by "
          "log(max_distance/max_exact), which must be over 0)",
          pre, post, causal ? 2 : 4, me, 1 << 24, p->max_distance);
  }
  if (p->type == RELATTN_POS_DEBERTA) {
    const int mr = p->max_relative_positions, pb = p->position_buckets;
    if (mr < 1 || mr > 1 << 24)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%smax_relative_positions%s must be between 1 and "
                            "%d, not %d",
                            pre, post, 1 << 24, mr);
    if (pb > 0 && (pb < 2 || pb > 1 << 24))
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%sposition_buckets%s must be at most 0 (none), "
                            "or between 2 and %d, not %d (DeBERTa's log "
                            "buckets divide by mid = position_buckets/2)",
                            pre, post, 1 << 24, pb);
    if (pb > 0 && (mr == 1 || mr - 1 == pb / 2))
      return relattn_errorf(
          err, errlen, RELATTN_ERR_ARG,
          "%smax_relative_positions%s must not be %d with position_buckets "
          "%d (DeBERTa's log buckets divide by log((max_relative_positions "
          "- 1)/mid), mid = position_buckets/2 = %d: here log(%s))",
          pre, post, mr, pb, pb / 2, mr == 1 ? "0" : "1");
  }
  return RELATTN_OK;
}

static int check_params(const relattn_position *p, int d_head, int causal,
                        char *err, size_t errlen) {
  int rc = relattn_position_check_buckets(p, causal, "options.position.", "",
                                          err, errlen);
  if (rc != RELATTN_OK) return rc;
  if (p->type == RELATTN_POS_ROPE) {
    const int r = p->rotary_dim ? p->rotary_dim : d_head;
    if (r < 2 || r % 2 || r > d_head)
      return relattn_errorf(
          err, errlen, RELATTN_ERR_ARG,
          "options.position.rotary_dim must be even, at least 2 "
          "and at most d_head = %d, not %d",
          d_head, r);
    if (!(p->base > 1.0) || !isfinite(p->base))
      return relattn_errorf(
          err, errlen, RELATTN_ERR_ARG,
          "options.position.base must be a number over 1, not %g", p->base);
  }
  return RELATTN_OK;
}

/* ---- building ------------------------------------------------------------- */

/* Rows of the table a bucketed scheme indexes. */
static int bucket_rows(const relattn_position *p) {
  if (p->type == RELATTN_POS_T5) return p->num_buckets;
  return 2 * (p->position_buckets > 0 ? p->position_buckets
                                      : p->max_relative_positions);
}

size_t relattn_scheme_bytes(const relattn_position *p,
                            const relattn_pos_tables *tables, int n, int heads,
                            int d_head) {
  size_t b = 0;
  const size_t band = (size_t)(n > 0 ? n : 1) * 2 + 1;
  if (p->type == RELATTN_POS_T5 || p->type == RELATTN_POS_DEBERTA)
    b += sizeof(int) * band;
  if (p->type == RELATTN_POS_ALIBI) b += sizeof(float) * (size_t)heads;
  if (p->type == RELATTN_POS_ROPE) /* cos and sin, r/2 each */
    b += sizeof(float) * (size_t)n * (size_t)d_head + 16;
  if (p->type == RELATTN_POS_REL_KEY || p->type == RELATTN_POS_REL_KEY_QUERY)
    b += sizeof(float) * (size_t)tables->count[0] + 16; /* the flipped table */
  return b;
}

void relattn_scheme_free(relattn_scheme *s) {
  if (!s) return;
  relattn_free(s->mem);
  s->mem = NULL;
}

int relattn_scheme_build(relattn_scheme *out, const relattn_position *p,
                         const relattn_pos_tables *tb, int n, int heads,
                         int d_head, int causal, int per_head, char *err,
                         size_t errlen) {
  relattn_rel *r = &out->rel;
  const int type = p->type;
  const unsigned allow = allowed_tables(type), need = required_tables(type);
  char list[64];
  long long rows[RELATTN_POS_TABLES] = {0, 0, 0, 0};
  int slot, rc;

  memset(out, 0, sizeof *out);
  if (type < 0 || type >= RELATTN_POS_COUNT)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "unknown position type");
  rc = check_params(p, d_head, causal, err, errlen);
  if (rc != RELATTN_OK) return rc;
  list_tables(type, allow, list, sizeof list);
  for (slot = 0; slot < RELATTN_POS_TABLES; slot++) {
    const int given = tb->t[slot] != NULL;
    const char *name = tname(type, slot);
    if (given && !(allow & (1u << slot)))
      return relattn_errorf(
          err, errlen, RELATTN_ERR_ARG,
          "%s must be NULL with position type '%s' (its tables: %s)",
          slot < 2 ? name : "an argument after options", names[type], list);
    if (!given && (need & (1u << slot)))
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "position type '%s' needs %s (argument %d)",
                            names[type], name, slot < 2 ? slot + 4 : slot + 5);
  }
  r->scale = 0.0; /* 1/sqrt(d) unless the scheme says */
  r->rows = 1;
  r->per_head = per_head;

  switch (type) {
    case RELATTN_POS_NONE:
      break;

    case RELATTN_POS_SHAW:
      /* tensor2tensor dot_product_attention_relative: rows 2k+1, k from them */
      for (slot = 0; slot < 2; slot++) {
        if (!tb->t[slot]) continue;
        rc = rows_of(tb, type, slot, heads, d_head, per_head, &rows[slot], err,
                     errlen);
        if (rc != RELATTN_OK) return rc;
        if (rows[slot] % 2 == 0)
          return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                                "%s has %lld rows%s, not an odd number (2k+1)",
                                tname(type, slot), rows[slot],
                                per_head ? " per head" : "");
      }
      if (tb->t[0] && tb->t[1] && rows[0] != rows[1])
        return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                              "rel_v has %lld rows, rel_k has %lld (both must "
                              "have 2k+1 rows)", rows[1], rows[0]);
      if (rows[0] > INT_MAX / 2 || rows[1] > INT_MAX / 2)
        return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                              "rel_k or rel_v is too large");
      r->rows = (int)(tb->t[0] ? rows[0] : (tb->t[1] ? rows[1] : 1));
      r->band = r->rows / 2;
      r->rk = tb->t[0];
      r->rv = tb->t[1];
      break;

    case RELATTN_POS_REL_KEY:
    case RELATTN_POS_REL_KEY_QUERY: {
      /* HF BertSelfAttention: distance_embedding[(i - j) + M - 1], rows 2M-1,
      ** the same table on the key side for relative_key_query. Flipped here
      ** (row t -> 2M-2-t) it is indexed by j - i + M - 1: Shaw's identity
      ** map, whose band is contiguous in the kernel. */
      const size_t per = (size_t)d_head;
      long long M, t, h, H;
      float *flip;
      rc = rows_of(tb, type, 0, heads, d_head, per_head, &rows[0], err, errlen);
      if (rc != RELATTN_OK) return rc;
      if (rows[0] % 2 == 0)
        return relattn_errorf(
            err, errlen, RELATTN_ERR_ARG,
            "rel_k has %lld rows%s, not an odd number (2M-1, M = "
            "max_position_embeddings)",
            rows[0], per_head ? " per head" : "");
      M = (rows[0] + 1) / 2;
      if (M < n)
        return relattn_errorf(
            err, errlen, RELATTN_ERR_ARG,
            "rel_k has %lld rows (max_position_embeddings %lld), "
            "fewer than the 2n-1 = %lld that q's %d rows reach "
            "(position type '%s')",
            rows[0], M, 2LL * n - 1, n, names[type]);
      if (rows[0] > INT_MAX / 2)
        return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                              "rel_k is too large");
      H = per_head ? heads : 1;
      flip = relattn_alloc(sizeof(float) * (size_t)tb->count[0] + 1);
      if (!flip)
        return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM, "out of memory");
      out->mem = flip;
      for (h = 0; h < H; h++)
        for (t = 0; t < rows[0]; t++)
          memcpy(flip + ((size_t)h * rows[0] + t) * per,
                 tb->t[0] + ((size_t)h * rows[0] + (rows[0] - 1 - t)) * per,
                 sizeof(float) * per);
      r->rows = (int)rows[0];
      r->band = (int)(M - 1);
      r->rk = flip;
      if (type == RELATTN_POS_REL_KEY_QUERY) r->rq = flip;
      break;
    }

    case RELATTN_POS_T5:
    case RELATTN_POS_DEBERTA: {
      map_args m;
      int D, x, *bucket, terms = 0;
      m.type = type;
      m.causal = causal;
      m.p = p;
      m.rows = bucket_rows(p);
      if (type == RELATTN_POS_T5) {
        /* HF T5Attention: position_bias [H, B] added to unscaled scores */
        const long long want = (long long)heads * m.rows;
        if (tb->count[2] != want)
          return relattn_errorf(
              err, errlen, RELATTN_ERR_ARG,
              "bias has %lld floats, position type 't5' needs "
              "heads*num_buckets = %lld ([heads, num_buckets])",
              (long long)tb->count[2], want);
        r->beta = tb->t[2];
        r->scale = 1.0;
      } else {
        /* HF DisentangledSelfAttention: c2p q_i . pos_key[b], p2c
        ** k_j . pos_query[b], every term over sqrt(d (1 + terms)) */
        for (slot = 0; slot < 3; slot += 2) {
          if (!tb->t[slot]) continue;
          rc = rows_of(tb, type, slot, heads, d_head, per_head, &rows[slot],
                       err, errlen);
          if (rc != RELATTN_OK) return rc;
          if (rows[slot] != m.rows)
            return relattn_errorf(
                err, errlen, RELATTN_ERR_ARG,
                "%s has %lld rows%s, position type 'deberta' needs "
                "2*%s = %d",
                tname(type, slot), rows[slot], per_head ? " per head" : "",
                p->position_buckets > 0 ? "position_buckets"
                                        : "max_relative_positions",
                m.rows);
          terms++;
        }
        r->rk = tb->t[0];
        r->rq = tb->t[2];
        r->scale = 1.0 / sqrt((double)d_head * (1 + terms));
      }
      D = map_band(&m, n > 1 ? n - 1 : 0);
      bucket = relattn_alloc(sizeof(int) * (2 * (size_t)D + 1));
      if (!bucket)
        return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM, "out of memory");
      out->mem = bucket;
      for (x = -D; x <= D; x++) bucket[x + D] = map_row(&m, x);
      r->rows = m.rows;
      r->band = D;
      r->bucket = bucket;
      break;
    }

    case RELATTN_POS_ALIBI: {
      float *slope = relattn_alloc(sizeof(float) * (size_t)heads);
      if (!slope)
        return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM, "out of memory");
      out->mem = slope;
      relattn_alibi_slopes(slope, heads);
      r->slope = slope;
      break;
    }

    case RELATTN_POS_ROPE: {
      /* RoFormer / GPT-J (interleaved pairs) and GPT-NeoX (halves): pair t
      ** of position p turns by p * base^(-2t/r); angles in double. */
      const int rd = p->rotary_dim ? p->rotary_dim : d_head, h2 = rd / 2;
      float *cs = relattn_alloc(sizeof(float) * (size_t)n * rd + 1);
      int pos, t;
      if (!cs)
        return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM, "out of memory");
      out->mem = cs;
      for (pos = 0; pos < n; pos++)
        for (t = 0; t < h2; t++) {
          const double a = pos * pow(p->base, -2.0 * t / rd);
          cs[(size_t)pos * h2 + t] = (float)cos(a);
          cs[(size_t)n * h2 + (size_t)pos * h2 + t] = (float)sin(a);
        }
      r->rot_dim = rd;
      r->rot_half = p->rotary_half;
      r->rot_cos = cs;
      r->rot_sin = cs + (size_t)n * h2;
      break;
    }

    case RELATTN_POS_XL: {
      /* Transformer-XL RelPartialLearnableMultiHeadAttn: (q + u) . k
      ** + (q + w) . R[i - j], R = W_r sinusoid; rows 2c+1 indexed by j - i + c */
      rc = rows_of(tb, type, 0, heads, d_head, per_head, &rows[0], err, errlen);
      if (rc != RELATTN_OK) return rc;
      if (rows[0] % 2 == 0)
        return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                              "rel_k has %lld rows%s, not an odd number (2c+1)",
                              rows[0], per_head ? " per head" : "");
      if (rows[0] > INT_MAX / 2)
        return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                              "rel_k is too large");
      for (slot = 2; slot < 4; slot++)
        if (tb->count[slot] != (long long)heads * d_head)
          return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                                "%s has %lld floats, position type 'xl' needs "
                                "heads*d_head = %lld ([heads, d_head])",
                                tname(type, slot), (long long)tb->count[slot],
                                (long long)heads * d_head);
      r->rows = (int)rows[0];
      r->band = r->rows / 2;
      r->rk = tb->t[0];
      r->u = tb->t[2];
      r->w = tb->t[3];
      break;
    }
  }
  return RELATTN_OK;
}

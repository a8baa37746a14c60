/*
** svg_fn.c: pictures as SVG text, from SQL.
**
**   relattn_svg_attention(model, tokens, layer, head)  -> TEXT
**       one head's attention map, the tokens on both axes, the clip band
**       dashed; sequences past 128 positions are pooled into bins
**   relattn_svg_surprise(model, tokens)                -> TEXT
**       the text, each token shaded by its surprise in bits, with a legend
**       (decoder models; at most 4096 tokens)
**   relattn_svg_profile(distance, weight [, series [, clip]])  -> TEXT
**       aggregate: the mean weight at each relative distance, one panel per
**       distinct series value, over any rows (a corpus)
**
** Example, in the sqlite3 shell (writefile is the shell's):
**   SELECT writefile('map.svg',
**                    relattn_svg_attention('tiny', 'In the beginning', 0, 1));
**   SELECT writefile('heads.svg',
**            relattn_svg_profile(w.distance, w.weight, 'head ' || w.head, 16))
**     FROM docs, relattn_attention_weights('tiny', docs.body) AS w
**    WHERE w.layer = 0;
**
** The maps and log-probabilities come from the same forward pass as
** relattn_attention_weights and relattn_logprobs (ext/model_fn.c); the
** drawing is src/svg.c. Token text is shown escaped: invalid UTF-8 and
** control bytes as \xNN.
*/
#include "ext.h"
SQLITE_EXTENSION_INIT3

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "functions.h"
#include "svg.h"

/* Room for the picture besides the inputs: the largest a picture can be
** (128 x 128 cells with their titles, 4096 tokens) is under this. */
#define PICTURE_BYTES ((sqlite3_uint64)4 << 20)
#define LABEL_BYTES 16

/* Labels of token ids: their bytes from the model's tokenizer, or a name
** for bos, eos, pad and ids that are not text. */
typedef struct labels {
  relattn_svg_token *tok; /* (n) */
  char (*text)[LABEL_BYTES]; /* (n) storage */
} labels;

static void labelsFree(labels *l) {
  sqlite3_free(l->tok);
  sqlite3_free(l->text);
}

/* The text of one id from the tokenizer, when it has some and it fits. */
static int labelText(const relattn_tokenizer *tok, int32_t id,
                     char out[LABEL_BYTES], size_t *len) {
  uint8_t *text;
  int ok;
  if (relattn_tokenizer_decode(tok, &id, 1, &text, len, "", NULL, 0))
    return 0;
  ok = *len > 0 && *len <= LABEL_BYTES;
  if (ok) memcpy(out, text, *len);
  free(text);
  return ok;
}

static int labelsMake(labels *l, const relattn_model *m, const int32_t *ids,
                      int n) {
  const relattn_config *c = &m->cfg;
  const relattn_tokenizer *tok = m->tok;
  int i;
  l->tok = sqlite3_malloc64(sizeof *l->tok * (sqlite3_uint64)(n ? n : 1));
  l->text = sqlite3_malloc64(LABEL_BYTES * (sqlite3_uint64)(n ? n : 1));
  if (!l->tok || !l->text) {
    labelsFree(l);
    return 0;
  }
  for (i = 0; i < n; i++) {
    relattn_svg_token *t = &l->tok[i];
    size_t len = 0;
    int id = ids[i];
    t->text = (const uint8_t *)l->text[i];
    t->special = 1;
    if (id == c->bos || id == c->eos || id == c->pad) {
      const char *name = id == c->bos ? "bos" : id == c->eos ? "eos" : "pad";
      t->len = strlen(name);
      memcpy(l->text[i], name, t->len);
    } else if (labelText(tok, id, l->text[i], &len)) {
      t->len = len;
      t->special = 0;
    } else {
      t->len = (size_t)sqlite3_snprintf(LABEL_BYTES, l->text[i], "id %d", id);
      t->len = strlen(l->text[i]);
    }
  }
  return 1;
}

/* Hands the picture to SQLite, or the error from src/svg.c. */
static void resultPicture(sqlite3_context *ctx, const char *fn, int rc,
                          char *out, size_t len, const char *err) {
  if (rc != RELATTN_OK) {
    char *msg = sqlite3_mprintf("%s: %s", fn, err);
    relattn_result_status(ctx, rc, msg);
    sqlite3_free(msg);
    return;
  }
  sqlite3_result_text64(ctx, out, len, free, SQLITE_UTF8);
}

static void callError(sqlite3_context *ctx, int rc, char *zErr) {
  if (zErr) {
    sqlite3_result_error(ctx, zErr, -1);
    sqlite3_free(zErr);
    if (rc != SQLITE_ERROR) sqlite3_result_error_code(ctx, rc);
  } else if (rc == SQLITE_NOMEM) {
    sqlite3_result_error_nomem(ctx);
  } else {
    sqlite3_result_error_code(ctx, rc);
  }
}

/* An INTEGER argument (not text, not a real), or an error naming it. */
static int intArg(sqlite3_context *ctx, const char *fn, const char *name,
                  sqlite3_value *v, sqlite3_int64 *out) {
  if (sqlite3_value_type(v) != SQLITE_INTEGER) {
    relattn_result_errorf(ctx, "%s: %s must be an integer", fn, name);
    return 0;
  }
  *out = sqlite3_value_int64(v);
  return 1;
}

/* ---- relattn_svg_attention(model, tokens, layer, head) ------------------- */

void relattn_svg_attention_func(sqlite3_context *ctx, int argc,
                                sqlite3_value **argv) {
  static const char fn[] = "relattn_svg_attention";
  relattn_conn *conn = sqlite3_user_data(ctx);
  relattn_call *mc = NULL;
  const relattn_config *cfg;
  const int32_t *input;
  sqlite3_int64 layer, head;
  relattn_svg_map sm;
  relattn_fwd f;
  labels lab = {0};
  float *map;
  char *zErr = NULL, *title, *out = NULL, err[256] = "";
  size_t len = 0;
  int rc, n, bos;
  (void)argc;
  if (!intArg(ctx, fn, "layer", argv[2], &layer) ||
      !intArg(ctx, fn, "head", argv[3], &head))
    return;
  rc = relattn_call_begin(conn, fn, argv[0], argv[1], 0, &mc, &zErr);
  if (rc != SQLITE_OK) {
    callError(ctx, rc, zErr);
    return;
  }
  if (!mc) {
    sqlite3_result_null(ctx);
    return;
  }
  cfg = &relattn_call_model(mc)->cfg;
  if (layer < 0 || layer >= cfg->n_layers || head < 0 ||
      head >= cfg->n_heads) {
    int bad_layer = layer < 0 || layer >= cfg->n_layers;
    relattn_result_errorf(ctx, "%s: %s must be in [0, %d), not %lld", fn,
                          bad_layer ? "layer" : "head",
                          bad_layer ? cfg->n_layers : cfg->n_heads,
                          bad_layer ? layer : head);
    relattn_call_end(mc);
    return;
  }
  input = relattn_call_input(mc, &n, &bos);
  /* the map, the labels and the picture, on top of the forward pass */
  rc = relattn_call_memory(
      mc, fn,
      sizeof(float) * (sqlite3_uint64)n * (sqlite3_uint64)n +
          (sizeof(relattn_svg_token) + LABEL_BYTES) * (sqlite3_uint64)n +
          PICTURE_BYTES,
      &zErr);
  if (rc != SQLITE_OK) {
    relattn_call_end(mc);
    callError(ctx, rc, zErr);
    return;
  }
  map = sqlite3_malloc64(sizeof(float) * (sqlite3_uint64)n * n);
  if (!map || !labelsMake(&lab, relattn_call_model(mc), input, n)) {
    sqlite3_free(map);
    relattn_call_end(mc);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  memset(&f, 0, sizeof f);
  f.map = map;
  f.map_layer = (int)layer;
  f.map_head = (int)head;
  rc = relattn_call_run(mc, fn, &f, &zErr);
  title = sqlite3_mprintf("%s: attention of layer %lld, head %lld (%d "
                          "positions%s)",
                          sqlite3_value_text(argv[0]), layer, head, n,
                          bos ? ", bos first" : "");
  if (rc == SQLITE_OK && title) {
    memset(&sm, 0, sizeof sm);
    sm.w = map;
    sm.n = n;
    sm.tok = lab.tok;
    sm.clip = cfg->clip;
    sm.causal = cfg->arch == RELATTN_DECODER;
    sm.title = title;
    rc = relattn_svg_attention(&sm, &out, &len, err, sizeof err);
    resultPicture(ctx, fn, rc, out, len, err);
  } else if (rc == SQLITE_OK) {
    sqlite3_result_error_nomem(ctx);
  } else {
    callError(ctx, rc, zErr);
  }
  sqlite3_free(title);
  sqlite3_free(map);
  labelsFree(&lab);
  relattn_call_end(mc);
}

/* ---- relattn_svg_surprise(model, tokens) ---------------------------------- */

void relattn_svg_surprise_func(sqlite3_context *ctx, int argc,
                               sqlite3_value **argv) {
  static const char fn[] = "relattn_svg_surprise";
  relattn_conn *conn = sqlite3_user_data(ctx);
  relattn_call *mc = NULL;
  const int32_t *input;
  relattn_svg_text st;
  relattn_fwd f;
  labels lab = {0}, top = {0};
  float *lp, *top_lp, *bits, *top_bits;
  int32_t *top_tok;
  char *zErr = NULL, *title, *out = NULL, err[256] = "";
  size_t len = 0;
  int rc, n, bos, n_seq, i;
  (void)argc;
  rc = relattn_call_begin(conn, fn, argv[0], argv[1], 1, &mc, &zErr);
  if (rc != SQLITE_OK) {
    callError(ctx, rc, zErr);
    return;
  }
  if (!mc) {
    sqlite3_result_null(ctx);
    return;
  }
  input = relattn_call_input(mc, &n, &bos);
  n_seq = n - bos;
  if (n_seq > RELATTN_SVG_MAX_TOKENS) {
    relattn_result_errorf(ctx,
                          "%s: tokens has %d tokens, over the %d one picture "
                          "shows (draw a part of it)",
                          fn, n_seq, RELATTN_SVG_MAX_TOKENS);
    sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
    relattn_call_end(mc);
    return;
  }
  /* per input position: logprob, top_logprob, top_token, and per sequence
  ** token: bits, top_bits */
  rc = relattn_call_memory(
      mc, fn,
      5 * sizeof(float) * (sqlite3_uint64)n +
          2 * (sizeof(relattn_svg_token) + LABEL_BYTES) * (sqlite3_uint64)n +
          PICTURE_BYTES,
      &zErr);
  if (rc != SQLITE_OK) {
    relattn_call_end(mc);
    callError(ctx, rc, zErr);
    return;
  }
  lp = sqlite3_malloc64(5 * sizeof(float) * (sqlite3_uint64)n);
  if (!lp) {
    relattn_call_end(mc);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  top_lp = lp + n;
  top_tok = (int32_t *)(top_lp + n);
  bits = (float *)(top_tok + n);
  top_bits = bits + n;
  memset(&f, 0, sizeof f);
  f.logprob = lp;
  f.top_logprob = top_lp;
  f.top_token = top_tok;
  rc = relattn_call_run(mc, fn, &f, &zErr);
  if (rc != SQLITE_OK) {
    sqlite3_free(lp);
    relattn_call_end(mc);
    callError(ctx, rc, zErr);
    return;
  }
  /* sequence token t is input[t + bos], predicted by row t + bos - 1 */
  for (i = n_seq - 1; i >= 0; i--) { /* downwards: top_tok shifts up */
    int r = i + bos - 1;
    bits[i] = r < 0 ? NAN : (float)(-lp[r] / M_LN2);
    top_bits[i] = r < 0 ? NAN : (float)(-top_lp[r] / M_LN2);
    top_tok[i] = r < 0 ? input[0] : top_tok[r];
  }
  title = sqlite3_mprintf("%s: surprise of each token (%d tokens)",
                          sqlite3_value_text(argv[0]), n_seq);
  if (!title || !labelsMake(&lab, relattn_call_model(mc), input + bos, n_seq) ||
      !labelsMake(&top, relattn_call_model(mc), top_tok, n_seq)) {
    sqlite3_result_error_nomem(ctx);
  } else {
    memset(&st, 0, sizeof st);
    st.n = n_seq;
    st.tok = lab.tok;
    st.bits = bits;
    st.top = top.tok;
    st.top_bits = top_bits;
    st.title = title;
    rc = relattn_svg_surprise(&st, &out, &len, err, sizeof err);
    resultPicture(ctx, fn, rc, out, len, err);
  }
  sqlite3_free(title);
  labelsFree(&lab);
  labelsFree(&top);
  sqlite3_free(lp);
  relattn_call_end(mc);
}

/* ---- relattn_svg_profile(distance, weight [, series [, clip]]) ------------ */

typedef struct profSeries {
  char *key;       /* the series value as text; NULL for a NULL series */
  double *sum;     /* (2 * range + 3), then count after it */
} profSeries;

typedef struct profAgg {
  int started, clip, range, n_series, failed;
  profSeries series[RELATTN_SVG_MAX_SERIES];
} profAgg;

static void profFree(profAgg *a) {
  int i;
  for (i = 0; i < a->n_series; i++) {
    sqlite3_free(a->series[i].key);
    sqlite3_free(a->series[i].sum);
  }
  a->n_series = 0;
}

static void profError(sqlite3_context *ctx, profAgg *a, const char *fmt,
                      const char *arg) {
  relattn_result_errorf(ctx, fmt, "relattn_svg_profile", arg);
  profFree(a);
  a->failed = 1;
}

void relattn_svg_profile_step(sqlite3_context *ctx, int argc,
                              sqlite3_value **argv) {
  profAgg *a = sqlite3_aggregate_context(ctx, sizeof *a);
  profSeries *s = NULL;
  const char *key = NULL;
  sqlite3_int64 d;
  double w;
  int clip = 0, i, nb;
  if (!a) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (a->failed) return;
  if (argc == 4) {
    sqlite3_int64 c;
    if (sqlite3_value_type(argv[3]) != SQLITE_INTEGER ||
        (c = sqlite3_value_int64(argv[3])) < 0 || c > 1000000) {
      profError(ctx, a, "%s: clip must be an integer from 0 to 1000000", 0);
      return;
    }
    clip = (int)c;
  }
  if (!a->started) {
    a->started = 1;
    a->clip = clip;
    a->range = relattn_svg_profile_range(clip);
  } else if (clip != a->clip) {
    profError(ctx, a, "%s: clip must be the same in every row", 0);
    return;
  }
  /* rows without a distance or a weight count for nothing, as in sum() */
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL ||
      sqlite3_value_type(argv[1]) == SQLITE_NULL)
    return;
  if (sqlite3_value_type(argv[0]) != SQLITE_INTEGER) {
    profError(ctx, a, "%s: distance must be an integer", 0);
    return;
  }
  d = sqlite3_value_int64(argv[0]);
  if (sqlite3_value_type(argv[1]) != SQLITE_INTEGER &&
      sqlite3_value_type(argv[1]) != SQLITE_FLOAT) {
    profError(ctx, a, "%s: weight must be a number", 0);
    return;
  }
  w = sqlite3_value_double(argv[1]);
  if (!isfinite(w)) {
    profError(ctx, a, "%s: weight must be finite", 0);
    return;
  }
  if (argc >= 3 && sqlite3_value_type(argv[2]) != SQLITE_NULL) {
    key = (const char *)sqlite3_value_text(argv[2]);
    if (!key) {
      sqlite3_result_error_nomem(ctx);
      return;
    }
  }
  for (i = 0; i < a->n_series; i++) {
    const char *k = a->series[i].key;
    if ((!k && !key) || (k && key && strcmp(k, key) == 0)) {
      s = &a->series[i];
      break;
    }
  }
  nb = 2 * a->range + 3;
  if (!s) {
    if (a->n_series == RELATTN_SVG_MAX_SERIES) {
      char max[16];
      sqlite3_snprintf(sizeof max, max, "%d", RELATTN_SVG_MAX_SERIES);
      profError(ctx, a, "%s: series has more than %s distinct values", max);
      return;
    }
    s = &a->series[a->n_series];
    s->key = key ? sqlite3_mprintf("%s", key) : NULL;
    s->sum = sqlite3_malloc64(2 * sizeof(double) * (sqlite3_uint64)nb);
    if ((key && !s->key) || !s->sum) {
      sqlite3_free(s->key);
      sqlite3_free(s->sum);
      sqlite3_result_error_nomem(ctx);
      return;
    }
    memset(s->sum, 0, 2 * sizeof(double) * (size_t)nb);
    a->n_series++;
  }
  i = d < -a->range  ? 0
      : d > a->range ? nb - 1
                     : (int)(d + a->range + 1);
  s->sum[i] += w;
  s->sum[nb + i] += 1;
}

void relattn_svg_profile_final(sqlite3_context *ctx) {
  static const char fn[] = "relattn_svg_profile";
  profAgg *a = sqlite3_aggregate_context(ctx, 0);
  relattn_svg_series ser[RELATTN_SVG_MAX_SERIES];
  char *title, *out = NULL, err[256] = "";
  size_t len = 0;
  int i, rc, nb;
  if (!a || a->failed || a->n_series == 0) {
    if (a) profFree(a);
    sqlite3_result_null(ctx);
    return;
  }
  nb = 2 * a->range + 3;
  for (i = 0; i < a->n_series; i++) {
    ser[i].label = a->series[i].key;
    ser[i].sum = a->series[i].sum;
    ser[i].count = a->series[i].sum + nb;
  }
  title = a->clip > 0 ? sqlite3_mprintf("Mean attention weight by distance "
                                        "(clip %d)", a->clip)
                      : sqlite3_mprintf("Mean attention weight by distance");
  if (!title) {
    profFree(a);
    sqlite3_result_error_nomem(ctx);
    return;
  }
  rc = relattn_svg_profile(ser, a->n_series, a->range, a->clip, title, &out,
                           &len, err, sizeof err);
  resultPicture(ctx, fn, rc, out, len, err);
  sqlite3_free(title);
  profFree(a);
}

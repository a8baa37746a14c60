/*
** fuzz.h: what the libFuzzer targets share.
**
** Each target links the extension's objects (built as for the loadable
** library) with the system SQLite, and registers them with
** sqlite3_auto_extension: SQLite then calls sqlite3_relattn_init with its real
** routines table, exactly as .load does. One in-memory connection per process
** holds two small models ('tiny', a pre-norm decoder, and 'enc', a post-norm
** encoder with per-head tables); every input runs inside a savepoint that is
** rolled back, and the settings are put back, so inputs do not leak state
** into each other (the model cache does persist, as it would in a real host).
**
** The connection runs with relattn_max_tokens(2048) (attention is quadratic:
** longer sequences only make inputs slow), relattn_max_memory(64 MB) and a 64 MB
** SQLITE_LIMIT_LENGTH, and make fuzz passes -malloc_limit_mb=256: an
** allocation larger than that is reported as a finding, so a size computed
** from input that escapes the per-call bound is caught.
**
** Build and run: make fuzz (FUZZ_SECONDS per target, default 60).
*/
#ifndef RELATTN_FUZZ_H
#define RELATTN_FUZZ_H

#include <math.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sqlite3_relattn_init(sqlite3 *db, char **pzErrMsg,
                         const sqlite3_api_routines *pApi);

#define FUZZ_MAX_MEMORY (64 << 20)

/* Stops the run with a finding (a broken property, not a crash). */
#define FUZZ_CHECK(cond, ...)                                    \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "FUZZ_CHECK failed %s:%d: ", __FILE__,     \
              __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                              \
      fprintf(stderr, "\n");                                     \
      abort();                                                   \
    }                                                            \
  } while (0)

/* ---- reading the input ---------------------------------------------------- */

typedef struct fuzz_in {
  const uint8_t *p;
  size_t n;
} fuzz_in;

static inline unsigned fuzz_u8(fuzz_in *in) {
  unsigned v;
  if (!in->n) return 0;
  v = in->p[0];
  in->p++;
  in->n--;
  return v;
}

static inline unsigned fuzz_u16(fuzz_in *in) {
  unsigned lo = fuzz_u8(in);
  return lo | fuzz_u8(in) << 8;
}

/* Up to len bytes (fewer at the end of the input). */
static inline const uint8_t *fuzz_take(fuzz_in *in, size_t len, size_t *got) {
  const uint8_t *p = in->p;
  if (len > in->n) len = in->n;
  in->p += len;
  in->n -= len;
  *got = len;
  return p;
}

/* ---- a small model, as a safetensors BLOB ---------------------------------- */

typedef struct fuzz_model {
  const char *arch, *norm, *activation;
  int vocab, d_model, n_layers, n_heads, d_ff, clip, values, per_head, tie;
  int bos, eos, pad; /* -1: none */
  int d_head;        /* 0: absent (d_model / n_heads) */
} fuzz_model;

static const fuzz_model FUZZ_TINY = {"decoder", "pre", "gelu", 259, 8, 1, 2,
                                     16, 2, 1, 0, 1, 256, 257, 258, 0};
static const fuzz_model FUZZ_ENC = {"encoder", "post", "relu", 260, 8, 2, 2,
                                    12, 1, 0, 1, 0, -1, -1, -1, 0};

static inline void fuzz_id_json(char *out, size_t n, int id) {
  if (id < 0)
    snprintf(out, n, "null");
  else
    snprintf(out, n, "%d", id);
}

/* The config JSON of m into out (DESIGN section 4). */
static inline void fuzz_config_json(const fuzz_model *m, char *out, size_t n) {
  char b[16], e[16], p[16], dh[32] = "";
  if (m->d_head) snprintf(dh, sizeof dh, "\"d_head\":%d,", m->d_head);
  fuzz_id_json(b, sizeof b, m->bos);
  fuzz_id_json(e, sizeof e, m->eos);
  fuzz_id_json(p, sizeof p, m->pad);
  snprintf(out, n,
           "{\"arch\":\"%s\",\"vocab_size\":%d,\"d_model\":%d,\"n_layers\":%d,"
           "\"n_heads\":%d,%s\"d_ff\":%d,\"norm\":\"%s\",\"norm_eps\":1e-5,"
           "\"activation\":\"%s\",\"tie_embeddings\":%s,"
           "\"position\":{\"type\":\"shaw\",\"clip\":%d,\"values\":%s,"
           "\"per_head\":%s},"
           "\"tokenizer\":{\"type\":\"bytes\",\"bos\":%s,\"eos\":%s,\"pad\":%s}}",
           m->arch, m->vocab, m->d_model, m->n_layers, m->n_heads, dh, m->d_ff,
           m->norm, m->activation, m->tie ? "true" : "false", m->clip,
           m->values ? "true" : "false", m->per_head ? "true" : "false", b, e,
           p);
}

typedef struct fuzz_buf {
  char *p;
  size_t n, cap;
} fuzz_buf;

static inline void fuzz_buf_put(fuzz_buf *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 256;
    b->p = realloc(b->p, b->cap);
    if (!b->p) abort(); /* the harness's own memory, not the extension's */
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
}

static inline void fuzz_buf_str(fuzz_buf *b, const char *s) {
  fuzz_buf_put(b, s, strlen(s));
}

/* Appends one tensor's header entry and its data (deterministic values). */
static inline void fuzz_tensor(fuzz_buf *hdr, fuzz_buf *data, const char *name,
                        int d0, int d1, int d2, int ln_weight) {
  char s[256];
  size_t numel = (size_t)d0 * (d1 ? d1 : 1) * (d2 ? d2 : 1), i;
  size_t off = data->n;
  if (d2)
    snprintf(s, sizeof s, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d,%d],", name,
             d0, d1, d2);
  else if (d1)
    snprintf(s, sizeof s, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],", name,
             d0, d1);
  else
    snprintf(s, sizeof s, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],", name, d0);
  fuzz_buf_str(hdr, s);
  snprintf(s, sizeof s, "\"data_offsets\":[%zu,%zu]}", off, off + numel * 4);
  fuzz_buf_str(hdr, s);
  for (i = 0; i < numel; i++) {
    /* Small values in [-0.5, 0.5], different per tensor and element. */
    uint32_t h = (uint32_t)(off / 4 + i) * 2654435761u;
    float v = ln_weight ? 1.0f : ((float)(h >> 8) / 16777216.0f - 0.5f);
    fuzz_buf_put(data, &v, 4);
  }
}

/* A complete safetensors file for m, config in __metadata__. The caller frees
** the result. */
static inline uint8_t *fuzz_model_safetensors(const fuzz_model *m, size_t *size) {
  fuzz_buf hdr = {0}, data = {0};
  char cfg[1024], esc[2048], name[64];
  int l, i, j, rows = 2 * m->clip + 1;
  int dh = m->d_head ? m->d_head : m->d_model / m->n_heads;
  int in = dh * m->n_heads; /* the attention's inner width */
  static const char *proj[] = {"wq", "wk", "wv", "wo"};
  static const char *bias[] = {"bq", "bk", "bv", "bo"};
  uint8_t *out;
  uint64_t hlen;

  fuzz_config_json(m, cfg, sizeof cfg);
  for (i = 0, j = 0; cfg[i] && j < (int)sizeof esc - 2; i++) {
    if (cfg[i] == '"') esc[j++] = '\\';
    esc[j++] = cfg[i];
  }
  esc[j] = 0;
  fuzz_buf_str(&hdr, "{\"__metadata__\":{\"relattn.config\":\"");
  fuzz_buf_str(&hdr, esc);
  fuzz_buf_str(&hdr, "\"}");
  fuzz_tensor(&hdr, &data, "tok_emb", m->vocab, m->d_model, 0, 0);
  for (l = 0; l < m->n_layers; l++) {
#define T(suffix, a, b, c, w)                                  \
  snprintf(name, sizeof name, "layers.%d.%s", l, suffix);      \
  fuzz_tensor(&hdr, &data, name, a, b, c, w)
    T("ln1.weight", m->d_model, 0, 0, 1);
    T("ln1.bias", m->d_model, 0, 0, 0);
    for (i = 0; i < 4; i++) {
      /* q, k, v: [in, d_model]; o: [d_model, in]; bo: [d_model] */
      char s[32];
      snprintf(s, sizeof s, "attn.%s", proj[i]);
      T(s, i < 3 ? in : m->d_model, i < 3 ? m->d_model : in, 0, 0);
      snprintf(s, sizeof s, "attn.%s", bias[i]);
      T(s, i < 3 ? in : m->d_model, 0, 0, 0);
    }
    if (m->per_head) {
      T("attn.rel_k", m->n_heads, rows, dh, 0);
      if (m->values) { T("attn.rel_v", m->n_heads, rows, dh, 0); }
    } else {
      T("attn.rel_k", rows, dh, 0, 0);
      if (m->values) { T("attn.rel_v", rows, dh, 0, 0); }
    }
    T("ln2.weight", m->d_model, 0, 0, 1);
    T("ln2.bias", m->d_model, 0, 0, 0);
    T("ffn.w1", m->d_ff, m->d_model, 0, 0);
    T("ffn.b1", m->d_ff, 0, 0, 0);
    T("ffn.w2", m->d_model, m->d_ff, 0, 0);
    T("ffn.b2", m->d_model, 0, 0, 0);
#undef T
  }
  if (!strcmp(m->norm, "pre")) {
    fuzz_tensor(&hdr, &data, "ln_f.weight", m->d_model, 0, 0, 1);
    fuzz_tensor(&hdr, &data, "ln_f.bias", m->d_model, 0, 0, 0);
  }
  if (!m->tie) fuzz_tensor(&hdr, &data, "lm_head", m->vocab, m->d_model, 0, 0);
  fuzz_buf_str(&hdr, "}");
  while (hdr.n % 8) fuzz_buf_str(&hdr, " ");

  *size = 8 + hdr.n + data.n;
  out = malloc(*size);
  if (!out) abort();
  hlen = hdr.n;
  for (i = 0; i < 8; i++) out[i] = (uint8_t)(hlen >> (8 * i));
  memcpy(out + 8, hdr.p, hdr.n);
  if (data.n) memcpy(out + 8 + hdr.n, data.p, data.n);
  free(hdr.p);
  free(data.p);
  return out;
}

/* ---- the connection ----------------------------------------------------- */

/* Runs SQL whose failure is expected and uninteresting (no result kept). */
static inline void fuzz_exec(sqlite3 *db, const char *sql) {
  sqlite3_exec(db, sql, 0, 0, 0);
}

static inline int fuzz_import(sqlite3 *db, const char *name, const fuzz_model *m) {
  sqlite3_stmt *st;
  size_t n;
  uint8_t *blob = fuzz_model_safetensors(m, &n);
  int rc = sqlite3_prepare_v2(db, "SELECT relattn_import(?1, ?2)", -1, &st, 0);
  if (rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_blob64(st, 2, blob, n, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW)
      fprintf(stderr, "fuzz: importing %s: %s\n", name, sqlite3_errmsg(db));
    sqlite3_finalize(st);
  }
  free(blob);
  return rc == SQLITE_ROW;
}

/* Settings every input starts from. */
static inline void fuzz_settings(sqlite3 *db) {
  char sql[192];
  snprintf(sql, sizeof sql,
           "SELECT relattn_threads(1), relattn_max_tokens(2048), "
           "relattn_max_memory(%d), relattn_progress(0), "
           "relattn_progress_job(NULL)",
           FUZZ_MAX_MEMORY);
  fuzz_exec(db, sql);
}

/* The process's connection, opened once, with the models imported when the
** extension has relattn_import. */
static inline sqlite3 *fuzz_db(void) {
  static sqlite3 *db;
  if (db) return db;
  if (sqlite3_auto_extension((void (*)(void))sqlite3_relattn_init) !=
          SQLITE_OK ||
      sqlite3_open(":memory:", &db) != SQLITE_OK) {
    fprintf(stderr, "fuzz: cannot open the database\n");
    abort();
  }
  sqlite3_limit(db, SQLITE_LIMIT_LENGTH, 64 << 20);
  fuzz_settings(db);
  fuzz_import(db, "tiny", &FUZZ_TINY);
  fuzz_import(db, "enc", &FUZZ_ENC);
  return db;
}

/* Brackets one input: everything it changes is rolled back. */
static inline void fuzz_begin(sqlite3 *db) { fuzz_exec(db, "SAVEPOINT fuzz"); }
static inline void fuzz_end(sqlite3 *db) {
  /* A statement left running would keep the rollback from happening. */
  sqlite3_stmt *st = NULL;
  while ((st = sqlite3_next_stmt(db, st)) != NULL) sqlite3_reset(st);
  fuzz_exec(db, "ROLLBACK TO fuzz");
  fuzz_exec(db, "RELEASE fuzz");
  fuzz_settings(db);
}

/* Prepares, binds nothing, steps to the end; returns the last step's code. */
static inline int fuzz_run(sqlite3_stmt *st) {
  int rc, rows = 0;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int i, n = sqlite3_column_count(st);
    /* Read every column, as a client would: it converts results. */
    for (i = 0; i < n; i++) {
      (void)sqlite3_column_bytes(st, i);
      (void)sqlite3_column_blob(st, i);
    }
    if (++rows >= 100000) break;
  }
  return rc;
}

#endif /* RELATTN_FUZZ_H */

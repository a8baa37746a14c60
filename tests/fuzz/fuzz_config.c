/*
** fuzz_config.c: the model config JSON.
**
** The input is a config. The first byte picks the path (mod 4): 2, a model of
** odd shape made here (see shaped()); else relattn_import of the
** small model's tensors with this config as the argument (import checks it),
** or the stored config of 'tiny' replaced by an UPDATE (the loader checks it
** when the model is next used). Either way the model is then used: scored,
** embedded, and one attention map read.
*/
#include "fuzz.h"

static uint8_t *tiny_file;
static size_t tiny_size;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_db();
  tiny_file = fuzz_model_safetensors(&FUZZ_TINY, &tiny_size);
  return 0;
}

static void run(sqlite3 *db, const char *sql, const char *text, size_t n) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) return;
  if (sqlite3_bind_parameter_count(st) >= 1)
    sqlite3_bind_text(st, 1, text, (int)n, SQLITE_STATIC);
  if (sqlite3_bind_parameter_count(st) >= 2)
    sqlite3_bind_blob64(st, 2, tiny_file, tiny_size, SQLITE_STATIC);
  fuzz_run(st);
  sqlite3_finalize(st);
}

/* A model of odd shape, config and tensors both made here from the input,
** run through every model function on a sequence from the input. Checks what
** holds for any model: scores are log-probabilities (finite, <= 0), one
** log-prob row per scored token, a finite embedding of d_model floats. */
static void shaped(sqlite3 *db, fuzz_in *in) {
  fuzz_model m;
  unsigned flags = fuzz_u8(in), ids = fuzz_u8(in);
  uint8_t *file;
  size_t size, k, n;
  int32_t tokens[48];
  sqlite3_stmt *st;
  int ok, bos;

  m.n_heads = 1 + (int)fuzz_u8(in) % 4;
  m.d_model = m.n_heads * (1 + (int)fuzz_u8(in) % 6);
  m.vocab = 256 + (int)fuzz_u8(in) % 8;
  m.n_layers = 1 + (int)fuzz_u8(in) % 3;
  m.d_ff = 1 + (int)fuzz_u8(in) % 12;
  m.clip = (int)fuzz_u8(in) % 7;
  m.d_head = (int)fuzz_u8(in) % 9; /* 0: absent; else the heads' width */
  m.arch = flags & 1 ? "encoder" : "decoder";
  m.norm = flags & 2 ? "post" : "pre";
  m.activation = flags & 4 ? "relu" : "gelu";
  m.tie = flags >> 3 & 1;
  m.values = flags >> 4 & 1;
  m.per_head = flags >> 5 & 1;
  m.bos = ids & 1 && m.vocab > 256 ? 256 : -1;
  m.eos = ids & 2 && m.vocab > 257 ? 257 : -1;
  m.pad = ids & 4 && m.vocab > 259 ? m.vocab - 1 : -1;
  bos = m.bos >= 0;
  file = fuzz_model_safetensors(&m, &size);
  ok = sqlite3_prepare_v2(db, "SELECT relattn_import('s', ?1)", -1, &st, 0) ==
       SQLITE_OK;
  if (ok) {
    sqlite3_bind_blob64(st, 1, file, size, SQLITE_STATIC);
    ok = sqlite3_step(st) == SQLITE_ROW;
    if (!ok) fprintf(stderr, "fuzz_config: %s\n", sqlite3_errmsg(db));
    FUZZ_CHECK(ok, "a well-formed model did not import");
  }
  sqlite3_finalize(st);
  free(file);
  n = 1 + fuzz_u8(in) % 48;
  for (k = 0; k < n; k++) tokens[k] = (int32_t)(fuzz_u8(in) % (unsigned)m.vocab);
  /* A sequence of one token without bos has nothing to score. */
  if (sqlite3_prepare_v2(db, "SELECT relattn_score('s', ?1)", -1, &st, 0) ==
      SQLITE_OK) {
    sqlite3_bind_blob(st, 1, tokens, (int)(n * 4), SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
      double score = sqlite3_column_double(st, 0);
      FUZZ_CHECK(m.arch[0] == 'd', "an encoder scored");
      FUZZ_CHECK(sqlite3_column_type(st, 0) == SQLITE_NULL ||
                     (isfinite(score) && score <= 1e-3),
                 "score %g is not a log-probability", score);
    } else {
      FUZZ_CHECK(m.arch[0] == 'e' || (!bos && n == 1),
                 "a decoder did not score %zu tokens: %s", n,
                 sqlite3_errmsg(db));
    }
    sqlite3_finalize(st);
  }
  if (sqlite3_prepare_v2(db, "SELECT relattn_embed('s', ?1)", -1, &st, 0) ==
      SQLITE_OK) {
    sqlite3_bind_blob(st, 1, tokens, (int)(n * 4), SQLITE_STATIC);
    FUZZ_CHECK(sqlite3_step(st) == SQLITE_ROW, "embed failed: %s",
               sqlite3_errmsg(db));
    FUZZ_CHECK(sqlite3_column_bytes(st, 0) == 4 * m.d_model,
               "embedding has %d bytes, d_model is %d",
               sqlite3_column_bytes(st, 0), m.d_model);
    {
      const float *e = sqlite3_column_blob(st, 0);
      for (k = 0; k < (size_t)m.d_model; k++)
        FUZZ_CHECK(isfinite(e[k]), "embedding[%zu] is %g", k, e[k]);
    }
    sqlite3_finalize(st);
  }
  if (m.arch[0] == 'd' &&
      sqlite3_prepare_v2(db,
                         "SELECT count(*), max(logprob), min(pos) FROM "
                         "relattn_logprobs('s', ?1)",
                         -1, &st, 0) == SQLITE_OK) {
    sqlite3_bind_blob(st, 1, tokens, (int)(n * 4), SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
      int rows = sqlite3_column_int(st, 0);
      FUZZ_CHECK((size_t)rows == (bos ? n : n - 1),
                 "%d log-prob rows for %zu tokens (bos %d)", rows, n, bos);
      FUZZ_CHECK(rows == 0 || sqlite3_column_double(st, 1) <= 1e-3,
                 "a log-prob above 0: %g", sqlite3_column_double(st, 1));
    }
    sqlite3_finalize(st);
  }
  if (sqlite3_prepare_v2(db,
                         "SELECT count(*), sum(weight) FROM "
                         "relattn_attention_weights('s', ?1) WHERE layer = ?2",
                         -1, &st, 0) == SQLITE_OK) {
    int layer = (int)(flags >> 6) % m.n_layers;
    sqlite3_bind_blob(st, 1, tokens, (int)(n * 4), SQLITE_STATIC);
    sqlite3_bind_int(st, 2, layer);
    if (sqlite3_step(st) == SQLITE_ROW) {
      /* Each query's weights sum to 1, for every head. */
      double rows = (double)(n + bos) * m.n_heads;
      FUZZ_CHECK(fabs(sqlite3_column_double(st, 1) - rows) <= 1e-3 * rows,
                 "attention weights sum to %g over %g query rows",
                 sqlite3_column_double(st, 1), rows);
    }
    sqlite3_finalize(st);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = fuzz_db();
  fuzz_in in = {data, size};
  unsigned mode = fuzz_u8(&in);
  if (mode % 4 == 2) {
    fuzz_begin(db);
    shaped(db, &in);
    fuzz_end(db);
    return 0;
  }
  const char *model = mode & 1 ? "tiny" : "c";
  char sql[160];

  fuzz_begin(db);
  if (mode & 1)
    run(db, "UPDATE relattn_model SET config = ?1 WHERE name = 'tiny'",
        (const char *)in.p, in.n);
  else
    run(db, "SELECT relattn_import('c', ?2, ?1)", (const char *)in.p, in.n);
  snprintf(sql, sizeof sql,
           "SELECT relattn_score('%s', x'01000000020000000300000004000000')",
           model);
  run(db, sql, 0, 0);
  snprintf(sql, sizeof sql, "SELECT relattn_embed('%s', 'abc')", model);
  run(db, sql, 0, 0);
  snprintf(sql, sizeof sql,
           "SELECT * FROM relattn_attention_weights('%s', 'xyz') "
           "WHERE layer = 0 AND head = %d",
           model, (int)(mode >> 1) % 4);
  run(db, sql, 0, 0);
  fuzz_end(db);
  return 0;
}

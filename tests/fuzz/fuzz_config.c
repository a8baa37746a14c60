/*
** fuzz_config.c: the model config JSON.
**
** The input is a config. The first byte picks the path: relattn_import of the
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = fuzz_db();
  fuzz_in in = {data, size};
  unsigned mode = fuzz_u8(&in);
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

/*
** fuzz_safetensors.c: relattn_import on arbitrary safetensors BLOBs, header
** and data.
**
** The first input byte picks the form: the rest as a whole file (the 8-byte
** length as given), or a header and data with a matching length prefix
** written here (so mutations explore the JSON header rather than the length
** word); with or without a config argument (else __metadata__ holds it).
** After a successful import: the model must export, the export must import
** again with the same tensor count, and the model must run (score, embed) or
** fail with an error.
*/
#include "fuzz.h"

static char tiny_config[1024];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_db();
  fuzz_config_json(&FUZZ_TINY, tiny_config, sizeof tiny_config);
  return 0;
}

/* SELECT relattn_import(name, blob [, config]); returns the count or -1. */
static sqlite3_int64 import(sqlite3 *db, const char *name, const void *blob,
                            size_t n, const char *config) {
  sqlite3_stmt *st;
  sqlite3_int64 count = -1;
  if (sqlite3_prepare_v2(db,
                         config ? "SELECT relattn_import(?1, ?2, ?3)"
                                : "SELECT relattn_import(?1, ?2)",
                         -1, &st, 0) != SQLITE_OK)
    return -1;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  sqlite3_bind_blob64(st, 2, blob, n, SQLITE_STATIC);
  if (config) sqlite3_bind_text(st, 3, config, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) count = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return count;
}

static void run(sqlite3 *db, const char *sql) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) return;
  fuzz_run(st);
  sqlite3_finalize(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = fuzz_db();
  fuzz_in in = {data, size};
  unsigned mode = fuzz_u8(&in);
  uint8_t *file = NULL;
  size_t n;
  sqlite3_int64 count;

  if (mode & 1) {
    file = malloc(in.n ? in.n : 1);
    if (!file) return 0;
    memcpy(file, in.p, in.n);
    n = in.n;
  } else {
    size_t hlen, k;
    const uint8_t *h = fuzz_take(&in, fuzz_u16(&in), &hlen);
    n = 8 + hlen + in.n;
    file = malloc(n);
    if (!file) return 0;
    for (k = 0; k < 8; k++) file[k] = (uint8_t)((uint64_t)hlen >> (8 * k));
    memcpy(file + 8, h, hlen);
    memcpy(file + 8 + hlen, in.p, in.n);
  }

  fuzz_begin(db);
  count = import(db, "f", file, n, mode & 2 ? tiny_config : NULL);
  if (count >= 0) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT relattn_export('f')", -1, &st, 0) ==
        SQLITE_OK) {
      if (sqlite3_step(st) == SQLITE_ROW) {
        sqlite3_int64 again =
            import(db, "g", sqlite3_column_blob(st, 0),
                   (size_t)sqlite3_column_bytes(st, 0), NULL);
        FUZZ_CHECK(again == count,
                   "export of an imported model (%lld tensors) imports as %lld",
                   count, again);
      }
      sqlite3_finalize(st);
    }
    run(db, "SELECT relattn_score('f', x'0100000002000000')");
    run(db, "SELECT relattn_embed('g', 'ab')");
  }
  fuzz_end(db);
  free(file);
  return 0;
}

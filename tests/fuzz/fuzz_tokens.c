/*
** fuzz_tokens.c: token sequences as JSON text and as int32 BLOBs.
**
** The first input byte picks the entry point; the rest is its argument:
** relattn_tokens(json), relattn_tokens_json(blob), the round trip
** tokens_json(tokens(x)) -> tokens (must give the same BLOB),
** relattn_tokenize / relattn_detokenize against the byte tokenizer,
** relattn_tokens_each and relattn_tokens_agg, and a model function reading
** its tokens argument (relattn_embed) with the input as BLOB or TEXT.
*/
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_db();
  return 0;
}

static const char *const SQL[] = {
    "SELECT relattn_tokens(?1)",
    "SELECT relattn_tokens_json(?1)",
    "SELECT relattn_tokens_json(relattn_tokens(?1))",
    "SELECT relattn_tokenize('tiny', ?1)",
    "SELECT relattn_detokenize('tiny', ?1)",
    "SELECT relattn_detokenize('enc', ?1)",
    "SELECT pos, token FROM relattn_tokens_each(?1)",
    "SELECT relattn_tokens_agg(value) FROM json_each(?1)",
    "SELECT relattn_embed('tiny', ?1)",
    "SELECT relattn_tokens_agg(token) FROM relattn_tokens_each(?1)",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = fuzz_db();
  fuzz_in in = {data, size};
  unsigned op = fuzz_u8(&in), which = op % 10;
  int as_blob = op >> 4 & 1;
  sqlite3_stmt *st;

  if (sqlite3_prepare_v2(db, SQL[which], -1, &st, 0) != SQLITE_OK) return 0;
  if (as_blob || which == 1 || which == 4)
    sqlite3_bind_blob(st, 1, in.p, (int)in.n, SQLITE_STATIC);
  else
    sqlite3_bind_text(st, 1, (const char *)in.p, (int)in.n, SQLITE_STATIC);
  if (which == 2) {
    /* tokens(tokens_json(tokens(x))) == tokens(x) */
    if (sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) == SQLITE_TEXT) {
      sqlite3_stmt *a = NULL, *b = NULL;
      const char *json = (const char *)sqlite3_column_text(st, 0);
      if (sqlite3_prepare_v2(db, "SELECT relattn_tokens(?1)", -1, &a, 0) ==
              SQLITE_OK &&
          sqlite3_prepare_v2(db, "SELECT relattn_tokens(?1)", -1, &b, 0) ==
              SQLITE_OK) {
        sqlite3_bind_text(a, 1, (const char *)in.p, (int)in.n, SQLITE_STATIC);
        sqlite3_bind_text(b, 1, json, -1, SQLITE_STATIC);
        FUZZ_CHECK(sqlite3_step(a) == SQLITE_ROW && sqlite3_step(b) == SQLITE_ROW,
                   "relattn_tokens of its own tokens_json failed: %s",
                   sqlite3_errmsg(db));
        FUZZ_CHECK(sqlite3_column_bytes(a, 0) == sqlite3_column_bytes(b, 0) &&
                       (sqlite3_column_bytes(a, 0) == 0 ||
                        !memcmp(sqlite3_column_blob(a, 0),
                               sqlite3_column_blob(b, 0),
                               (size_t)sqlite3_column_bytes(a, 0))),
                   "tokens -> tokens_json -> tokens changed the sequence (%s)",
                   json);
      }
      sqlite3_finalize(a);
      sqlite3_finalize(b);
    }
  } else {
    fuzz_run(st);
  }
  sqlite3_finalize(st);
  return 0;
}

/*
** fuzz_sql.c: every registered relattn_* function and virtual table, called
** with arguments the fuzzer chooses, against two small models.
**
** The functions and modules are read from pragma_function_list and
** pragma_module_list when the process starts, so a function added to the
** registration table is fuzzed without a change here. An input is a short
** program: each step calls one function (or aggregate), queries one
** table-valued function with constraints, creates and reads a relattn_scan
** style table over the `docs` table, or adds a row to docs. Arguments are
** NULL, numbers, text, blobs, model names, valid token and float32 blobs,
** options JSON, or large zeroblobs (the size limits). A progress handler may
** interrupt any statement part way.
*/
#include "fuzz.h"

#define MAX_FN 128
#define MAX_COLS 16

typedef struct fn_info {
  char name[64];
  int n_arg;     /* -1: any */
  int aggregate;
} fn_info;

typedef struct mod_info {
  char name[64];
  int eponymous;          /* a table-valued function */
  int n_hidden;           /* its arguments */
  int n_cols;
  char cols[MAX_COLS][32]; /* visible columns */
} mod_info;

static fn_info fns[MAX_FN];
static int n_fns;
static mod_info mods[MAX_FN];
static int n_mods;

static void discover(sqlite3 *db) {
  sqlite3_stmt *st;
  if (sqlite3_prepare_v2(db,
                         "SELECT DISTINCT name, narg, type FROM "
                         "pragma_function_list WHERE name LIKE 'relattn%' "
                         "ORDER BY name, narg",
                         -1, &st, 0) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW && n_fns < MAX_FN) {
      fn_info *f = &fns[n_fns++];
      snprintf(f->name, sizeof f->name, "%s", sqlite3_column_text(st, 0));
      f->n_arg = sqlite3_column_int(st, 1);
      f->aggregate = !strcmp((const char *)sqlite3_column_text(st, 2), "a");
    }
    sqlite3_finalize(st);
  }
  if (sqlite3_prepare_v2(db,
                         "SELECT name FROM pragma_module_list WHERE name LIKE "
                         "'relattn%' ORDER BY name",
                         -1, &st, 0) == SQLITE_OK) {
    while (sqlite3_step(st) == SQLITE_ROW && n_mods < MAX_FN) {
      mod_info *m = &mods[n_mods++];
      sqlite3_stmt *cols;
      char sql[160];
      memset(m, 0, sizeof *m);
      snprintf(m->name, sizeof m->name, "%s", sqlite3_column_text(st, 0));
      snprintf(sql, sizeof sql,
               "SELECT name, hidden FROM pragma_table_xinfo('%s')", m->name);
      if (sqlite3_prepare_v2(db, sql, -1, &cols, 0) != SQLITE_OK) continue;
      while (sqlite3_step(cols) == SQLITE_ROW) {
        m->eponymous = 1;
        if (sqlite3_column_int(cols, 1))
          m->n_hidden++;
        else if (m->n_cols < MAX_COLS)
          snprintf(m->cols[m->n_cols++], sizeof m->cols[0], "%s",
                   sqlite3_column_text(cols, 0));
      }
      sqlite3_finalize(cols);
    }
    sqlite3_finalize(st);
  }
  fprintf(stderr, "fuzz_sql: %d functions, %d modules:", n_fns, n_mods);
  for (int i = 0; i < n_fns; i++)
    fprintf(stderr, " %s/%d%s", fns[i].name, fns[i].n_arg,
            fns[i].aggregate ? "(agg)" : "");
  for (int i = 0; i < n_mods; i++)
    fprintf(stderr, " [%s %s %d args %d cols]", mods[i].name,
            mods[i].eponymous ? "eponymous" : "create", mods[i].n_hidden,
            mods[i].n_cols);
  fprintf(stderr, "\n");
}

/* Binds parameter i to a value the input chooses. */
static void bind_value(sqlite3_stmt *st, int i, fuzz_in *in) {
  unsigned kind = fuzz_u8(in) % 14;
  size_t len, k;
  const uint8_t *p;
  switch (kind) {
    case 0: sqlite3_bind_null(st, i); break;
    case 1: { /* small integers matter most: counts, ids, settings */
      int64_t v = (int8_t)fuzz_u8(in);
      if (v == -128) {
        p = fuzz_take(in, 8, &len);
        v = 0;
        memcpy(&v, p, len);
      }
      sqlite3_bind_int64(st, i, v);
      break;
    }
    case 2: {
      double d = 0;
      p = fuzz_take(in, 8, &len);
      memcpy(&d, p, len);
      sqlite3_bind_double(st, i, d);
      break;
    }
    case 3:
      p = fuzz_take(in, fuzz_u8(in), &len);
      sqlite3_bind_text(st, i, (const char *)p, (int)len, SQLITE_TRANSIENT);
      break;
    case 4:
      p = fuzz_take(in, fuzz_u16(in) % 4096, &len);
      sqlite3_bind_blob(st, i, p, (int)len, SQLITE_TRANSIENT);
      break;
    case 5: sqlite3_bind_text(st, i, "tiny", -1, SQLITE_STATIC); break;
    case 6: sqlite3_bind_text(st, i, "enc", -1, SQLITE_STATIC); break;
    case 7: { /* valid token ids for both models */
      int32_t ids[64];
      size_t n = fuzz_u8(in) % 64;
      for (k = 0; k < n; k++) ids[k] = (int32_t)fuzz_u8(in);
      sqlite3_bind_blob(st, i, ids, (int)(n * 4), SQLITE_TRANSIENT);
      break;
    }
    case 8: { /* float32 values in [-2, 2) */
      float f[256];
      size_t n = fuzz_u8(in);
      for (k = 0; k < n; k++) f[k] = ((int)fuzz_u8(in) - 128) / 64.0f;
      sqlite3_bind_blob(st, i, f, (int)(n * 4), SQLITE_TRANSIENT);
      break;
    }
    case 9: { /* attention options */
      char s[160];
      unsigned flags = fuzz_u8(in);
      snprintf(s, sizeof s,
               "{\"heads\":%d,\"d_head\":%d,\"causal\":%s,\"per_head\":%s}",
               (int)(fuzz_u8(in) % 5), (int)(fuzz_u8(in) % 9),
               flags & 1 ? "true" : "false", flags & 2 ? "true" : "false");
      sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
      break;
    }
    case 10: /* large inputs (to 1 MB: over the token limit when lowered) */
      sqlite3_bind_zeroblob64(st, i, (sqlite3_uint64)fuzz_u16(in) * 16);
      break;
    case 11: { /* a JSON array of token ids */
      char s[512];
      size_t n = fuzz_u8(in) % 32, o = 1;
      s[0] = '[';
      for (k = 0; k < n && o < sizeof s - 16; k++)
        o += snprintf(s + o, sizeof s - o, "%s%d", k ? "," : "",
                      (int)(int16_t)fuzz_u16(in));
      snprintf(s + o, sizeof s - o, "]");
      sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
      break;
    }
    case 12: { /* token ids from raw bytes: negative, huge */
      p = fuzz_take(in, (fuzz_u8(in) % 32) * 4, &len);
      sqlite3_bind_blob(st, i, p, (int)len, SQLITE_TRANSIENT);
      break;
    }
    default: /* text the byte tokenizer reads */
      p = fuzz_take(in, fuzz_u8(in) % 64, &len);
      sqlite3_bind_text(st, i, (const char *)p, (int)len, SQLITE_TRANSIENT);
      break;
  }
}

static void bind_all(sqlite3_stmt *st, fuzz_in *in) {
  int i, n = sqlite3_bind_parameter_count(st);
  for (i = 1; i <= n; i++) bind_value(st, i, in);
}

static void run_sql(sqlite3 *db, const char *sql, fuzz_in *in) {
  sqlite3_stmt *st;
  static int trace = -1;
  int rc;
  if (trace < 0) trace = getenv("FUZZ_TRACE") != NULL;
  if (sqlite3_prepare_v2(db, sql, -1, &st, 0) != SQLITE_OK) return;
  bind_all(st, in);
  if (trace) {
    char *x = sqlite3_expanded_sql(st);
    fprintf(stderr, "fuzz_sql: %.300s\n", x ? x : sql);
    sqlite3_free(x);
  }
  rc = fuzz_run(st);
  if (trace) fprintf(stderr, "fuzz_sql:   -> %d %s\n", rc, sqlite3_errmsg(db));
  sqlite3_finalize(st);
}

static int is_setter(const fn_info *f) {
  /* Raising the memory bound or the thread count, or printing progress,
  ** is not what an input should do here; their argument checks are
  ** tested in tests/sql. */
  return f->n_arg != 0 && (!strcmp(f->name, "relattn_threads") ||
                           !strcmp(f->name, "relattn_max_memory") ||
                           !strcmp(f->name, "relattn_progress") ||
                           !strcmp(f->name, "relattn_progress_job"));
}

static void call_function(sqlite3 *db, const fn_info *f, fuzz_in *in) {
  char sql[512];
  int n = f->n_arg >= 0 ? f->n_arg : (int)(fuzz_u8(in) % 7), i, o;
  if (is_setter(f)) return;
  if (f->aggregate) {
    /* Rows of n parameters each: SELECT fn(c1..) FROM (VALUES (...), ...) */
    int rows = 1 + (int)(fuzz_u8(in) % 4), r;
    o = snprintf(sql, sizeof sql, "SELECT %s(", f->name);
    for (i = 0; i < n; i++)
      o += snprintf(sql + o, sizeof sql - o, "%scolumn%d", i ? "," : "", i + 1);
    o += snprintf(sql + o, sizeof sql - o, ") FROM (VALUES ");
    for (r = 0; r < rows; r++) {
      o += snprintf(sql + o, sizeof sql - o, "%s(", r ? "," : "");
      for (i = 0; i < n; i++)
        o += snprintf(sql + o, sizeof sql - o, "%s?", i ? "," : "");
      o += snprintf(sql + o, sizeof sql - o, ")");
    }
    snprintf(sql + o, sizeof sql - o, ")");
    if (n == 0) snprintf(sql, sizeof sql, "SELECT %s()", f->name);
  } else {
    o = snprintf(sql, sizeof sql, "SELECT %s(", f->name);
    for (i = 0; i < n; i++)
      o += snprintf(sql + o, sizeof sql - o, "%s?", i ? "," : "");
    snprintf(sql + o, sizeof sql - o, ")");
  }
  run_sql(db, sql, in);
}

static const char *const OPS[] = {"=", ">", ">=", "<", "<=", "!=", "IS", "IN"};

/* WHERE/ORDER BY/LIMIT over m's visible columns; appended to sql. */
static void constraints(const mod_info *m, fuzz_in *in, char *sql, size_t cap,
                        int o) {
  int k, n = m->n_cols ? (int)(fuzz_u8(in) % 4) : 0;
  for (k = 0; k < n; k++) {
    const char *col = m->cols[fuzz_u8(in) % m->n_cols];
    const char *op = OPS[fuzz_u8(in) % 8];
    if (!strcmp(op, "IN"))
      o += snprintf(sql + o, cap - o, " %s %s IN (?, ?)", k ? "AND" : "WHERE",
                    col);
    else
      o += snprintf(sql + o, cap - o, " %s %s %s ?", k ? "AND" : "WHERE", col,
                    op);
  }
  if (m->n_cols && fuzz_u8(in) % 3 == 0)
    o += snprintf(sql + o, cap - o, " ORDER BY %s DESC",
                  m->cols[fuzz_u8(in) % m->n_cols]);
  if (fuzz_u8(in) % 3 == 0) snprintf(sql + o, cap - o, " LIMIT ?");
}

static const char *const SCAN_KEYS[] = {"model", "source", "tokens", "id"};
static const char *const SCAN_VALUES[] = {"'tiny'", "'enc'", "'docs'",
                                          "'body'", "'doc_id'", "docs",
                                          "'nope'", "'relattn_model'"};

static void query_module(sqlite3 *db, const mod_info *m, fuzz_in *in) {
  char sql[1024];
  int i, o;
  if (m->eponymous) {
    int n = m->n_hidden;
    if (fuzz_u8(in) % 8 == 0) n = (int)(fuzz_u8(in) % (m->n_hidden + 2));
    o = snprintf(sql, sizeof sql, "SELECT * FROM %s(", m->name);
    for (i = 0; i < n; i++)
      o += snprintf(sql + o, sizeof sql - o, "%s?", i ? "," : "");
    o += snprintf(sql + o, sizeof sql - o, ")");
    constraints(m, in, sql, sizeof sql, o);
    run_sql(db, sql, in);
    return;
  }
  /* A module used with CREATE VIRTUAL TABLE: arguments key=value. */
  o = snprintf(sql, sizeof sql, "CREATE VIRTUAL TABLE temp.fz USING %s(",
               m->name);
  {
    /* Mostly the arguments relattn_scan takes, so the table gets made and
    ** read; then a few more from the input. */
    unsigned form = fuzz_u8(in);
    if (form % 4 != 0) {
      o += snprintf(sql + o, sizeof sql - o,
                    "model='%s', source='docs', tokens='body'%s",
                    form & 4 ? "enc" : "tiny", form & 8 ? ", id='doc_id'" : "");
      if (form & 16) o += snprintf(sql + o, sizeof sql - o, ",");
      else goto close;
    }
  }
  for (i = 0, o += 0; i < (int)(fuzz_u8(in) % 6); i++) {
    unsigned pick = fuzz_u8(in);
    if (pick % 16 == 15) { /* arbitrary text as one argument */
      size_t len, k;
      const uint8_t *p = fuzz_take(in, fuzz_u8(in) % 48, &len);
      o += snprintf(sql + o, sizeof sql - o, "%s", i ? "," : "");
      for (k = 0; k < len && o < (int)sizeof sql - 8; k++)
        if (p[k] && p[k] != ';' && p[k] != ')' && p[k] != ',')
          sql[o++] = (char)p[k];
      sql[o] = 0;
    } else {
      o += snprintf(sql + o, sizeof sql - o, "%s%s=%s", i ? "," : "",
                    SCAN_KEYS[pick % 4], SCAN_VALUES[(pick >> 2) % 8]);
    }
  }
close:
  snprintf(sql + o, sizeof sql - o, ")");
  if (getenv("FUZZ_TRACE")) fprintf(stderr, "fuzz_sql: %s\n", sql);
  if (sqlite3_exec(db, sql, 0, 0, 0) != SQLITE_OK) return;
  {
    sqlite3_stmt *st;
    mod_info t;
    memset(&t, 0, sizeof t);
    if (sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info('fz')", -1,
                           &st, 0) == SQLITE_OK) {
      while (sqlite3_step(st) == SQLITE_ROW && t.n_cols < MAX_COLS)
        snprintf(t.cols[t.n_cols++], sizeof t.cols[0], "%s",
                 sqlite3_column_text(st, 0));
      sqlite3_finalize(st);
    }
    /* Select a subset of the columns: only those are computed. */
    o = snprintf(sql, sizeof sql, "SELECT ");
    for (i = 0; i < t.n_cols; i++)
      if (fuzz_u8(in) & 1 || i == t.n_cols - 1)
        o += snprintf(sql + o, sizeof sql - o, "%s%s", o > 7 ? "," : "",
                      t.cols[i]);
    o += snprintf(sql + o, sizeof sql - o, " FROM temp.fz");
    constraints(&t, in, sql, sizeof sql, o);
    run_sql(db, sql, in);
  }
  fuzz_exec(db, "DROP TABLE temp.fz");
}

static int interrupt_after;
static int progress(void *p) {
  (void)p;
  return interrupt_after > 0 && --interrupt_after == 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  sqlite3 *db = fuzz_db();
  (void)argc;
  (void)argv;
  fuzz_exec(db,
            "CREATE TABLE docs(doc_id INTEGER PRIMARY KEY, body);"
            "INSERT INTO docs VALUES (1, 'hello world'), (2, x'01000000020000"
            "00'), (3, NULL), (5, x'0100'), (7, 42), (8, relattn_tokens('[1,2,"
            "3,4,5,6,7,8]'));");
  discover(db);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = fuzz_db();
  fuzz_in in = {data, size};
  int steps;
  unsigned head = fuzz_u8(&in);
  if (!n_fns) return 0;
  fuzz_begin(db);
  if (head & 1) {
    interrupt_after = 1 + (int)fuzz_u16(&in) % 2000;
    sqlite3_progress_handler(db, 4, progress, 0);
  }
  for (steps = 0; steps < 8 && in.n; steps++) {
    unsigned op = fuzz_u8(&in);
    if (op % 8 == 7) {
      run_sql(db, "INSERT OR REPLACE INTO docs VALUES (?, ?)", &in);
    } else if (op % 8 == 6 && n_mods) {
      query_module(db, &mods[fuzz_u8(&in) % n_mods], &in);
    } else {
      call_function(db, &fns[fuzz_u8(&in) % n_fns], &in);
    }
  }
  sqlite3_progress_handler(db, 0, 0, 0);
  interrupt_after = 0;
  fuzz_end(db);
  return 0;
}

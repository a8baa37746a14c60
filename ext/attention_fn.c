#include "ext.h"
SQLITE_EXTENSION_INIT3
/*
** attention_fn.c: relattn_attention(q, k, v, rel_k, rel_v, options [, t7
** [, t8]]), relative self-attention on float32 matrices with any position
** scheme, Shaw's by default (README.md, "Position schemes").
**
**   .load ./relattn
**   SELECT hex(relattn_attention('[[1,0],[0,1]]', '[[1,0],[0,1]]',
**                                '[[1,2],[3,4]]', '[[0,0],[0,1],[1,0]]', NULL,
**                                json_object('heads', 1, 'd_head', 2)));
**
** q, k, v: float32 BLOBs (n, heads*d_head), or JSON text: a flat or nested
** array of numbers. rel_k, rel_v: (2k+1, d_head), or (heads, 2k+1, d_head)
** with "per_head": true, or NULL for no term on that side; k comes from their
** size. options: a JSON object {"heads", "d_head", "causal", "per_head",
** "position"}, read with SQLite's json_each; "position" names the scheme and
** its parameters ({"type": "t5", "num_buckets": 32}), and the scheme's
** further tables follow options (t5: bias; deberta: pos_query; xl: u, w).
** src/schemes.c checks the tables against the scheme and builds its terms.
** Result: float32 BLOB (n, heads*d_head).
**
** The work runs on the connection's worker threads (relattn_threads) with
** OpenBLAS single-threaded for the duration of the call, its previous thread
** count restored after. It honours sqlite3_interrupt between (head, query
** block) tasks, which is what keeps it SQLITE_INNOCUOUS: a view or trigger
** that calls it on a huge input cannot hold the connection beyond a Ctrl-C.
*/
#include <limits.h>
#include <string.h>

#include "functions.h"

#define FN "relattn_attention"

#define N_MATRIX 7 /* q, k, v, rel_k, rel_v, and up to two after options */
static const char *const arg_names[5] = {"q", "k", "v", "rel_k", "rel_v"};

/* A matrix argument as float32: in place when the BLOB is aligned, else a
** copy (owned). */
typedef struct attnMatrix {
  const float *p;
  sqlite3_int64 count;   /* floats */
  float *owned;          /* sqlite3_malloc64'd, or NULL */
  int present;           /* 0 for a NULL table */
} attnMatrix;

typedef struct attnOptions {
  sqlite3_int64 heads, d_head;
  int causal, per_head;
  relattn_position position;
} attnOptions;

static const char *typeName(int t) {
  switch (t) {
    case SQLITE_INTEGER: return "an integer";
    case SQLITE_FLOAT: return "a real";
    case SQLITE_NULL: return "NULL";
    case SQLITE_BLOB: return "a BLOB";
    default: return "text";
  }
}

/* Appends x to m->owned (capacity *cap), growing it. Returns 0 on OOM. */
static int pushFloat(attnMatrix *m, sqlite3_int64 *cap, float x) {
  if (m->count == *cap) {
    sqlite3_int64 n = *cap ? *cap * 2 : 64;
    float *p = sqlite3_realloc64(m->owned, (sqlite3_uint64)n * sizeof(float));
    if (!p) return 0;
    m->owned = p;
    *cap = n;
  }
  m->owned[m->count++] = x;
  return 1;
}

/* JSON text: a flat or nested array of numbers, in document order. */
static int jsonMatrix(sqlite3_context *ctx, sqlite3_value *v, const char *name,
                      attnMatrix *m) {
  sqlite3 *db = relattn_json_db(sqlite3_user_data(ctx));
  sqlite3_stmt *st = NULL;
  sqlite3_int64 cap = 0;
  int rc, ok = 1;
  /* Every number but the last takes 2 characters or more ("1,"): the floats
  ** to hold are bounded before anything is read. */
  const size_t bound = ((size_t)sqlite3_value_bytes(v) / 2 + 1) * sizeof(float);
  if (!relattn_memory_ok(ctx, sqlite3_user_data(ctx), FN, bound)) return 0;
  /* json_type raises on malformed JSON: only ask when json_valid says yes */
  rc = sqlite3_prepare_v2(
      db, "SELECT CASE WHEN json_valid(?1) THEN json_type(?1) = 'array' END",
      -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_value(st, 1, v);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (sqlite3_column_type(st, 0) == SQLITE_NULL) {
      relattn_result_errorf(ctx, FN ": %s is text but not valid JSON", name);
      sqlite3_finalize(st);
      return 0;
    }
    if (!sqlite3_column_int(st, 0)) {
      relattn_result_errorf(ctx, FN ": %s is not a JSON array of numbers",
                            name);
      sqlite3_finalize(st);
      return 0;
    }
    rc = SQLITE_OK;
  }
  sqlite3_finalize(st);
  st = NULL;
  if (rc == SQLITE_OK)
    rc = sqlite3_prepare_v2(db, "SELECT type, atom FROM json_tree(?1)", -1,
                            &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_value(st, 1, v);
  while (rc == SQLITE_OK && ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *type = (const char *)sqlite3_column_text(st, 0);
    rc = SQLITE_OK;
    if (!type) {
      rc = SQLITE_NOMEM;
    } else if (strcmp(type, "array") == 0) {
      continue;
    } else if (strcmp(type, "integer") == 0 || strcmp(type, "real") == 0) {
      if (!pushFloat(m, &cap, (float)sqlite3_column_double(st, 1)))
        rc = SQLITE_NOMEM;
    } else {
      relattn_result_errorf(ctx,
                            FN ": %s is not a JSON array of numbers (found %s)",
                            name, type);
      ok = 0;
    }
  }
  sqlite3_finalize(st);
  if (!ok) return 0;
  if (rc != SQLITE_DONE && rc != SQLITE_OK) {
    if (rc == SQLITE_NOMEM)
      sqlite3_result_error_nomem(ctx);
    else
      relattn_result_errorf(ctx, FN ": reading %s as JSON: %s", name,
                            sqlite3_errmsg(db));
    return 0;
  }
  m->p = m->owned;
  m->present = 1;
  return 1;
}

/* Reads argument v (named name) into m. Tables (optional) may be NULL. */
static int matrixArg(sqlite3_context *ctx, sqlite3_value *v, const char *name,
                     int optional, attnMatrix *m) {
  int t = sqlite3_value_type(v);
  memset(m, 0, sizeof *m);
  if (t == SQLITE_NULL && optional) return 1;
  if (t == SQLITE_TEXT) return jsonMatrix(ctx, v, name, m);
  if (t != SQLITE_BLOB) {
    relattn_result_errorf(
        ctx, FN ": %s must be a float32 BLOB or a JSON array, not %s", name,
        typeName(t));
    return 0;
  }
  {
    const void *p = sqlite3_value_blob(v);
    sqlite3_int64 bytes = sqlite3_value_bytes(v);
    if (bytes % 4 != 0) {
      relattn_result_errorf(ctx, FN ": %s has %lld bytes, not a multiple of 4",
                            name, bytes);
      return 0;
    }
    m->count = bytes / 4;
    m->present = 1;
    if (bytes == 0) return 1;
    if (!p) {
      sqlite3_result_error_nomem(ctx);
      return 0;
    }
    if (((uintptr_t)p & 3) == 0) {
      m->p = p;
    } else {
      m->owned = sqlite3_malloc64((sqlite3_uint64)bytes);
      if (!m->owned) {
        sqlite3_result_error_nomem(ctx);
        return 0;
      }
      memcpy(m->owned, p, (size_t)bytes);
      m->p = m->owned;
    }
  }
  return 1;
}

/* Reads a positive integer option into *out; 0 with an error otherwise. */
static int positiveOption(sqlite3_context *ctx, sqlite3_stmt *st,
                          const char *key, sqlite3_int64 *out) {
  const char *type = (const char *)sqlite3_column_text(st, 1);
  sqlite3_int64 x = sqlite3_column_int64(st, 2);
  if (!type || strcmp(type, "integer") != 0 || x <= 0 || x > INT_MAX) {
    char e[RELATTN_ECHO_BUF];
    relattn_result_errorf(ctx,
                          FN ": options.%s must be a positive integer, not %s",
                          key, relattn_echo(e, sqlite3_column_text(st, 3), -1));
    return 0;
  }
  *out = x;
  return 1;
}

static int boolOption(sqlite3_context *ctx, sqlite3_stmt *st, const char *key,
                      int *out) {
  const char *type = (const char *)sqlite3_column_text(st, 1);
  if (type && strcmp(type, "true") == 0) {
    *out = 1;
  } else if (type && strcmp(type, "false") == 0) {
    *out = 0;
  } else if (type && strcmp(type, "integer") == 0 &&
             (sqlite3_column_int64(st, 2) == 0 ||
              sqlite3_column_int64(st, 2) == 1)) {
    *out = sqlite3_column_int(st, 2);
  } else {
    char e[RELATTN_ECHO_BUF];
    relattn_result_errorf(ctx, FN ": options.%s must be true or false, not %s",
                          key, relattn_echo(e, sqlite3_column_text(st, 3), -1));
    return 0;
  }
  return 1;
}

/* A value of options.position as an integer in [1, INT_MAX]: the check and
** the wording of positiveOption, under the key "position.<key>". */
static int positionInt(sqlite3_context *ctx, sqlite3_stmt *st, const char *key,
                       int *out) {
  char full[64];
  sqlite3_int64 x;
  sqlite3_snprintf(sizeof full, full, "position.%s", key);
  if (!positiveOption(ctx, st, full, &x)) return 0;
  *out = (int)x;
  return 1;
}

/* options.position: {"type": ..., parameters of that scheme}. */
static int parsePosition(sqlite3_context *ctx, const char *json,
                         relattn_position *p) {
  sqlite3 *db = relattn_json_db(sqlite3_user_data(ctx));
  sqlite3_stmt *st = NULL;
  const char *const *keys;
  int rc, ok = 1, type = -1;
  rc = sqlite3_prepare_v2(db, "SELECT json_type(?1, '$.type'), "
                              "json_extract(?1, '$.type'), "
                              "json_quote(json_extract(?1, '$.type'))",
                          -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  if (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *jt = (const char *)sqlite3_column_text(st, 0);
    rc = SQLITE_OK;
    if (!jt) {
      relattn_result_errorf(ctx, FN ": options.position lacks type (one of %s)",
                            relattn_position_names());
      ok = 0;
    } else {
      const char *name = strcmp(jt, "text") == 0
                             ? (const char *)sqlite3_column_text(st, 1) : NULL;
      type = relattn_position_parse(name);
      if (type < 0) {
        char e[RELATTN_ECHO_BUF];
        relattn_result_errorf(ctx, FN ": options.position.type must be one of "
                                   "%s, not %s", relattn_position_names(),
                              relattn_echo(e, sqlite3_column_text(st, 2), -1));
        ok = 0;
      }
    }
  }
  sqlite3_finalize(st);
  st = NULL;
  if (!ok) return 0;
  if (rc != SQLITE_OK) {
    relattn_result_errorf(ctx, FN ": reading options.position: %s",
                          sqlite3_errmsg(db));
    return 0;
  }
  relattn_position_defaults(p, type);
  keys = relattn_position_keys(type);
  rc = sqlite3_prepare_v2(db,
                          "SELECT key, type, atom, CASE WHEN type = 'text' "
                          "THEN json_quote(value) ELSE value END "
                          "FROM json_each(?1)",
                          -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_text(st, 1, json, -1, SQLITE_STATIC);
  while (rc == SQLITE_OK && ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *jt = (const char *)sqlite3_column_text(st, 1);
    int known = 0, i;
    rc = SQLITE_OK;
    if (!key || !jt) {
      rc = SQLITE_NOMEM;
      break;
    }
    if (strcmp(key, "type") == 0) continue;
    for (i = 0; keys[i]; i++) known |= strcmp(key, keys[i]) == 0;
    if (!known) {
      char list[128] = "", e[RELATTN_ECHO_BUF];
      for (i = 0; keys[i]; i++)
        sqlite3_snprintf((int)(sizeof list - strlen(list)), list + strlen(list),
                         "%s%s", i ? ", " : "", keys[i]);
      relattn_result_errorf(ctx,
                            FN
                            ": unknown key '%s' in options.position "
                            "(type '%s' takes: %s)",
                            relattn_echo(e, key, -1),
                            relattn_position_name(type),
                            keys[0] ? list : "no other key");
      ok = 0;
    } else if (strcmp(key, "num_buckets") == 0) {
      ok = positionInt(ctx, st, key, &p->num_buckets);
    } else if (strcmp(key, "max_distance") == 0) {
      ok = positionInt(ctx, st, key, &p->max_distance);
    } else if (strcmp(key, "max_relative_positions") == 0) {
      ok = positionInt(ctx, st, key, &p->max_relative_positions);
    } else if (strcmp(key, "position_buckets") == 0) {
      /* HF's -1 (or 0) means no log buckets */
      sqlite3_int64 x = sqlite3_column_int64(st, 2);
      if (strcmp(jt, "integer") != 0 || x < -1 || x > INT_MAX) {
        char e[RELATTN_ECHO_BUF];
        relattn_result_errorf(ctx,
                              FN
                              ": options.position.position_buckets must "
                              "be an integer (-1: none), not %s",
                              relattn_echo(e, sqlite3_column_text(st, 3), -1));
        ok = 0;
      } else {
        p->position_buckets = (int)x;
      }
    } else if (strcmp(key, "rotary_dim") == 0) {
      ok = positionInt(ctx, st, key, &p->rotary_dim);
    } else if (strcmp(key, "base") == 0) {
      if (strcmp(jt, "integer") != 0 && strcmp(jt, "real") != 0) {
        char e[RELATTN_ECHO_BUF];
        relattn_result_errorf(ctx,
                              FN
                              ": options.position.base must be a number, "
                              "not %s",
                              relattn_echo(e, sqlite3_column_text(st, 3), -1));
        ok = 0;
      } else {
        p->base = sqlite3_column_double(st, 2);
      }
    } else if (strcmp(key, "rotary") == 0) {
      const char *v = (const char *)sqlite3_column_text(st, 2);
      if (strcmp(jt, "text") == 0 && v && strcmp(v, "half") == 0) {
        p->rotary_half = 1;
      } else if (strcmp(jt, "text") == 0 && v &&
                 strcmp(v, "interleaved") == 0) {
        p->rotary_half = 0;
      } else {
        char e[RELATTN_ECHO_BUF];
        relattn_result_errorf(ctx,
                              FN
                              ": options.position.rotary must be \"half\" "
                              "or \"interleaved\", not %s",
                              relattn_echo(e, sqlite3_column_text(st, 3), -1));
        ok = 0;
      }
    }
  }
  sqlite3_finalize(st);
  if (!ok) return 0;
  if (rc != SQLITE_DONE && rc != SQLITE_OK) {
    if (rc == SQLITE_NOMEM)
      sqlite3_result_error_nomem(ctx);
    else
      relattn_result_errorf(ctx, FN ": reading options.position: %s",
                            sqlite3_errmsg(db));
    return 0;
  }
  return 1;
}

/* options: a JSON object, decoded with json_each. */
static int parseOptions(sqlite3_context *ctx, sqlite3_value *v,
                        attnOptions *o) {
  sqlite3 *db = relattn_json_db(sqlite3_user_data(ctx));
  sqlite3_stmt *st = NULL;
  int rc, ok = 1, is_object = 0;
  memset(o, 0, sizeof *o);
  relattn_position_defaults(&o->position, RELATTN_POS_SHAW);
  if (sqlite3_value_type(v) != SQLITE_TEXT) {
    relattn_result_errorf(ctx, FN ": options must be a JSON object, not %s",
                          typeName(sqlite3_value_type(v)));
    return 0;
  }
  rc = sqlite3_prepare_v2(
      db, "SELECT CASE WHEN json_valid(?1) THEN json_type(?1) = 'object' END",
      -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_value(st, 1, v);
  if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    is_object = sqlite3_column_int(st, 0);
  rc = sqlite3_finalize(st);
  st = NULL;
  if (rc != SQLITE_OK) {
    relattn_result_errorf(ctx, FN ": reading options: %s", sqlite3_errmsg(db));
    return 0;
  }
  if (!is_object) {
    relattn_result_errorf(ctx, FN ": options must be a JSON object");
    return 0;
  }
  /* key, type, atom, and the value as JSON text for messages */
  rc = sqlite3_prepare_v2(db,
                          "SELECT key, type, atom, CASE WHEN type = 'text' "
                          "THEN json_quote(value) ELSE value END "
                          "FROM json_each(?1)",
                          -1, &st, NULL);
  if (rc == SQLITE_OK) rc = sqlite3_bind_value(st, 1, v);
  while (rc == SQLITE_OK && ok && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    rc = SQLITE_OK;
    if (!key) {
      rc = SQLITE_NOMEM;
    } else if (strcmp(key, "heads") == 0) {
      ok = positiveOption(ctx, st, key, &o->heads);
    } else if (strcmp(key, "d_head") == 0) {
      ok = positiveOption(ctx, st, key, &o->d_head);
    } else if (strcmp(key, "causal") == 0) {
      ok = boolOption(ctx, st, key, &o->causal);
    } else if (strcmp(key, "per_head") == 0) {
      ok = boolOption(ctx, st, key, &o->per_head);
    } else if (strcmp(key, "position") == 0) {
      const char *type = (const char *)sqlite3_column_text(st, 1);
      if (!type || strcmp(type, "object") != 0) {
        char e[RELATTN_ECHO_BUF];
        relattn_result_errorf(ctx,
                              FN
                              ": options.position must be a JSON object, "
                              "not %s",
                              relattn_echo(e, sqlite3_column_text(st, 3), -1));
        ok = 0;
      } else {
        ok = parsePosition(ctx, (const char *)sqlite3_column_text(st, 3),
                           &o->position);
      }
    } else {
      char e[RELATTN_ECHO_BUF];
      relattn_result_errorf(
          ctx,
          FN
          ": unknown option '%s' (known: heads, d_head, causal, per_head, "
          "position)",
          relattn_echo(e, key, -1));
      ok = 0;
    }
  }
  sqlite3_finalize(st);
  if (!ok) return 0;
  if (rc != SQLITE_DONE) {
    if (rc == SQLITE_NOMEM)
      sqlite3_result_error_nomem(ctx);
    else
      relattn_result_errorf(ctx, FN ": reading options: %s",
                            sqlite3_errmsg(db));
    return 0;
  }
  if (!o->heads || !o->d_head) {
    relattn_result_errorf(ctx, FN ": options lack %s",
                          !o->heads ? "heads" : "d_head");
    return 0;
  }
  return 1;
}

void relattn_attention_func(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv) {
  relattn_conn *conn = sqlite3_user_data(ctx);
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  attnMatrix m[N_MATRIX];
  attnOptions o;
  relattn_attn a;
  relattn_scheme sch;
  relattn_pos_tables tables;
  relattn_pool *pool;
  relattn_watch watch;
  const char *const *extra;
  const char *names[N_MATRIX];
  sqlite3_int64 width, n, out_bytes;
  size_t need, scratch;
  float *out = NULL;
  char err[256];
  int i, rc, blas, n_extra = argc - 6, n_names = 0;

  memset(m, 0, sizeof m);
  memset(&sch, 0, sizeof sch);
  for (i = 0; i < 5; i++)
    if (!matrixArg(ctx, argv[i], arg_names[i], i >= 3, &m[i])) goto done;
  if (!parseOptions(ctx, argv[5], &o)) goto done;
  extra = relattn_position_extra(o.position.type);
  while (extra[n_names]) n_names++;
  if (n_extra > n_names) {
    char list[64] = "";
    for (i = 0; i < n_names; i++)
      sqlite3_snprintf((int)(sizeof list - strlen(list)), list + strlen(list),
                       "%s%s", i ? ", " : " (", extra[i]);
    relattn_result_errorf(ctx,
                          FN
                          ": position type '%s' takes %d argument%s after "
                          "options%s%s, not %d",
                          relattn_position_name(o.position.type), n_names,
                          n_names == 1 ? "" : "s", list, n_names ? ")" : "",
                          n_extra);
    goto done;
  }
  for (i = 0; i < N_MATRIX; i++)
    names[i] = i < 5 ? arg_names[i] : (i - 5 < n_names ? extra[i - 5] : "?");
  for (i = 0; i < n_extra; i++)
    if (!matrixArg(ctx, argv[6 + i], names[5 + i], 1, &m[5 + i])) goto done;

  width = o.heads * o.d_head; /* both <= INT_MAX: no overflow in 64 bits */
  if (m[0].count == 0) {
    relattn_result_errorf(ctx, FN ": q is empty");
    goto done;
  }
  if (m[0].count % width != 0) {
    relattn_result_errorf(
        ctx, FN ": q has %lld floats, not a multiple of heads*d_head = %lld",
        m[0].count, width);
    goto done;
  }
  for (i = 1; i < 3; i++) {
    if (m[i].count != m[0].count) {
      relattn_result_errorf(ctx,
                            FN ": %s has %lld floats, q has %lld (q, k and v "
                               "must have the same shape)",
                            arg_names[i], m[i].count, m[0].count);
      goto done;
    }
  }
  n = m[0].count / width;
  for (i = 0; i < N_MATRIX; i++) {
    size_t bad;
    if (!m[i].present || m[i].count == 0) continue;
    bad = relattn_find_nonfinite(m[i].p, RELATTN_F32, (size_t)m[i].count);
    if (bad < (size_t)m[i].count) {
      relattn_result_errorf(ctx, FN ": %s has a NaN or Inf at float %lld",
                            names[i], (sqlite3_int64)bad);
      goto done;
    }
  }
  if (n > conn->max_tokens) {
    relattn_result_errorf(ctx, FN ": q has %lld rows, over the limit of %d "
                               "(relattn_max_tokens)", n, conn->max_tokens);
    sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
    goto done;
  }
  out_bytes = m[0].count * 4;
  if (out_bytes > sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1)) {
    relattn_result_errorf(ctx,
                          FN
                          ": the result would have %lld bytes, over "
                          "SQLITE_LIMIT_LENGTH (%d)",
                          out_bytes,
                          sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1));
    sqlite3_result_error_code(ctx, SQLITE_TOOBIG);
    goto done;
  }

  /* The scheme's terms from its tables (a NULL table is absent; an empty
  ** BLOB is a table of no rows, which the checks refuse). */
  memset(&tables, 0, sizeof tables);
  for (i = 0; i < RELATTN_POS_TABLES; i++) {
    const attnMatrix *t = &m[3 + i];
    tables.t[i] = t->present ? (t->p ? t->p : (const float *)"") : NULL;
    tables.count[i] = t->count;
  }
  rc = relattn_scheme_build(&sch, &o.position, &tables, (int)n, (int)o.heads,
                            (int)o.d_head, o.causal, o.per_head, err,
                            sizeof err);
  if (rc != RELATTN_OK) {
    char *msg = sqlite3_mprintf(FN ": %s", err);
    relattn_result_status(ctx, rc, msg ? msg : FN ": out of memory");
    sqlite3_free(msg);
    goto done;
  }

  memset(&a, 0, sizeof a);
  a.n = (int)n;
  a.heads = (int)o.heads;
  a.d_head = (int)o.d_head;
  a.causal = o.causal;
  a.q = m[0].p; a.ldq = (int)width;
  a.k = m[1].p; a.ldk = (int)width;
  a.v = m[2].p; a.ldv = (int)width;
  a.ldo = (int)width;
  a.rel = &sch.rel;

  /* The result, the JSON copies, the scheme's tables, every worker's scratch
  ** and the scratch the tasks share. */
  scratch = relattn_attention_scratch_bytes(&a);
  need = (size_t)out_bytes;
  for (i = 0; i < N_MATRIX; i++)
    if (m[i].owned) need += (size_t)m[i].count * 4;
  if (!relattn_mul_ok(scratch, (size_t)conn->n_threads, &scratch) ||
      !relattn_add_ok(need, scratch, &need) ||
      !relattn_add_ok(need, relattn_attention_shared_bytes(&a), &need) ||
      !relattn_add_ok(need, relattn_scheme_bytes(&o.position, &tables, (int)n,
                                                 (int)o.heads, (int)o.d_head),
                      &need))
    need = SIZE_MAX;
  if (!relattn_memory_ok(ctx, conn, FN, need)) goto done;

  pool = relattn_conn_pool(conn);
  out = sqlite3_malloc64((sqlite3_uint64)out_bytes);
  if (!pool || !out) {
    sqlite3_result_error_nomem(ctx);
    goto done;
  }
  a.out = out;
  blas = relattn_blas_single();
  relattn_watch_begin(&watch, conn, pool); /* sqlite3_interrupt stops it */
  rc = relattn_attention(&a, pool, err, sizeof err);
  relattn_watch_end(&watch);
  relattn_blas_restore(blas);
  if (rc != RELATTN_OK) {
    char *msg = sqlite3_mprintf(FN ": %s", err);
    relattn_result_status(ctx, rc, msg ? msg : FN ": out of memory");
    sqlite3_free(msg);
    goto done;
  }
  sqlite3_result_blob64(ctx, out, (sqlite3_uint64)out_bytes, sqlite3_free);
  out = NULL;

done:
  relattn_scheme_free(&sch);
  sqlite3_free(out);
  for (i = 0; i < N_MATRIX; i++) sqlite3_free(m[i].owned);
}

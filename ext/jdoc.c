/*
** jdoc.c: the keys of a JSON document (a Hugging Face config.json,
** tokenizer_config.json), read one at a time through SQLite's json_type /
** json_extract, never a parser of our own, each with relattn_import's
** message when it is not what it must be. No SQL function of its own.
**
**   SELECT relattn_import('m', readfile('tiny.safetensors'),
**                         '{"model_type": "bert", "hidden_size": "768"}');
**   -- relattn_import: config_json: 'hidden_size' must be an integer, not text
*/
#include "ext.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import" /* the readers are relattn_import's */

int relattn_jdoc_open(relattn_jdoc *j, sqlite3 *db, const char *json,
                      const char *what, char **pzErr) {
  memset(j, 0, sizeof *j);
  j->db = db, j->what = what, j->pzErr = pzErr, j->json = json;
  if (sqlite3_prepare_v2(db,
                         "SELECT json_type(?1, ?2), json_extract(?1, ?2), "
                         "json_extract(?1, ?2, ?2)",
                         -1, &j->st, NULL) != SQLITE_OK) {
    *pzErr = relattn_sql_errmsg(db, FN, sqlite3_errcode(db));
    return j->rc = SQLITE_ERROR;
  }
  sqlite3_bind_text(j->st, 1, json, -1, SQLITE_STATIC);
  return SQLITE_OK;
}

void relattn_jdoc_close(relattn_jdoc *j) { sqlite3_finalize(j->st); }
                        
                        /* Steps the statement on key (a top-level key, or a path from "$").
                        ** Returns the JSON type ("null" when absent), or NULL after an error. */
                        const char *relattn_jdoc_step(relattn_jdoc *j, const char *key) {
  char path[160];
  const char *type;
  if (j->rc != SQLITE_OK) return NULL;
  if (key[0] == '$')
    sqlite3_snprintf(sizeof path, path, "%s", key);
  else
    sqlite3_snprintf(sizeof path, path, "$.\"%s\"", key);
  sqlite3_reset(j->st);
  sqlite3_bind_text(j->st, 2, path, -1, SQLITE_TRANSIENT);
  if (sqlite3_step(j->st) != SQLITE_ROW) {
    j->rc = sqlite3_errcode(j->db);
    if (j->rc == SQLITE_OK || j->rc == SQLITE_DONE) j->rc = SQLITE_ERROR;
    sqlite3_free(*j->pzErr);
    *j->pzErr = relattn_sql_errmsg(j->db, FN, j->rc);
    return NULL;
  }
  type = (const char *)sqlite3_column_text(j->st, 0);
  return type ? type : "null";
}

/* Refuses the value relattn_jdoc_step stepped on, named name ("'key'"),
** when a string in it holds a NUL; 1 when it did. */
int relattn_jdoc_nul(relattn_jdoc *j, const char *name) {
  if (j->rc != SQLITE_OK ||
      !relattn_json_has_nul((const char *)sqlite3_column_text(j->st, 2)))
    return 0;
  *j->pzErr = sqlite3_mprintf("%s: %s: %s" RELATTN_NUL_MSG, FN, j->what,
                              name);
  j->rc = SQLITE_ERROR;
  return 1;
}

void relattn_jdoc_bad(relattn_jdoc *j, const char *key, const char *want,
                      const char *type) {
  if (j->rc != SQLITE_OK) return;
  *j->pzErr = sqlite3_mprintf("%s: %s: '%s' must be %s, not %s", FN, j->what,
                              key, want, type);
  j->rc = SQLITE_ERROR;
}

/* An integer key; absent or null: def. */
int relattn_jdoc_int(relattn_jdoc *j, const char *key, int def) {
  const char *type = relattn_jdoc_step(j, key);
  sqlite3_int64 v;
  if (!type) return def;
  if (strcmp(type, "null") == 0) return def;
  if (strcmp(type, "integer") != 0) {
    relattn_jdoc_bad(j, key, "an integer", type);
    return def;
  }
  v = sqlite3_column_int64(j->st, 1);
  if (v < -2147483647 || v > 2147483647) {
    *j->pzErr = sqlite3_mprintf("%s: %s: '%s' is out of range", FN, j->what,
                                key);
    j->rc = SQLITE_ERROR;
    return def;
  }
  return (int)v;
}

double relattn_jdoc_num(relattn_jdoc *j, const char *key, double def) {
  const char *type = relattn_jdoc_step(j, key);
  if (!type || strcmp(type, "null") == 0) return def;
  if (strcmp(type, "integer") != 0 && strcmp(type, "real") != 0) {
    relattn_jdoc_bad(j, key, "a number", type);
    return def;
  }
  return sqlite3_column_double(j->st, 1);
}

/* A size read from key: 1 to max, named by its Hugging Face key (the
** native check would name the native one). */
void relattn_jdoc_size(relattn_jdoc *j, const char *key, int v, int max) {
  if (j->rc != SQLITE_OK || (v >= 1 && v <= max)) return;
  *j->pzErr = sqlite3_mprintf("%s: %s: '%s' must be between 1 and %d, not %d",
                              FN, j->what, key, max, v);
  j->rc = SQLITE_ERROR;
}

/* true, false; absent or null: def (-1 for "no value"). */
int relattn_jdoc_bool(relattn_jdoc *j, const char *key, int def) {
  const char *type = relattn_jdoc_step(j, key);
  if (!type || strcmp(type, "null") == 0) return def;
  if (strcmp(type, "true") == 0) return 1;
  if (strcmp(type, "false") == 0) return 0;
  relattn_jdoc_bad(j, key, "true or false", type);
  return def;
}

/* A string key, copied (sqlite3_malloc'd), or NULL when absent or null.
** With obj_content, an object's "content" (tokenizer_config.json writes
** special tokens as {"content": "[CLS]", ...}) is taken too. */
char *relattn_jdoc_str(relattn_jdoc *j, const char *key, int obj_content) {
  const char *type = relattn_jdoc_step(j, key);
  char *s;
  if (!type || strcmp(type, "null") == 0) return NULL;
  if (obj_content && strcmp(type, "object") == 0) {
    char path[160];
    sqlite3_snprintf(sizeof path, path, "$.\"%s\".content", key);
    type = relattn_jdoc_step(j, path);
    if (!type || strcmp(type, "null") == 0) return NULL;
  }
  if (strcmp(type, "text") != 0) {
    relattn_jdoc_bad(j, key, "a string", type);
    return NULL;
  }
  {
    char name[160];
    sqlite3_snprintf(sizeof name, name, "'%s'", key);
    if (relattn_jdoc_nul(j, name)) return NULL;
  }
  s = sqlite3_mprintf("%s", sqlite3_column_text(j->st, 1));
  if (!s) {
    j->rc = SQLITE_NOMEM;
  }
  return s;
}

/* Appends s as a JSON string. */
void relattn_json_string(sqlite3_str *out, const char *s) {
  static const char hex[] = "0123456789abcdef";
  sqlite3_str_appendchar(out, 1, '"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      sqlite3_str_appendchar(out, 1, '\\');
      sqlite3_str_appendchar(out, 1, (char)c);
    } else if (c < 0x20) {
      sqlite3_str_appendf(out, "\\u00%c%c", hex[c >> 4], hex[c & 15]);
    } else {
      sqlite3_str_appendchar(out, 1, (char)c);
    }
  }
  sqlite3_str_appendchar(out, 1, '"');
}

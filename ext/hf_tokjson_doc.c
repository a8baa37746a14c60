/*
** hf_tokjson_doc.c: the values of a tokenizer.json, read through SQLite's
** JSON functions, for the two readers of the file (ext/hf_tokjson.c, the
** WordPiece one and the entry point; ext/hf_tokjson_unigram.c). No SQL
** function of its own.
*/
#include "hf_tokjson_doc.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

/* One value of the document and its json_type (hf_tokjson_doc.h). */
char *relattn_tj_get(tj_doc *d, const char *path, char type[16]) {
  sqlite3_stmt *st = NULL;
  char *out = NULL;
  type[0] = 0;
  if (d->rc != SQLITE_OK) return NULL;
  d->rc = sqlite3_prepare_v2(d->db, "SELECT json_type(?1, ?2), "
                                    "json_extract(?1, ?2)", -1, &st, NULL);
  if (d->rc != SQLITE_OK) return NULL;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(st, 0);
    const char *v = (const char *)sqlite3_column_text(st, 1);
    if (t) sqlite3_snprintf(16, type, "%s", t);
    if (v && (!t || strcmp(t, "null") != 0)) {
      out = sqlite3_mprintf("%s", v);
      if (!out) d->rc = SQLITE_NOMEM;
    }
  }
  d->rc = sqlite3_finalize(st);
  if (d->rc != SQLITE_OK) {
    sqlite3_free(out);
    out = NULL;
  }
  return out;
}

/* Steps st, bound and prepared on d, once: its first column's text ("" for
** NULL) as a new string, st finalized; NULL with d->rc set on an error. */
static char *first_text(tj_doc *d, sqlite3_stmt *st) {
  char *out = NULL;
  if (sqlite3_step(st) == SQLITE_ROW)
    out = sqlite3_mprintf("%s", sqlite3_column_text(st, 0)
                                    ? (const char *)sqlite3_column_text(st, 0)
                                    : "");
  d->rc = sqlite3_finalize(st);
  if (d->rc == SQLITE_OK && !out) d->rc = SQLITE_NOMEM;
  if (d->rc != SQLITE_OK) {
    sqlite3_free(out);
    out = NULL;
  }
  return out;
}

/* A component's name as messages give it: its type; a Sequence's members'
** types joined with '+' ("Lowercase+Nmt"); "null" when there is none. */
char *relattn_tj_name(tj_doc *d, const char *key, const char *members) {
  sqlite3_stmt *st = NULL;
  char *out = NULL, *path = sqlite3_mprintf("$.%s", key);
  char *list = sqlite3_mprintf("$.%s.%s", key, members);
  if (!path || !list) d->rc = SQLITE_NOMEM;
  if (d->rc == SQLITE_OK)
    d->rc = sqlite3_prepare_v2(
        d->db,
        "SELECT CASE coalesce(json_type(?1, ?2), 'null') WHEN 'null' THEN "
        "'null' WHEN 'object' THEN CASE json_extract(?1, ?2 || '.type') WHEN "
        "'Sequence' THEN (SELECT group_concat(coalesce(json_extract(value, "
        "'$.type'), '?'), '+') FROM json_each(?1, ?3)) ELSE "
        "coalesce(json_extract(?1, ?2 || '.type'), '?') END ELSE json_type(?1, "
        "?2) END",
        -1, &st, NULL);
  if (d->rc == SQLITE_OK) {
    sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, list, -1, SQLITE_STATIC);
    out = first_text(d, st);
  }
  sqlite3_free(path);
  sqlite3_free(list);
  return out;
}

/* A template as HF writes it in Python: "[CLS]:0 $A:0 [SEP]:0". */
char *relattn_tj_template(tj_doc *d, const char *path) {
  sqlite3_stmt *st = NULL;
  if (d->rc != SQLITE_OK) return NULL;
  d->rc = sqlite3_prepare_v2(
      d->db,
      "SELECT group_concat(CASE WHEN json_type(value, '$.SpecialToken') = "
      "'object' THEN json_extract(value, '$.SpecialToken.id') || ':' || "
      "json_extract(value, '$.SpecialToken.type_id') WHEN json_type(value, "
      "'$.Sequence') = 'object' THEN '$' || json_extract(value, "
      "'$.Sequence.id') || ':' || json_extract(value, '$.Sequence.type_id') "
      "ELSE '?' END, ' ') FROM json_each(?1, ?2)",
      -1, &st, NULL);
  if (d->rc != SQLITE_OK) return NULL;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, path, -1, SQLITE_STATIC);
  return first_text(d, st);
}

/* A flag of a component: 1, 0, or -1 for null; *bad when not a bool. */
int relattn_tj_bool(tj_doc *d, const char *path, int *bad) {
  char type[16], *v = relattn_tj_get(d, path, type);
  sqlite3_free(v);
  if (strcmp(type, "true") == 0) return 1;
  if (strcmp(type, "false") == 0) return 0;
  if (strcmp(type, "null") != 0 && type[0]) *bad = 1;
  return -1;
}

/*
** tokfile.c: the tokenizer's file of a model (tensor "tokenizer.<kind>",
** dtype U8): checked against the config and parsed (src/tokenizer.c), for
** relattn_import before it writes and for the store when it loads a model.
** No SQL function of its own; it reads a config's tokenizer.added_tokens
** through SQLite's JSON functions.
**
**   SELECT name FROM relattn_tensor
**    WHERE model = 'nli' AND name LIKE 'tokenizer.%';  -- tokenizer.sentencepiece
*/
#include "ext.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

int relattn_is_tokfile(const char *name) {
  return name && strncmp(name, "tokenizer.", 10) == 0;
}

char *relattn_tokfile_parse(const relattn_config *c, const char *name,
                            const char *dtype, const char *shape,
                            const void *data, size_t bytes, const char *what,
                            relattn_tokenizer **tok) {
  const char *kind = relattn_tokenizer_kind_name(c->tok_type);
  char ename[RELATTN_ECHO_BUF], want[48], err[256];
  int rc;
  *tok = NULL;
  relattn_echo(ename, name, -1);
  if (c->tok_type == RELATTN_TOK_BYTES)
    return sqlite3_mprintf("%s: tensor '%s' is a tokenizer file, but the "
                           "config's tokenizer.type is bytes, which has none",
                           what, ename);
  if (strcmp(name + 10, kind) != 0)
    return sqlite3_mprintf("%s: tensor '%s' does not match the config's "
                           "tokenizer.type (%s): expected 'tokenizer.%s'",
                           what, ename, kind, kind);
  if (!dtype || strcmp(dtype, "U8") != 0)
    return sqlite3_mprintf("%s: tensor '%s' must have dtype U8", what, ename);
  sqlite3_snprintf(sizeof want, want, "[%llu]", (sqlite3_uint64)bytes);
  if (shape && strcmp(shape, want) != 0)
    return sqlite3_mprintf("%s: tensor '%s' has shape %s; its %llu bytes "
                           "need %s", what, ename, shape,
                           (sqlite3_uint64)bytes, want);
  rc = relattn_tokenizer_new(tok, c, data, bytes, what, err, sizeof err);
  if (rc == RELATTN_ERR_FORMAT) {
    /* another kind's file (told by its structure) says so, rather than
    ** where it breaks as this kind's */
    int found = relattn_tokenizer_file_kind(data, bytes);
    int expect = c->tok_type == RELATTN_TOK_WORDPIECE ? RELATTN_TOKFILE_VOCAB
                                                      : RELATTN_TOKFILE_SPM;
    if (found != RELATTN_TOKFILE_UNKNOWN && found != expect)
      return sqlite3_mprintf("%s: tokenizer.%s is %s, not the %s the "
                             "config's tokenizer.type (%s) needs",
                             what, kind, relattn_tokenizer_file_name(found),
                             expect == RELATTN_TOKFILE_VOCAB
                                 ? "vocab.txt"
                                 : "SentencePiece model",
                             kind);
  }
  if (rc != RELATTN_OK) return sqlite3_mprintf("%s", err);
  return NULL;
}

char *relattn_tokfile_finish(relattn_model *m, const char *what) {
  char err[256];
  if (m->tok) return NULL;
  if (m->cfg.tok_type != RELATTN_TOK_BYTES)
    return sqlite3_mprintf("%s: tensor 'tokenizer.%s' is missing (the "
                           "config's tokenizer.type needs its file)",
                           what, relattn_tokenizer_kind_name(m->cfg.tok_type));
  if (relattn_tokenizer_new(&m->tok, &m->cfg, NULL, 0, what, err, sizeof err))
    return sqlite3_mprintf("%s", err);
  return NULL;
}

/* tokenizer.added_tokens: {"128000": "[MASK]"} or, as Hugging Face's
** added_tokens_decoder writes it, {"128000": {"content": "[MASK]",
** "lstrip": false, "rstrip": false, ...}} (other keys ignored). */
char *relattn_tokfile_special(sqlite3 *db, const char *config,
                              const relattn_config *c, relattn_tokenizer *tok,
                              const char *what) {
  static const char *const keys[] = {"tokenizer.bos", "tokenizer.eos",
                                     "tokenizer.pad", "tokenizer.append",
                                     "tokenizer.sep", "tokenizer.mask",
                                     "tokenizer.unk"};
  const int ids[] = {c->bos, c->eos, c->pad, c->append, c->sep, c->mask,
                     c->unk};
  relattn_special_token *sp = NULL;
  char **names = NULL, *zErr = NULL, err[256];
  sqlite3_stmt *st = NULL;
  int n = 0, cap = 7, k, rc;
  if (!c->split_special) return NULL;
  if (sqlite3_prepare_v2(db,
                         "SELECT key, type, CASE type WHEN 'object' THEN "
                         "json_type(value, '$.content') END, CASE type WHEN "
                         "'object' THEN json_extract(value, '$.content') "
                         "ELSE value END, CASE type WHEN 'object' THEN "
                         "json_type(value, '$.lstrip') END, CASE type WHEN "
                         "'object' THEN json_type(value, '$.rstrip') END, "
                         "count(*) OVER (), CASE type WHEN 'object' THEN "
                         "json_extract(?1, fullkey || '.content', fullkey || "
                         "'.content') ELSE json_extract(?1, fullkey, fullkey) "
                         "END FROM json_each(?1, '$.tokenizer.added_tokens')",
                         -1, &st, NULL) != SQLITE_OK)
    return relattn_sql_errmsg(db, what, sqlite3_errcode(db));
  sqlite3_bind_text(st, 1, config, -1, SQLITE_STATIC);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *type = (const char *)sqlite3_column_text(st, 1);
    const char *ctype = (const char *)sqlite3_column_text(st, 2);
    const char *text = (const char *)sqlite3_column_text(st, 3);
    const char *flag[2];
    char e[RELATTN_ECHO_BUF];
    long id = 0;
    const char *p = key ? key : "";
    flag[0] = (const char *)sqlite3_column_text(st, 4);
    flag[1] = (const char *)sqlite3_column_text(st, 5);
    if (!sp) {
      cap += sqlite3_column_int(st, 6);
      sp = sqlite3_malloc64(sizeof *sp * (sqlite3_uint64)cap);
      names = sqlite3_malloc64(sizeof *names * (sqlite3_uint64)cap);
      if (!sp || !names) goto nomem;
      memset(names, 0, sizeof *names * (size_t)cap);
      for (k = 0; k < 7; k++) /* the roles first: added_tokens texts win */
        if (ids[k] >= 0) {
          memset(&sp[n], 0, sizeof sp[n]);
          sp[n].id = ids[k], sp[n].key = keys[k];
          n++;
        }
    }
    for (; *p >= '0' && *p <= '9' && id < c->vocab_size; p++)
      id = 10 * id + (*p - '0');
    if (!key || !*key || *p || id >= c->vocab_size) {
      zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' has key "
                             "'%s', not a token id (0 to %d)",
                             what, relattn_echo(e, key, -1),
                             c->vocab_size - 1);
      goto done;
    }
    if (!type || (strcmp(type, "text") != 0 &&
                  (strcmp(type, "object") != 0 || !ctype ||
                   strcmp(ctype, "text") != 0)) ||
        !text || !*text) {
      zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' entry "
                             "'%s' must be a non-empty string, or an object "
                             "with a non-empty string 'content'",
                             what, relattn_echo(e, key, -1));
      goto done;
    }
    if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 7))) {
      zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' entry "
                             "'%s'" RELATTN_NUL_MSG,
                             what, relattn_echo(e, key, -1));
      goto done;
    }
    for (k = 0; k < 2; k++)
      if (flag[k] && strcmp(flag[k], "true") != 0 &&
          strcmp(flag[k], "false") != 0 && strcmp(flag[k], "null") != 0) {
        zErr = sqlite3_mprintf("%s: config: 'tokenizer.added_tokens' entry "
                               "'%s': '%s' must be true or false, not %s",
                               what, relattn_echo(e, key, -1),
                               k ? "rstrip" : "lstrip", flag[k]);
        goto done;
      }
    names[n] = sqlite3_mprintf("%s", text);
    if (!names[n]) goto nomem;
    memset(&sp[n], 0, sizeof sp[n]);
    sp[n].id = (int32_t)id;
    sp[n].text = names[n];
    sp[n].lstrip = flag[0] && strcmp(flag[0], "true") == 0;
    sp[n].rstrip = flag[1] && strcmp(flag[1], "true") == 0;
    sp[n].key = "tokenizer.added_tokens";
    n++;
  }
  if (rc != SQLITE_DONE) {
    zErr = relattn_sql_errmsg(db, what, sqlite3_errcode(db));
    goto done;
  }
  if (!sp) { /* no added_tokens: the roles alone */
    sp = sqlite3_malloc64(sizeof *sp * 7);
    if (!sp) goto nomem;
    for (k = 0; k < 7; k++)
      if (ids[k] >= 0) {
        memset(&sp[n], 0, sizeof sp[n]);
        sp[n].id = ids[k], sp[n].key = keys[k];
        n++;
      }
  }
  rc = relattn_tokenizer_set_special(tok, sp, n, what, err, sizeof err);
  if (rc == RELATTN_ERR_NOMEM) goto nomem;
  if (rc != RELATTN_OK) zErr = sqlite3_mprintf("%s", err);
  goto done;
nomem:
  sqlite3_free(zErr);
  zErr = sqlite3_mprintf("%s: out of memory", what);
done:
  sqlite3_finalize(st);
  if (names)
    for (k = 0; k < cap; k++) sqlite3_free(names[k]);
  sqlite3_free(names);
  sqlite3_free(sp);
  return zErr;
}

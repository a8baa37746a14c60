/*
** import.c: relattn_import, a checkpoint's files into a model of the
** database: a safetensors file with its native config, or a Hugging Face
** checkpoint (config.json, the tokenizer's file and tokenizer_config.json).
**
**   SELECT relattn_import('tiny', readfile('tiny.safetensors'));   -- 75
**   SELECT relattn_import('tiny', readfile('w.safetensors'), readfile('c.json'));
**   SELECT relattn_import('nli', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('spm.model'),
**                         readfile('tokenizer_config.json'));
**   SELECT relattn_import('big', readfile('model.safetensors.index.json'),
**                         readfile('config.json'), readfile('vocab.txt'), NULL,
**                         readfile('model-00001-of-00002.safetensors'),
**                         readfile('model-00002-of-00002.safetensors'));
**   SELECT relattn_import('st', readfile('st/model.safetensors'),
**                         readfile('st/config.json'), readfile('st/vocab.txt'),
**                         NULL, 'modules.json', readfile('st/modules.json'),
**                         '1_Pooling/config.json',
**                         readfile('st/1_Pooling/config.json'));
**
** HOW IT WORKS
** One direction, and nothing written until everything is checked. The
** readers turn the files into a plan: the safetensors header, or each
** shard's header and the index's weight_map that says which tensors they
** hold together (ext/import_read.c); a Hugging Face checkpoint mapped onto
** native names and a native config (ext/hf.c), and a sentence-transformers
** directory's modules after it (ext/hf_st.c: the config's "sentence" key,
** the Dense modules' files read like any other); the config
** decoded (ext/config.c) and checked (src/model.c); the set of tensors
** and their shapes, no weight NaN or Inf; the tokenizer's file parsed
** (ext/tokfile.c). Then the store writes the plan, all or nothing
** (relattn_store_write, ext/store.c).
*/
#include "import_read.h"

#include <stdint.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

static void importFree(relattn_import_state *s) {
  int i;
  for (i = 0; i < s->n; i++) {
    sqlite3_free((char *)s->t[i].name);
    if (s->own && i < s->n_hf) sqlite3_free(s->own[i]);
    if (s->hf_name && i < s->n_hf) sqlite3_free(s->hf_name[i]);
  }
  sqlite3_free(s->hf_name);
  sqlite3_free(s->t);
  sqlite3_free(s->config);
  sqlite3_free(s->tok_config);
  sqlite3_free(s->raw);
  sqlite3_free(s->skip);
  sqlite3_free(s->own);
  sqlite3_free(s->tok_own);
  sqlite3_free(s->base);
  sqlite3_free(s->shard);
}

/* Tensor i's name as the file has it (for messages). */
static const char *fileName(const relattn_import_state *s, int i) {
  return s->hf_name && s->hf_name[i] ? s->hf_name[i] : s->t[i].name;
}

/* "tensor 'x' is missing" for spec i of cfg, with its name in a Hugging
** Face file. */
static char *missingMsg(const relattn_import_state *s,
                        const relattn_config *cfg, int i, const char *fn) {
  relattn_tensor_spec spec;
  char *hf;
  if (!s->hf_name) return relattn_missing_tensor_msg(cfg, i, fn);
  relattn_model_spec(cfg, i, &spec);
  hf = relattn_hf_name_of(&s->hf, spec.name);
  if (!hf) return relattn_missing_tensor_msg(cfg, i, fn);
  {
    char *msg = sqlite3_mprintf("%s: tensor '%s' is missing (the config "
                                "needs it, as '%s')", fn, hf, spec.name);
    sqlite3_free(hf);
    return msg;
  }
}

/* Tensor i's data: in the file, or rewritten by the mapping. */
static const uint8_t *tensorData(const relattn_import_state *s, int i) {
  return s->own && s->own[i] ? s->own[i] : s->base[i] + s->t[i].begin;
}

/* A TEXT or BLOB argument as a NUL-terminated string (sqlite3_malloc'd). */
static char *textOf(sqlite3_value *v) {
  int n = sqlite3_value_bytes(v);
  const void *p = sqlite3_value_type(v) == SQLITE_BLOB
                      ? sqlite3_value_blob(v)
                      : (const void *)sqlite3_value_text(v);
  char *s = sqlite3_malloc64((sqlite3_uint64)n + 1);
  if (!s) return NULL;
  if (n && p) memcpy(s, p, (size_t)n);
  s[n] = 0;
  return s;
}

/* A sentence-transformers directory's modules (ext/hf_st.c): the native
** config gets its "sentence" key, and each Dense module's
** model.safetensors is read into s, linear.weight and linear.bias named
** sentence.dense.{k}.weight and .bias (their file's names kept for
** messages). */
static int readSentence(sqlite3 *db, relattn_import_state *s,
                        relattn_st_file *named, int n_named, char **pzErr) {
  static const char fn[] = "relattn_import";
  relattn_st_dense dense[RELATTN_ST_MAX_DENSE];
  char *native = NULL;
  int n_dense = 0, k, i, rc;
  rc = relattn_hf_st_read(db, named, n_named, s->config, &native, dense,
                          &n_dense, pzErr);
  if (rc != SQLITE_OK) return rc;
  sqlite3_free(s->config);
  s->config = native;
  for (k = 0; k < n_dense; k++) {
    char what[96], e[RELATTN_ECHO_BUF];
    int n0 = s->n, has_w = 0;
    sqlite3_snprintf(sizeof what, what, "%s: %s/model.safetensors", fn,
                     dense[k].path);
    rc = relattn_import_read_file(db, s, dense[k].file, dense[k].n, 0, what,
                                  what, 0, pzErr);
    if (rc != SQLITE_OK) return rc;
    /* the arrays the Hugging Face mapping made, for the new tensors */
    {
      unsigned char *skip = sqlite3_realloc64(s->skip, (sqlite3_uint64)s->n + 1);
      uint8_t **own;
      char **names;
      if (!skip) return SQLITE_NOMEM;
      s->skip = skip;
      own = sqlite3_realloc64(s->own, sizeof *own * ((sqlite3_uint64)s->n + 1));
      if (!own) return SQLITE_NOMEM;
      s->own = own;
      names = sqlite3_realloc64(s->hf_name,
                                sizeof *names * ((sqlite3_uint64)s->n + 1));
      if (!names) return SQLITE_NOMEM;
      s->hf_name = names;
      for (i = n0; i < s->n; i++) s->skip[i] = 0, s->own[i] = NULL,
                                  s->hf_name[i] = NULL;
      s->n_hf = s->n;
    }
    for (i = n0; i < s->n; i++) {
      const char *part = strcmp(s->t[i].name, "linear.weight") == 0 ? "weight"
                         : strcmp(s->t[i].name, "linear.bias") == 0 ? "bias"
                                                                    : NULL;
      char *native_name;
      if (!part) {
        *pzErr = sqlite3_mprintf("%s: tensor '%s' is not a Dense module's "
                                 "(linear.weight, linear.bias)",
                                 what, relattn_echo(e, s->t[i].name, -1));
        return SQLITE_ERROR;
      }
      has_w |= part[0] == 'w';
      native_name = sqlite3_mprintf("sentence.dense.%d.%s", k, part);
      s->hf_name[i] = sqlite3_mprintf("%s/%s", dense[k].path, s->t[i].name);
      if (!native_name || !s->hf_name[i]) {
        sqlite3_free(native_name);
        return SQLITE_NOMEM;
      }
      sqlite3_free((char *)s->t[i].name);
      s->t[i].name = native_name;
    }
    if (!has_w) {
      *pzErr = sqlite3_mprintf("%s has no tensor 'linear.weight'", what);
      return SQLITE_ERROR;
    }
  }
  return SQLITE_OK;
}

void relattn_import_func(sqlite3_context *ctx, int argc,
                        sqlite3_value **argv) {
  static const char fn[] = "relattn_import";
  sqlite3 *db = sqlite3_context_db_handle(ctx);
  relattn_import_state s;
  relattn_config cfg;
  const char *model;
  char err[512], *zErr = NULL, *index = NULL;
  int *order = NULL, n_need, i, rc, fail_code = SQLITE_ERROR;
  relattn_plan plan;
  const uint8_t *tok = NULL; /* the tokenizer's file, when there is one */
  size_t tok_n = 0;
  int tok_i = -1;            /* its tensor in the file, or -1 */
  relattn_tokenizer *parsed = NULL;
  const char *tok_config = NULL; /* tokenizer_config.json, HF only */
  int hf = 0;                /* config_json is HF's config.json */
  /* arguments 6 and on: (name, file) pairs of a sentence-transformers
  ** directory, and a safetensors index's shards */
  relattn_st_file *named = NULL;
  int n_named = 0, *shard_arg = NULL, n_shards = 0, k;

  memset(&s, 0, sizeof s);
  memset(&plan, 0, sizeof plan);
  if (argc < 2) {
    relattn_result_errorf(ctx, "%s: takes model, safetensors_blob, then "
                          "optionally config_json, tokenizer_blob, "
                          "tokenizer_config_json, and a safetensors index's "
                          "shards or a sentence-transformers directory's "
                          "(name, file) pairs", fn);
    return;
  }
  if (sqlite3_value_type(argv[0]) != SQLITE_TEXT ||
      sqlite3_value_bytes(argv[0]) == 0) {
    relattn_result_errorf(ctx, "%s: model must be a non-empty name (TEXT)", fn);
    return;
  }
  model = (const char *)sqlite3_value_text(argv[0]);
  if (argc > 5) {
    /* a TEXT argument with one after it names that file (a sentence-
    ** transformers directory's); any other is a shard */
    named = sqlite3_malloc64(sizeof *named * (sqlite3_uint64)argc);
    shard_arg = sqlite3_malloc64(sizeof *shard_arg * (sqlite3_uint64)argc);
    if (!named || !shard_arg) {
      sqlite3_free(named);
      sqlite3_free(shard_arg);
      sqlite3_result_error_nomem(ctx);
      return;
    }
    for (i = 5; i < argc; i++) {
      if (sqlite3_value_type(argv[i]) == SQLITE_TEXT && i + 1 < argc) {
        relattn_st_file *f = &named[n_named];
        int k;
        char e[RELATTN_ECHO_BUF];
        f->name = (const char *)sqlite3_value_text(argv[i]);
        for (k = 0; k < n_named; k++)
          if (strcmp(named[k].name, f->name) == 0) {
            relattn_result_errorf(ctx, "%s: file '%s' is given twice "
                                  "(arguments %d and %d)", fn,
                                  relattn_echo(e, f->name, -1),
                                  named[k].arg, i + 1);
            goto argfail;
          }
        if (sqlite3_value_type(argv[i + 1]) != SQLITE_BLOB &&
            sqlite3_value_type(argv[i + 1]) != SQLITE_TEXT) {
          relattn_result_errorf(ctx, "%s: file '%s' (argument %d) %s", fn,
                                relattn_echo(e, f->name, -1), i + 2,
                                sqlite3_value_type(argv[i + 1]) == SQLITE_NULL
                                    ? "is NULL (file not found?)"
                                    : "must be a BLOB");
          goto argfail;
        }
        f->data = sqlite3_value_type(argv[i + 1]) == SQLITE_BLOB
                      ? sqlite3_value_blob(argv[i + 1])
                      : (const uint8_t *)sqlite3_value_text(argv[i + 1]);
        f->n = (size_t)sqlite3_value_bytes(argv[i + 1]);
        if (!f->data) f->data = (const uint8_t *)"";
        f->arg = i + 1;
        f->used = 0;
        n_named++;
        i++;
      } else {
        shard_arg[n_shards++] = i;
      }
    }
    if (0) {
    argfail:
      sqlite3_free(index);
      sqlite3_free(named);
      sqlite3_free(shard_arg);
      return;
    }
  }
  if (sqlite3_value_type(argv[1]) == SQLITE_NULL) {
    /* what the shell's readfile() gives for a file it cannot read */
    relattn_result_errorf(ctx, "%s: safetensors_blob is NULL (file not "
                          "found?)", fn);
    goto argfail;
  }
  if (relattn_import_is_index(argv[1])) {
    /* model.safetensors.index.json: its shards follow */
    if (n_shards == 0) {
      relattn_result_errorf(ctx, "%s: safetensors_blob is a safetensors "
                            "index; pass its shards' files after "
                            "tokenizer_config_json", fn);
      goto argfail;
    }
    index = textOf(argv[1]);
    if (!index) {
      sqlite3_result_error_nomem(ctx);
      goto argfail;
    }
  } else if (sqlite3_value_type(argv[1]) != SQLITE_BLOB) {
    relattn_result_errorf(ctx, "%s: safetensors_blob must be a BLOB", fn);
    goto argfail;
  } else if (n_shards > 0) {
    relattn_result_errorf(ctx, "%s: shards (argument 6 and on) go with a "
                          "safetensors index as safetensors_blob", fn);
    goto argfail;
  }
  if (argc > 2 && sqlite3_value_type(argv[2]) != SQLITE_NULL) {
    if (sqlite3_value_type(argv[2]) != SQLITE_TEXT &&
        sqlite3_value_type(argv[2]) != SQLITE_BLOB) {
      zErr = sqlite3_mprintf("%s: config_json must be TEXT (JSON) or NULL",
                             fn);
      goto fail;
    }
    /* TEXT, or its bytes as readfile('config.json') gives them */
    s.config = textOf(argv[2]);
    if (!s.config) goto nomem;
  }
  if (argc > 3 && sqlite3_value_type(argv[3]) != SQLITE_NULL) {
    if (sqlite3_value_type(argv[3]) != SQLITE_BLOB) {
      zErr = sqlite3_mprintf("%s: tokenizer_blob must be a BLOB or NULL",
                             fn);
      goto fail;
    }
    tok = sqlite3_value_blob(argv[3]);
    tok_n = (size_t)sqlite3_value_bytes(argv[3]);
    if (!tok) tok = (const uint8_t *)""; /* an empty BLOB */
  }
  hf = s.config && relattn_hf_is_config(db, s.config);
  if (argc > 4 && sqlite3_value_type(argv[4]) != SQLITE_NULL) {
    if (sqlite3_value_type(argv[4]) != SQLITE_TEXT &&
        sqlite3_value_type(argv[4]) != SQLITE_BLOB) {
      zErr = sqlite3_mprintf("%s: tokenizer_config_json must be TEXT "
                             "(JSON) or NULL", fn);
      goto fail;
    }
    if (!hf) {
      zErr = sqlite3_mprintf("%s: tokenizer_config_json goes with a "
                             "Hugging Face config.json (one with model_type) "
                             "as config_json", fn);
      goto fail;
    }
    tok_config = s.tok_config = textOf(argv[4]);
    if (!tok_config) goto nomem;
  }
  if (!index) {
    rc = relattn_import_read_file(db, &s, sqlite3_value_blob(argv[1]),
                                  (size_t)sqlite3_value_bytes(argv[1]), 0,
                                  "relattn_import: safetensors_blob", fn, hf,
                                  &zErr);
  } else {
    rc = SQLITE_OK;
    for (k = 0; k < n_shards && rc == SQLITE_OK; k++) {
      char what[64];
      i = shard_arg[k];
      sqlite3_snprintf(sizeof what, what, "%s: shard %d", fn, k + 1);
      if (sqlite3_value_type(argv[i]) != SQLITE_BLOB) {
        zErr = sqlite3_mprintf("%s (argument %d) %s", what, i + 1,
                               sqlite3_value_type(argv[i]) == SQLITE_NULL
                                   ? "is NULL (file not found?)"
                                   : "must be a BLOB");
        goto fail;
      }
      rc = relattn_import_read_file(db, &s, sqlite3_value_blob(argv[i]),
                                    (size_t)sqlite3_value_bytes(argv[i]),
                                    k + 1, what, what, hf, &zErr);
    }
    if (rc == SQLITE_OK)
      rc = relattn_import_check_index(db, index, &s, &zErr);
  }
  if (rc == SQLITE_NOMEM && !zErr) goto nomem;
  if (rc != SQLITE_OK) {
    fail_code = rc;
    goto fail;
  }
  if (!s.config) {
    zErr = sqlite3_mprintf("%s: no config: pass config_json, or put it in "
                           "the file's __metadata__[\"relattn.config\"]", fn);
    goto fail;
  }
  if (hf) {
    /* Hugging Face's names and config.json, mapped onto the native ones */
    char *native = NULL;
    s.skip = sqlite3_malloc64((sqlite3_uint64)s.n + 1);
    s.own = sqlite3_malloc64(sizeof *s.own * ((sqlite3_uint64)s.n + 1));
    s.hf_name = sqlite3_malloc64(sizeof *s.hf_name * ((sqlite3_uint64)s.n + 1));
    if (!s.skip || !s.own || !s.hf_name) goto nomem;
    s.n_hf = s.n;
    memset(s.skip, 0, (size_t)s.n + 1);
    memset(s.own, 0, sizeof *s.own * ((size_t)s.n + 1));
    memset(s.hf_name, 0, sizeof *s.hf_name * ((size_t)s.n + 1));
    if ((rc = relattn_hf_map(db, s.config, tok_config, s.t, s.n, s.raw, s.base,
                             &tok, &tok_n, &s.tok_own, s.skip, s.own,
                             s.hf_name, &s.hf, &native, &zErr)) !=
        SQLITE_OK) {
      fail_code = rc;
      goto fail;
    }
    sqlite3_free(s.config);
    s.config = native;
  }
  if (n_named) {
    /* a sentence-transformers directory: its modules after the checkpoint */
    if (!hf) {
      zErr = sqlite3_mprintf("%s: a sentence-transformers directory's files "
                             "(argument 6 and on) go with a Hugging Face "
                             "config.json (one with model_type) as "
                             "config_json", fn);
      goto fail;
    }
    if ((rc = readSentence(db, &s, named, n_named, &zErr)) != SQLITE_OK) {
      fail_code = rc;
      goto fail;
    }
  }
  if ((rc = relattn_config_decode(db, s.config, &cfg,
                                  "relattn_import: config", &zErr)) !=
      SQLITE_OK) {
    fail_code = rc;
    goto fail;
  }
  n_need = relattn_model_n_tensors(&cfg);
  if (n_need > s.n) {
    /* Before any work sized by the config (n_layers alone may ask for
    ** hundreds of millions of tensors): the file lacks one. */
    const char **names = sqlite3_malloc64(sizeof *names * ((sqlite3_uint64)s.n + 1));
    if (!names) goto nomem;
    for (i = 0; i < s.n; i++) names[i] = s.t[i].name;
    i = relattn_missing_tensor(&cfg, names, s.n);
    sqlite3_free(names);
    if (i == -2) goto nomem;
    zErr = missingMsg(&s, &cfg, i, fn);
    goto fail;
  }
  {
    size_t bytes;
    if (relattn_model_bytes(&cfg, &bytes, fn, err, sizeof err)) {
      zErr = sqlite3_mprintf("%s", err);
      goto fail;
    }
  }

  /* the set of tensors: each expected once, with its exact shape */
  order = sqlite3_malloc64((sqlite3_uint64)n_need * sizeof *order);
  if (!order) goto nomem;
  for (i = 0; i < n_need; i++) order[i] = -1;
  for (i = 0; i < s.n; i++) {
    const relattn_st_tensor *t = &s.t[i];
    relattn_tensor_spec spec;
    char have[96], want[96];
    int k = relattn_model_index(&cfg, t->name), d, same, kind;
    char ename[RELATTN_ECHO_BUF]; /* input bytes, for messages */
    size_t bad;
    if (s.skip && s.skip[i]) continue; /* left out by the HF mapping */
    relattn_echo(ename, fileName(&s, i), -1);
    if (relattn_interrupted(db)) goto interrupted; /* ~1 s a GB of checks */
    if (relattn_is_tokfile(t->name)) {
      if (tok) {
        zErr = sqlite3_mprintf("%s: tokenizer_blob is given, and the file "
                               "has tensor '%s' too", fn, ename);
        goto fail;
      }
      if (t->dtype != RELATTN_U8 || t->ndim != 1) {
        zErr = sqlite3_mprintf("%s: tensor '%s' must have dtype U8 and one "
                               "dimension", fn, ename);
        goto fail;
      }
      tok_i = i;
      continue;
    }
    if (k < 0) {
      zErr = sqlite3_mprintf("%s: unexpected tensor '%s' (not part of the "
                             "config)", fn, ename);
      goto fail;
    }
    kind = relattn_model_slot_kind(&cfg, k);
    if (!relattn_slot_dtype_ok(kind, t->dtype)) {
      zErr = sqlite3_mprintf("%s: tensor '%s' has dtype '%s'; expected %s", fn,
                             ename, relattn_dtype_name(t->dtype),
                             relattn_slot_dtypes(kind));
      goto fail;
    }
    if (order[k] >= 0) {
      zErr = sqlite3_mprintf("%s: tensor '%s' appears twice in the header", fn,
                             ename);
      goto fail;
    }
    relattn_model_spec(&cfg, k, &spec);
    same = spec.ndim == t->ndim;
    for (d = 0; same && d < t->ndim; d++) same = spec.shape[d] == t->shape[d];
    if (!same) {
      relattn_shape_json(t->shape, t->ndim, have, sizeof have);
      relattn_shape_json(spec.shape, spec.ndim, want, sizeof want);
      zErr = sqlite3_mprintf("%s: tensor '%s' has shape %s; the config needs "
                             "%s", fn, ename, have, want);
      goto fail;
    }
    bad = relattn_find_nonfinite(tensorData(&s, i), t->dtype, t->numel);
    if (bad < t->numel) {
      zErr = sqlite3_mprintf("%s: tensor '%s' has %s at element %llu", fn,
                             ename,
                             t->dtype == RELATTN_I8 ? "-128" : "NaN or Inf",
                             (sqlite3_uint64)bad);
      goto fail;
    }
    order[k] = i;
  }
  for (i = 0; i < n_need; i++)
    if (order[i] < 0) {
      zErr = missingMsg(&s, &cfg, i, fn);
      goto fail;
    }
  /* the tokenizer's file: the kind the config names, parsed to check it */
  if (tok_i >= 0) {
    tok = s.base[tok_i] + s.t[tok_i].begin;
    tok_n = (size_t)(s.t[tok_i].end - s.t[tok_i].begin);
  }
  if (tok || cfg.tok_type != RELATTN_TOK_BYTES || cfg.split_special) {
    char name[32];
    sqlite3_snprintf(sizeof name, name, "tokenizer.%s",
                     relattn_tokenizer_kind_name(cfg.tok_type));
    if (!tok && cfg.tok_type != RELATTN_TOK_BYTES) {
      zErr = sqlite3_mprintf("%s: the config's tokenizer.type (%s) needs its "
                             "file: pass tokenizer_blob, or put tensor '%s' "
                             "(dtype U8) in the file",
                             fn, name + 10, name);
      goto fail;
    }
    if (tok_i >= 0) {
      char ename[RELATTN_ECHO_BUF];
      strcpy(name, relattn_echo(ename, s.t[tok_i].name, -1));
    }
    if (tok) {
      zErr = relattn_tokfile_parse(&cfg, name, "U8", NULL, tok, tok_n, fn,
                                   &parsed);
    } else if (relattn_tokenizer_new(&parsed, &cfg, NULL, 0, fn, err,
                                     sizeof err) != RELATTN_OK) {
      zErr = sqlite3_mprintf("%s", err);
    }
    if (!zErr) zErr = relattn_tokfile_special(db, s.config, &cfg, parsed, fn);
    relattn_tokenizer_free(parsed);
    parsed = NULL;
    if (zErr) goto fail;
  }

  /* everything checked: the plan, for the store to write */
  plan.t = sqlite3_malloc64(sizeof *plan.t * ((sqlite3_uint64)n_need + 1));
  if (!plan.t) goto nomem;
  for (i = 0; i < n_need; i++) {
    const relattn_st_tensor *t = &s.t[order[i]];
    plan.t[i].dtype = t->dtype;
    plan.t[i].data = tensorData(&s, order[i]); /* in the argument */
    plan.t[i].bytes = (sqlite3_uint64)(t->end - t->begin);
  }
  plan.config = s.config;
  plan.cfg = &cfg;
  plan.tok = tok;
  plan.tok_n = tok_n;
  if ((rc = relattn_store_write(db, model, &plan, &zErr)) != SQLITE_OK) {
    fail_code = rc;
    goto fail;
  }
  sqlite3_result_int(ctx, n_need + (tok != NULL));
  sqlite3_free(order);
  sqlite3_free(named);
  sqlite3_free(shard_arg);
  sqlite3_free(plan.t);
  sqlite3_free(index);
  importFree(&s);
  return;

nomem:
  sqlite3_free(order);
  sqlite3_free(named);
  sqlite3_free(shard_arg);
  sqlite3_free(plan.t);
  sqlite3_free(index);
  importFree(&s);
  sqlite3_free(zErr);
  sqlite3_result_error_nomem(ctx);
  return;
interrupted:
  zErr = sqlite3_mprintf("%s: interrupted", fn);
  fail_code = SQLITE_INTERRUPT;
fail:
  if (fail_code == SQLITE_INTERRUPT) {
    /* one wording, whichever step saw it ("config: interrupted" too) */
    sqlite3_free(zErr);
    zErr = relattn_sql_errmsg(db, fn, SQLITE_INTERRUPT);
  }
  relattn_result_error(ctx, fail_code, zErr); /* NULL: out of memory */
  sqlite3_free(order);
  sqlite3_free(named);
  sqlite3_free(shard_arg);
  sqlite3_free(plan.t);
  sqlite3_free(index);
  importFree(&s);
}

/*
** hf_tokjson.c: a Hugging Face tokenizer.json (the fast tokenizer's file)
** as the tokenizer_blob of relattn_import, read through SQLite's JSON
** functions and mapped onto the WordPiece kind where the two give the
** same ids: what transformers' BertConverter writes; a Unigram one is
** handed to ext/hf_tokjson_unigram.c. No SQL function of its own;
** ext/hf.c calls it when the blob is a JSON object.
**
**   SELECT relattn_import('bert', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('tokenizer.json'));
**
** HOW IT WORKS
**   The components are checked one by one against what the WordPiece kind
**   does (docs/reference.md lists them); the first that differs is refused
**   by its name. What holds becomes a vocab.txt (model.vocab in id order,
**   which must run 0, 1, ... without a gap), the BertNormalizer's options
**   (do_lower_case, strip_accents, tokenize_chinese_chars) and the texts of
**   the template's [CLS] and [SEP] and of the model's unk_token. The model
**   stores that vocab.txt: nothing of the JSON is kept.
*/
#include "hf_tokjson_doc.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

/* The specials the WordPiece kind splits out of a text itself
** (src/tok_wordpiece.c); a BertConverter file lists the same ones among its
** added_tokens. */
static const char *const wpSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]",
                                         "[MASK]"};

/* The id of token text in model.vocab, or -1. */
static int tjVocabId(tj_doc *d, const char *text) {
  sqlite3_stmt *st = NULL;
  int id = -1;
  if (d->rc != SQLITE_OK || !text) return -1;
  d->rc = sqlite3_prepare_v2(d->db,
                             "SELECT value FROM json_each(?1, '$.model.vocab') "
                             "WHERE key = ?2 AND type = 'integer'",
                             -1, &st, NULL);
  if (d->rc != SQLITE_OK) return -1;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
  if (sqlite3_step(st) == SQLITE_ROW) id = sqlite3_column_int(st, 0);
  d->rc = sqlite3_finalize(st);
  return id;
}

/* model.vocab as a vocab.txt: its tokens in id order, one a line. */
static int tjVocab(tj_doc *d, relattn_hf_tokjson *out, char **pzErr) {
  sqlite3_stmt *st = NULL;
  sqlite3_str *o;
  sqlite3_int64 want = 0;
  int rc;
  rc = sqlite3_prepare_v2(d->db,
                          "SELECT key, type, value FROM json_each(?1, "
                          "'$.model.vocab') ORDER BY type = 'integer', value",
                          -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  o = sqlite3_str_new(d->db);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *key = (const char *)sqlite3_column_text(st, 0);
    const char *type = (const char *)sqlite3_column_text(st, 1);
    char e[RELATTN_ECHO_BUF];
    relattn_echo(e, key, -1);
    if (!type || strcmp(type, "integer") != 0) {
      *pzErr = sqlite3_mprintf("%s: model.vocab: token '%s' has no integer "
                               "id", TJ, e);
      break;
    }
    if (sqlite3_column_int64(st, 2) != want) {
      *pzErr = sqlite3_mprintf(
          "%s: model.vocab has no token with id %lld (its ids must run from "
          "0 without a gap)", TJ, want);
      break;
    }
    if (key && (strchr(key, '\n') || strchr(key, '\r') ||
                relattn_json_has_nul(key))) {
      *pzErr = sqlite3_mprintf("%s: model.vocab: token %lld ('%s') holds a "
                               "line break or U+0000, which a vocab.txt "
                               "cannot", TJ, want, e);
      break;
    }
    sqlite3_str_appendf(o, "%s\n", key ? key : "");
    want++;
  }
  if (!*pzErr && rc == SQLITE_DONE && want == 0)
    *pzErr = sqlite3_mprintf("%s: model.vocab is empty or not an object", TJ);
  sqlite3_finalize(st);
  if (sqlite3_str_errcode(o)) rc = SQLITE_NOMEM;
  else if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  out->vocab_n = (size_t)sqlite3_str_length(o);
  out->vocab = (uint8_t *)sqlite3_str_finish(o);
  if (rc == SQLITE_OK && !out->vocab) rc = SQLITE_NOMEM;
  return rc;
}

/* added_tokens: each one of the specials the WordPiece kind splits out
** itself, at its model.vocab id, special, matched as written (normalized,
** lstrip, rstrip, single_word false); and every such special of the
** vocabulary among them. */
static int tjAdded(tj_doc *d, char **pzErr) {
  static const char *const flags[] = {"lstrip", "rstrip", "single_word",
                                      "normalized"};
  sqlite3_stmt *st = NULL;
  int seen[5] = {0}, rc, k;
  rc = sqlite3_prepare_v2(
      d->db,
      "SELECT json_extract(value, '$.content'), json_extract(value, '$.id'), "
      "json_type(value, '$.special'), json_type(value, '$.lstrip'), "
      "json_type(value, '$.rstrip'), json_type(value, '$.single_word'), "
      "json_type(value, '$.normalized') FROM json_each(?1, '$.added_tokens')",
      -1, &st, NULL);
  if (rc != SQLITE_OK) return rc;
  sqlite3_bind_text(st, 1, d->json, d->n, SQLITE_STATIC);
  while (!*pzErr && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *text = (const char *)sqlite3_column_text(st, 0);
    char e[RELATTN_ECHO_BUF];
    int id = sqlite3_column_int(st, 1), vid;
    relattn_echo(e, text, -1);
    for (k = 0; k < 5 && (!text || strcmp(text, wpSpecials[k]) != 0); k++) {
    }
    if (k == 5) {
      *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' is not supported "
                               "(supported: [PAD], [UNK], [CLS], [SEP], "
                               "[MASK], which WordPiece splits out itself)",
                               TJ, e);
      break;
    }
    seen[k] = 1;
    vid = tjVocabId(d, text);
    if (d->rc != SQLITE_OK) break;
    if (vid != id) {
      *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' has id %d, not its "
                               "id in model.vocab", TJ, e, id);
      break;
    }
    {
      const char *sp = (const char *)sqlite3_column_text(st, 2);
      if (!sp || strcmp(sp, "true") != 0) {
        *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' with special false "
                                 "is not supported", TJ, e);
        break;
      }
    }
    for (k = 0; k < 4; k++) {
      const char *f = (const char *)sqlite3_column_text(st, 3 + k);
      if (f && strcmp(f, "false") != 0) {
        *pzErr = sqlite3_mprintf("%s: added_tokens: '%s' with %s %s is not "
                                 "supported", TJ, e, flags[k], f);
        break;
      }
    }
  }
  if (rc == SQLITE_ROW || rc == SQLITE_DONE) rc = SQLITE_OK;
  sqlite3_finalize(st);
  if (d->rc != SQLITE_OK) rc = d->rc;
  for (k = 0; rc == SQLITE_OK && !*pzErr && k < 5; k++) {
    if (seen[k] || tjVocabId(d, wpSpecials[k]) < 0) continue;
    *pzErr = sqlite3_mprintf("%s: added_tokens lacks '%s', which model.vocab "
                             "has (WordPiece splits it out of a text)",
                             TJ, wpSpecials[k]);
  }
  return rc == SQLITE_OK ? d->rc : rc;
}


int relattn_hf_tokjson_read(sqlite3 *db, const uint8_t *file, size_t n,
                            relattn_hf_tokjson *out, char **pzErr) {
  tj_doc d;
  char type[16], *name = NULL, *v = NULL, *single = NULL, *pair = NULL;
  int bad = 0, clean;
  memset(out, 0, sizeof *out);
  if (n >= 3 && memcmp(file, "\xef\xbb\xbf", 3) == 0) file += 3, n -= 3;
  if (n > 0x7fffffff) {
    *pzErr = sqlite3_mprintf("%s is too large", TJ);
    return SQLITE_TOOBIG;
  }
  d.db = db, d.json = (const char *)file, d.n = (int)n, d.rc = SQLITE_OK;
  {
    sqlite3_stmt *st = NULL;
    int ok = 0;
    if ((d.rc = sqlite3_prepare_v2(db, "SELECT json_valid(?1)", -1, &st,
                                   NULL)) != SQLITE_OK)
      goto fail;
    sqlite3_bind_text(st, 1, d.json, d.n, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) ok = sqlite3_column_int(st, 0);
    if ((d.rc = sqlite3_finalize(st)) != SQLITE_OK) goto fail;
    if (!ok) {
      *pzErr = sqlite3_mprintf("%s is not valid JSON", TJ);
      goto fail;
    }
  }
  /* what changes ids outside the components */
  v = relattn_tj_get(&d, "$.truncation", type);
  if (d.rc == SQLITE_OK && v) {
    *pzErr = sqlite3_mprintf("%s: truncation is not supported (it must be "
                             "null)", TJ);
    goto fail;
  }
  sqlite3_free(v);
  v = relattn_tj_get(&d, "$.padding", type);
  if (d.rc == SQLITE_OK && v) {
    *pzErr = sqlite3_mprintf("%s: padding is not supported (it must be "
                             "null)", TJ);
    goto fail;
  }
  sqlite3_free(v), v = NULL;

  /* the model */
  name = relattn_tj_name(&d, "model", "models");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "Unigram") == 0) {
    if ((d.rc = relattn_tj_unigram(&d, out, pzErr)) != SQLITE_OK || *pzErr)
      goto fail;
    sqlite3_free(name);
    return SQLITE_OK;
  }
  if (strcmp(name, "WordPiece") != 0) {
    *pzErr = sqlite3_mprintf("%s: model '%s' is not supported (supported: "
                             "WordPiece, Unigram)", TJ, name);
    goto fail;
  }
  v = relattn_tj_get(&d, "$.model.continuing_subword_prefix", type);
  if (d.rc == SQLITE_OK && (!v || strcmp(v, "##") != 0)) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: model WordPiece with "
                             "continuing_subword_prefix '%s' is not supported "
                             "(supported: '##')", TJ,
                             relattn_echo(e, v ? v : "null", -1));
    goto fail;
  }
  sqlite3_free(v);
  v = relattn_tj_get(&d, "$.model.max_input_chars_per_word", type);
  if (d.rc == SQLITE_OK && (!v || strcmp(type, "integer") != 0 ||
                            strcmp(v, "100") != 0)) {
    char e[RELATTN_ECHO_BUF];
    *pzErr = sqlite3_mprintf("%s: model WordPiece with "
                             "max_input_chars_per_word %s is not supported "
                             "(supported: 100)", TJ,
                             relattn_echo(e, v ? v : "null", -1));
    goto fail;
  }
  sqlite3_free(v), v = NULL;
  out->unk = relattn_tj_get(&d, "$.model.unk_token", type);
  if (d.rc != SQLITE_OK) goto fail;
  if (!out->unk || strcmp(type, "text") != 0 || tjVocabId(&d, out->unk) < 0) {
    char e[RELATTN_ECHO_BUF];
    if (d.rc != SQLITE_OK) goto fail;
    *pzErr = sqlite3_mprintf("%s: model.unk_token '%s' is not in "
                             "model.vocab", TJ,
                             relattn_echo(e, out->unk ? out->unk : "null",
                                          -1));
    goto fail;
  }

  /* the normalizer: BertNormalizer, whose options are the WordPiece
  ** kind's own */
  sqlite3_free(name);
  name = relattn_tj_name(&d, "normalizer", "normalizers");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "BertNormalizer") != 0) {
    *pzErr = sqlite3_mprintf("%s: normalizer '%s' is not supported "
                             "(supported: BertNormalizer)", TJ, name);
    goto fail;
  }
  clean = relattn_tj_bool(&d, "$.normalizer.clean_text", &bad);
  out->chinese = relattn_tj_bool(&d, "$.normalizer.handle_chinese_chars", &bad);
  out->strip = relattn_tj_bool(&d, "$.normalizer.strip_accents", &bad);
  out->lower = relattn_tj_bool(&d, "$.normalizer.lowercase", &bad);
  if (d.rc != SQLITE_OK) goto fail;
  if (bad || clean < 0 || out->chinese < 0 || out->lower < 0) {
    *pzErr = sqlite3_mprintf("%s: normalizer BertNormalizer: clean_text, "
                             "handle_chinese_chars and lowercase must be true "
                             "or false, strip_accents true, false or null",
                             TJ);
    goto fail;
  }
  if (!clean) {
    *pzErr = sqlite3_mprintf("%s: normalizer BertNormalizer with clean_text "
                             "false is not supported", TJ);
    goto fail;
  }

  sqlite3_free(name);
  name = relattn_tj_name(&d, "pre_tokenizer", "pretokenizers");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "BertPreTokenizer") != 0) {
    *pzErr = sqlite3_mprintf("%s: pre_tokenizer '%s' is not supported "
                             "(supported: BertPreTokenizer)", TJ, name);
    goto fail;
  }

  sqlite3_free(name);
  name = relattn_tj_name(&d, "decoder", "decoders");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "WordPiece") != 0 && strcmp(name, "null") != 0) {
    *pzErr = sqlite3_mprintf("%s: decoder '%s' is not supported (supported: "
                             "WordPiece, null)", TJ, name);
    goto fail;
  }
  if (strcmp(name, "WordPiece") == 0) {
    v = relattn_tj_get(&d, "$.decoder.prefix", type);
    if (d.rc == SQLITE_OK && (!v || strcmp(v, "##") != 0)) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: decoder WordPiece with prefix '%s' is "
                               "not supported (supported: '##')", TJ,
                               relattn_echo(e, v ? v : "null", -1));
      goto fail;
    }
    sqlite3_free(v), v = NULL;
  }

  /* the post-processor: [CLS] $A [SEP], and [CLS] $A [SEP] $B [SEP] with
  ** token type 1 from $B, as relattn_tokenize adds them */
  sqlite3_free(name);
  name = relattn_tj_name(&d, "post_processor", "processors");
  if (d.rc != SQLITE_OK) goto fail;
  if (strcmp(name, "TemplateProcessing") == 0) {
    char *want1, *want2;
    single = relattn_tj_template(&d, "$.post_processor.single");
    pair = relattn_tj_template(&d, "$.post_processor.pair");
    out->cls = relattn_tj_get(&d, "$.post_processor.single[0].SpecialToken.id",
                              type);
    out->sep = relattn_tj_get(&d, "$.post_processor.single[2].SpecialToken.id",
                              type);
    if (d.rc != SQLITE_OK) goto fail;
    want1 = sqlite3_mprintf("%s:0 $A:0 %s:0", out->cls ? out->cls : "",
                            out->sep ? out->sep : "");
    want2 = sqlite3_mprintf("%s:0 $A:0 %s:0 $B:1 %s:1",
                            out->cls ? out->cls : "",
                            out->sep ? out->sep : "",
                            out->sep ? out->sep : "");
    if (!want1 || !want2) {
      sqlite3_free(want1);
      sqlite3_free(want2);
      d.rc = SQLITE_NOMEM;
      goto fail;
    }
    if (!out->cls || !out->sep || strcmp(single, want1) != 0 ||
        strcmp(pair, want2) != 0) {
      char e1[RELATTN_ECHO_BUF], e2[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: post_processor TemplateProcessing with "
                               "single '%s' and pair '%s' is not supported "
                               "(supported: '[CLS]:0 $A:0 [SEP]:0' and "
                               "'[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1', any "
                               "two tokens for [CLS] and [SEP])", TJ,
                               relattn_echo(e1, single, -1),
                               relattn_echo(e2, pair, -1));
    }
    sqlite3_free(want1);
    sqlite3_free(want2);
    if (*pzErr) goto fail;
    {
      /* each special's ids: the one id model.vocab gives it */
      const char *tok[2];
      int k;
      tok[0] = out->cls, tok[1] = out->sep;
      for (k = 0; k < 2; k++) {
        char *p = sqlite3_mprintf("$.post_processor.special_tokens.\"%w\".ids",
                                  tok[k]);
        char *ids;
        int id;
        if (!p) {
          d.rc = SQLITE_NOMEM;
          goto fail;
        }
        ids = relattn_tj_get(&d, p, type);
        sqlite3_free(p);
        id = tjVocabId(&d, tok[k]);
        if (d.rc != SQLITE_OK) {
          sqlite3_free(ids);
          goto fail;
        }
        p = sqlite3_mprintf("[%d]", id);
        if (id < 0 || !ids || !p || strcmp(ids, p) != 0) {
          char e[RELATTN_ECHO_BUF];
          *pzErr = sqlite3_mprintf("%s: post_processor: special token '%s' "
                                   "must have the one id model.vocab gives "
                                   "it", TJ, relattn_echo(e, tok[k], -1));
        }
        sqlite3_free(ids);
        sqlite3_free(p);
        if (*pzErr) goto fail;
      }
    }
  } else if (strcmp(name, "BertProcessing") == 0) {
    const char *key[2] = {"cls", "sep"};
    char **tok[2];
    int k;
    tok[0] = &out->cls, tok[1] = &out->sep;
    for (k = 0; k < 2; k++) {
      char p[48], *id;
      sqlite3_snprintf(sizeof p, p, "$.post_processor.%s[0]", key[k]);
      *tok[k] = relattn_tj_get(&d, p, type);
      sqlite3_snprintf(sizeof p, p, "$.post_processor.%s[1]", key[k]);
      id = relattn_tj_get(&d, p, type);
      if (d.rc == SQLITE_OK &&
          (!*tok[k] || !id || strcmp(type, "integer") != 0 ||
           atoi(id) != tjVocabId(&d, *tok[k]))) {
        *pzErr = sqlite3_mprintf("%s: post_processor BertProcessing: %s must "
                                 "be a token of model.vocab and its id", TJ,
                                 key[k]);
      }
      sqlite3_free(id);
      if (d.rc != SQLITE_OK || *pzErr) goto fail;
    }
  } else {
    *pzErr = sqlite3_mprintf("%s: post_processor '%s' is not supported "
                             "(supported: TemplateProcessing, "
                             "BertProcessing)", TJ, name);
    goto fail;
  }

  if ((d.rc = tjAdded(&d, pzErr)) != SQLITE_OK || *pzErr) goto fail;
  if ((d.rc = tjVocab(&d, out, pzErr)) != SQLITE_OK || *pzErr) goto fail;
  sqlite3_free(name);
  sqlite3_free(single);
  sqlite3_free(pair);
  return SQLITE_OK;
fail:
  sqlite3_free(v);
  sqlite3_free(name);
  sqlite3_free(single);
  sqlite3_free(pair);
  relattn_hf_tokjson_free(out);
  if (!*pzErr)
    *pzErr = d.rc == SQLITE_NOMEM ? sqlite3_mprintf("%s: out of memory", FN)
                                  : relattn_sql_errmsg(db, FN, d.rc);
  return d.rc != SQLITE_OK ? d.rc : SQLITE_ERROR;
}

void relattn_hf_tokjson_free(relattn_hf_tokjson *t) {
  sqlite3_free(t->vocab);
  sqlite3_free(t->cls);
  sqlite3_free(t->sep);
  sqlite3_free(t->unk);
  memset(t, 0, sizeof *t);
}

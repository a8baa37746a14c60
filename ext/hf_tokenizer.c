/*
** hf_tokenizer.c: a Hugging Face checkpoint's tokenizer for relattn_import:
** its kind told by the file's structure (a vocab.txt, an spm.model, or a
** tokenizer.json, read by ext/hf_tokjson.c), the special tokens' ids from
** the family's defaults or tokenizer_config.json, and an spm.model
** converted as transformers' fast tokenizer runs it. No SQL function of its
** own; ext/hf.c calls it and writes what it finds into the native config's
** tokenizer key.
**
**   SELECT relattn_import('nli', readfile('model.safetensors'),
**                         readfile('config.json'), readfile('spm.model'),
**                         readfile('tokenizer_config.json'));
*/
#include "ext.h"
#include "functions.h"
#include "hf.h"

#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT3

#define FN "relattn_import"

/* An HF checkpoint's spm.model as AutoTokenizer runs it: the tokenizer.json
** transformers' DebertaV2Converter / T5Converter (convert_slow_tokenizer.py)
** builds from it, PreTrainedTokenizerFast then adding the slow tokenizer's
** added tokens. Stored in out->file: the model carrying that pipeline
** (src/tok_sentencepiece.c, relattn_sentencepiece_convert). The added
** tokens: each of tokenizer_config's added_tokens_decoder, with its flags
** (T5 without one: T5Tokenizer's <extra_id_N>, lstrip and rstrip), then
** the special ids (roles[]) not among them, special, no strip. */
static int convertSpm(sqlite3 *db, const relattn_hf_model *m,
                      const relattn_tokenizer *t, const char *tok_config,
                      const uint8_t *tok, size_t tok_n, const int *roles,
                      const char *const *role_text, int n_roles, int lower,
                      relattn_hf_tok *out, char **pzErr) {
  relattn_jdoc j;
  relattn_spm_convert c;
  relattn_spm_added *a = NULL;
  char **own = NULL, err[256];
  int n_own = 0, n_a = 0, cap, n_pieces = relattn_tokenizer_n_ids(t), k, i;
  int rc = SQLITE_OK, has_decoder = 0, aps = 1, legacy = 1, extra = 0;
  int extra_default = 0;
  uint8_t *conv = NULL;
  size_t conv_n = 0;
  sqlite3_stmt *st = NULL;
  memset(&c, 0, sizeof c);
  c.t5 = m->fam->eos_only;
  c.lower = lower == 1;
  if (tok_config) {
    if (relattn_jdoc_open(&j, db, tok_config, "tokenizer_config_json", pzErr))
      return SQLITE_ERROR;
    /* T5Tokenizer's: 100 sentinels, add_prefix_space and legacy true */
    aps = relattn_jdoc_bool(&j, "add_prefix_space", 1);
    legacy = relattn_jdoc_bool(&j, "legacy", 1);
    extra = relattn_jdoc_int(&j, "extra_ids", -1);
    if (extra == -1) extra = 100, extra_default = 1;
    rc = j.rc;
    if (rc == SQLITE_OK && (extra < 0 || extra > 1000000)) {
      *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: extra_ids must be "
                               "between 0 and 1000000, not %d", FN, extra);
      rc = SQLITE_ERROR;
    }
    relattn_jdoc_close(&j);
    if (rc != SQLITE_OK) return rc;
  } else {
    extra = 100, extra_default = 1;
  }
  /* SpmConverter's _get_prepend_scheme; DebertaV2Tokenizer has neither
  ** add_prefix_space nor legacy: always */
  c.scheme = !c.t5 ? 2 : aps == 0 ? 0 : legacy == 0 ? 1 : 2;
  c.n_extra = c.t5 ? extra : 0;
  if (c.t5 && extra_default && n_pieces + c.n_extra > m->vocab)
    /* T5Tokenizer's default of 100, for a model with fewer rows than
    ** that: the last sentinels, whose ids stay the library's, that fit */
    c.n_extra = m->vocab > n_pieces ? m->vocab - n_pieces : 0;
  if (n_pieces + c.n_extra > m->vocab) {
    *pzErr = sqlite3_mprintf("%s: the tokenizer's %d <extra_id_N> pieces "
                             "(extra_ids) end at id %d, past the model's "
                             "vocab_size %d", FN, c.n_extra,
                             n_pieces + c.n_extra - 1, m->vocab);
    return SQLITE_ERROR;
  }
  cap = c.n_extra + n_roles + 64;
  if (tok_config &&
      (rc = sqlite3_prepare_v2(
           db,
           "SELECT coalesce(json_type(?1, '$.added_tokens_decoder'), 'null'), "
           "(SELECT count(*) FROM json_each(?1, '$.added_tokens_decoder')), "
           "(SELECT count(*) FROM json_each(?1, '$.added_tokens_decoder') "
           "WHERE type <> 'object')",
           -1, &st, NULL)) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) {
      const char *type = (const char *)sqlite3_column_text(st, 0);
      int null = type && strcmp(type, "null") == 0;
      if (!null && (!type || strcmp(type, "object") != 0 ||
                    sqlite3_column_int(st, 2) > 0))
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder must be an object of "
                                 "objects ({\"<id>\": {\"content\": ...}})",
                                 FN);
      cap += sqlite3_column_int(st, 1);
      has_decoder = !null && sqlite3_column_int(st, 1) > 0;
    }
    rc = sqlite3_finalize(st);
    st = NULL;
    if (*pzErr) goto done;
  }
  if (rc != SQLITE_OK) goto done;
  a = sqlite3_malloc64((sqlite3_uint64)cap * sizeof *a);
  own = sqlite3_malloc64((sqlite3_uint64)cap * sizeof *own);
  if (!a || !own) goto nomem;
  if (has_decoder) {
    if ((rc = sqlite3_prepare_v2(
             db,
             "SELECT key, json_extract(value, '$.content'), "
             "json_type(value, '$.content'), "
             "coalesce(json_type(value, '$.special'), 'true'), "
             "json_type(value, '$.lstrip'), json_type(value, '$.rstrip'), "
             "json_type(value, '$.single_word'), "
             "json_type(value, '$.normalized'), json_extract(?1, fullkey || "
             "'.content', fullkey || '.content') FROM json_each(?1, "
             "'$.added_tokens_decoder') ORDER BY CAST(key AS INTEGER)",
             -1, &st, NULL)) != SQLITE_OK)
      goto done;
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    while (sqlite3_step(st) == SQLITE_ROW) {
      const char *key = (const char *)sqlite3_column_text(st, 0);
      const char *text = (const char *)sqlite3_column_text(st, 1);
      const char *type = (const char *)sqlite3_column_text(st, 2);
      const char *sw = (const char *)sqlite3_column_text(st, 6);
      const char *nz = (const char *)sqlite3_column_text(st, 7);
      char e[RELATTN_ECHO_BUF], e2[RELATTN_ECHO_BUF];
      int id = -1;
      size_t pn = 0;
      const uint8_t *piece;
      if (key && key[0] && strlen(key) <= 9 &&
          strspn(key, "0123456789") == strlen(key))
        id = atoi(key);
      relattn_echo(e, key ? key : "", -1);
      if (id < 0 || !type || strcmp(type, "text") != 0 || !text[0]) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder '%s' needs an id as "
                                 "its key and a content", FN, e);
        goto done;
      }
      if (relattn_json_has_nul((const char *)sqlite3_column_text(st, 8))) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: the content of "
                                 "added_tokens_decoder '%d'" RELATTN_NUL_MSG,
                                 FN, id);
        goto done;
      }
      relattn_echo(e2, text, -1);
      if ((sw && strcmp(sw, "true") == 0) || (nz && strcmp(nz, "true") == 0)) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder '%s' ('%s') with %s "
                                 "true is not supported", FN, e, e2,
                                 sw && strcmp(sw, "true") == 0 ? "single_word"
                                                               : "normalized");
        goto done;
      }
      /* the fast tokenizer finds it at its piece, or adds it after
      ** the vocabulary: another id than the file's is another token */
      piece = id < n_pieces ? relattn_tokenizer_id_text(t, id, &pn) : NULL;
      if (id < n_pieces + c.n_extra) {
        char want[32];
        if (id >= n_pieces)
          sqlite3_snprintf(sizeof want, want, "<extra_id_%d>",
                           n_pieces + c.n_extra - 1 - id);
        if (id < n_pieces ? (!piece || pn != strlen(text) ||
                             memcmp(piece, text, pn) != 0)
                          : strcmp(want, text) != 0) {
          *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                   "added_tokens_decoder '%s' ('%s') is not "
                                   "the tokenizer's piece %d", FN, e, e2, id);
          goto done;
        }
      } else {
        int next = n_pieces + c.n_extra;
        for (k = 0; k < n_a; k++)
          if (a[k].id >= next) next = a[k].id + 1;
        if (id != next) {
          *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                   "added_tokens_decoder '%s' ('%s') is not at "
                                   "id %d, where the fast tokenizer adds it",
                                   FN, e, e2, next);
          goto done;
        }
      }
      if (id >= m->vocab) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: "
                                 "added_tokens_decoder '%s' ('%s') is past "
                                 "the model's vocab_size %d", FN, e, e2,
                                 m->vocab);
        goto done;
      }
      if (!(own[n_own] = sqlite3_mprintf("%s", text))) goto nomem;
      a[n_a].id = id, a[n_a].text = own[n_own++], a[n_a].n = strlen(text);
      a[n_a].flags =
          (strcmp((const char *)sqlite3_column_text(st, 3), "true") == 0
               ? RELATTN_ADDED_SPECIAL : 0) |
          (sqlite3_column_text(st, 4) &&
                   strcmp((const char *)sqlite3_column_text(st, 4), "true") == 0
               ? RELATTN_ADDED_LSTRIP : 0) |
          (sqlite3_column_text(st, 5) &&
                   strcmp((const char *)sqlite3_column_text(st, 5), "true") == 0
               ? RELATTN_ADDED_RSTRIP : 0);
      n_a++;
    }
    rc = sqlite3_finalize(st);
    st = NULL;
    if (rc != SQLITE_OK) goto done;
  } else {
    for (k = 0; k < c.n_extra; k++) {
      if (!(own[n_own] = sqlite3_mprintf("<extra_id_%d>", k))) goto nomem;
      a[n_a].id = n_pieces + c.n_extra - 1 - k, a[n_a].text = own[n_own++];
      a[n_a].n = strlen(a[n_a].text);
      a[n_a].flags = RELATTN_ADDED_SPECIAL | RELATTN_ADDED_LSTRIP |
                     RELATTN_ADDED_RSTRIP;
      n_a++;
    }
  }
  for (i = 0; i < n_roles; i++) {
    if (roles[i] < 0 || !role_text[i]) continue;
    for (k = 0; k < n_a && a[k].id != roles[i]; k++) {
    }
    if (k < n_a) continue;
    a[n_a].id = roles[i], a[n_a].text = role_text[i];
    a[n_a].n = strlen(role_text[i]);
    a[n_a].flags = RELATTN_ADDED_SPECIAL;
    n_a++;
  }
  c.added = a, c.n_added = n_a;
  if (relattn_sentencepiece_convert(tok, tok_n, &c, &conv, &conv_n,
                                    FN ": tokenizer_blob", err,
                                    sizeof err) != RELATTN_OK) {
    if (!(*pzErr = sqlite3_mprintf("%s", err))) goto nomem;
    goto done;
  }
  out->file = sqlite3_malloc64(conv_n);
  if (!out->file) goto nomem;
  memcpy(out->file, conv, conv_n);
  out->file_n = conv_n;
  out->json_unigram = 1;
  goto done;
nomem:
  rc = SQLITE_NOMEM;
done:
  sqlite3_finalize(st);
  free(conv);
  for (k = 0; k < n_own; k++) sqlite3_free(own[k]);
  sqlite3_free(own);
  sqlite3_free(a);
  if (rc == SQLITE_OK && *pzErr) rc = SQLITE_ERROR;
  if (rc != SQLITE_OK && !*pzErr) *pzErr = relattn_sql_errmsg(db, FN, rc);
  return rc;
}

/* The id of token text in the tokenizer's file, else in tokenizer_config's
** added_tokens_decoder ({"128000": {"content": "[MASK]"}}), else -1. */
static int tokenId(sqlite3 *db, const relattn_tokenizer *t,
                   const char *tok_config, const char *text) {
  sqlite3_stmt *st = NULL;
  int id = relattn_tokenizer_piece_id(t, text);
  if (id >= 0 || !tok_config) return id;
  if (sqlite3_prepare_v2(db,
                         "SELECT key FROM json_each(?1, "
                         "'$.added_tokens_decoder') WHERE "
                         "json_extract(value, '$.content') = ?2 AND key "
                         "NOT GLOB '*[^0-9]*' AND length(key) BETWEEN 1 AND 9",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, text, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW) id = sqlite3_column_int(st, 0);
  }
  sqlite3_finalize(st);
  return id;
}

/* The id after the tokenizer's own: past its file's ids and the ids of
** tokenizer_config's added_tokens_decoder, as len(get_vocab()) is for
** Hugging Face's tokenizer when the added ids follow the file's. */
static int nextId(sqlite3 *db, const relattn_tokenizer *t,
                  const char *tok_config) {
  sqlite3_stmt *st = NULL;
  int next = relattn_tokenizer_n_ids(t);
  if (!tok_config) return next;
  if (sqlite3_prepare_v2(db,
                         "SELECT max(CAST(key AS INTEGER)) FROM json_each(?1, "
                         "'$.added_tokens_decoder') WHERE key NOT GLOB "
                         "'*[^0-9]*' AND length(key) BETWEEN 1 AND 9",
                         -1, &st, NULL) == SQLITE_OK) {
    sqlite3_bind_text(st, 1, tok_config, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW &&
        sqlite3_column_type(st, 0) != SQLITE_NULL &&
        sqlite3_column_int(st, 0) >= next)
      next = sqlite3_column_int(st, 0) + 1;
  }
  sqlite3_finalize(st);
  return next;
}

/* The special tokens' ids: each role's text (HF's default for the family,
** or tokenizer_config.json's cls_token, sep_token, ...) looked up. */
int relattn_hf_read_tokenizer(sqlite3 *db, const relattn_hf_model *m,
                              const char *tok_config, const uint8_t *tok,
                              size_t tok_n, relattn_hf_tok *out,
                              char **pzErr) {
  static const char *const keys[] = {"cls_token", "sep_token", "mask_token",
                                     "pad_token", "unk_token", "eos_token"};
  enum { R_CLS, R_SEP, R_MASK, R_PAD, R_UNK, R_EOS, N_ROLES };
  char *text[N_ROLES];
  int id[N_ROLES], i, rc = SQLITE_OK;
  relattn_config c;
  relattn_tokenizer *t = NULL;
  char err[256];
  relattn_jdoc j;
  relattn_hf_tokjson tj;
  memset(text, 0, sizeof text);
  memset(out, 0, sizeof *out);
  memset(&tj, 0, sizeof tj);
  if (!tok) {
    *pzErr = sqlite3_mprintf("%s: a %s checkpoint needs its tokenizer's file "
                             "(%s) as tokenizer_blob", FN,
                             m->fam->name, m->fam->tok_file);
    return SQLITE_ERROR;
  }
  /* The kind by the file's structure: a vocab.txt may start with any
  ** line, an empty one too (BertTokenizer's load_vocab makes it token ''
  ** at id 0). A file of no known kind is read as the family's own, whose
  ** parser says where it breaks. */
  switch (relattn_tokenizer_file_kind(tok, tok_n)) {
    case RELATTN_TOKFILE_SPM: out->kind = RELATTN_TOK_SENTENCEPIECE; break;
    case RELATTN_TOKFILE_VOCAB: out->kind = RELATTN_TOK_WORDPIECE; break;
    case RELATTN_TOKFILE_JSON:
      /* the fast tokenizer's file: mapped onto the WordPiece kind, whose
      ** vocab.txt the model stores (ext/hf_tokjson.c) */
      if ((rc = relattn_hf_tokjson_read(db, tok, tok_n, &tj, pzErr)) !=
          SQLITE_OK)
        return rc;
      /* a Unigram's: the SentencePiece kind running Hugging Face's
      ** pipeline, which the stored file carries */
      out->kind = tj.unigram ? RELATTN_TOK_SENTENCEPIECE
                             : RELATTN_TOK_WORDPIECE;
      out->json_unigram = tj.unigram;
      if (tj.unigram && (m->fam->eos_only ? tj.cls != NULL : !tj.cls)) {
        char e[RELATTN_ECHO_BUF];
        *pzErr = sqlite3_mprintf(
            m->fam->eos_only
                ? "%s: tokenizer.json: post_processor: a %s model's input is "
                  "the text and then '%s', with nothing in front"
                : "%s: tokenizer.json: post_processor: a %s model's input "
                  "starts with a token ([CLS]), not with the text, as "
                  "'$A:0 %s:0' has it",
            FN, m->fam->name, relattn_echo(e, tj.sep ? tj.sep : "", -1));
        relattn_hf_tokjson_free(&tj);
        return SQLITE_ERROR;
      }
      out->file = tj.vocab, out->file_n = tj.vocab_n;
      tj.vocab = NULL;
      tok = out->file, tok_n = out->file_n;
      break;
    default:
      out->kind = m->fam->tok_kind;
  }
  out->lower = out->kind == RELATTN_TOK_WORDPIECE ? 1 : 0;
  out->strip = -1;
  out->chinese = 1;
  if (out->json_unigram) {
    out->lower = 0;
    text[R_CLS] = tj.cls, text[R_UNK] = tj.unk;
    text[m->fam->eos_only ? R_EOS : R_SEP] = tj.sep;
    tj.cls = tj.sep = tj.unk = NULL;
  } else if (out->file) {
    out->lower = tj.lower, out->strip = tj.strip, out->chinese = tj.chinese;
    text[R_CLS] = tj.cls, text[R_SEP] = tj.sep, text[R_UNK] = tj.unk;
    tj.cls = tj.sep = tj.unk = NULL;
  }
  out->clean = 1;
  if (tok_config) {
    if (relattn_jdoc_open(&j, db, tok_config, "tokenizer_config_json", pzErr)) {
      rc = SQLITE_ERROR;
      goto done;
    }
    {
      const char *type = relattn_jdoc_step(&j, "$");
      if (type && strcmp(type, "object") != 0) {
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json is not a JSON "
                                 "object", FN);
        relattn_jdoc_close(&j);
        rc = SQLITE_ERROR;
        goto done;
      }
    }
    if (out->json_unigram) {
      /* the file's normalizer and pre-tokenizer are the tokenizer's */
    } else if (out->file) {
      /* BertTokenizerFast rebuilds the normalizer from these when they
      ** differ from tokenizer.json's: one of the two would be wrong */
      static const char *const opt[] = {"do_lower_case", "strip_accents",
                                        "tokenize_chinese_chars"};
      static const char *const norm[] = {"lowercase", "strip_accents",
                                         "handle_chinese_chars"};
      const int have[] = {out->lower, out->strip, out->chinese};
      for (i = 0; i < 3 && j.rc == SQLITE_OK; i++) {
        int v = relattn_jdoc_bool(&j, opt[i], -2);
        if (v == -2 || v == have[i] || j.rc != SQLITE_OK) continue;
        *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: %s %s differs "
                                 "from the tokenizer.json's normalizer "
                                 "(%s %s)", FN, opt[i],
                                 v < 0 ? "null" : v ? "true" : "false",
                                 norm[i],
                                 have[i] < 0 ? "null" : have[i] ? "true"
                                                                : "false");
        relattn_jdoc_close(&j);
        rc = SQLITE_ERROR;
        goto done;
      }
    } else {
      out->lower = relattn_jdoc_bool(&j, "do_lower_case", out->lower);
      out->strip = relattn_jdoc_bool(&j, "strip_accents", -1);
      out->chinese = relattn_jdoc_bool(&j, "tokenize_chinese_chars", 1);
    }
    /* BertTokenizer's default: true */
    out->clean = relattn_jdoc_bool(&j, "clean_up_tokenization_spaces", 1);
    if (out->kind == RELATTN_TOK_WORDPIECE && !out->file &&
        relattn_jdoc_bool(&j, "do_basic_tokenize", 1) == 0 &&
        j.rc == SQLITE_OK) {
      /* BertTokenizer then splits on whitespace only: not what the
      ** wordpiece tokenizer does */
      *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: do_basic_tokenize "
                               "false is not supported", FN);
      relattn_jdoc_close(&j);
      rc = SQLITE_ERROR;
      goto done;
    }
    if (out->kind == RELATTN_TOK_SENTENCEPIECE && !out->json_unigram &&
        relattn_jdoc_bool(&j, "split_by_punct", 0) == 1 && j.rc == SQLITE_OK) {
      /* DebertaV2Tokenizer then cuts the text at punctuation before
      ** SentencePiece sees it: other pieces than ours */
      *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: split_by_punct "
                               "true is not supported", FN);
      relattn_jdoc_close(&j);
      rc = SQLITE_ERROR;
      goto done;
    }
    for (i = 0; i < N_ROLES && j.rc == SQLITE_OK; i++)
      if (!text[i]) /* a tokenizer.json's own come first */
        text[i] = relattn_jdoc_str(&j, keys[i], 1);
    rc = j.rc;
    relattn_jdoc_close(&j);
    if (rc != SQLITE_OK) goto done;
  }
  if (out->kind == RELATTN_TOK_SENTENCEPIECE && out->lower == 1 &&
      m->fam->eos_only) {
    /* (DebertaV2Converter lower-cases first; T5's converter has no such
    ** option) */
    *pzErr = sqlite3_mprintf("%s: tokenizer_config_json: do_lower_case true "
                             "is not supported with a SentencePiece "
                             "tokenizer", FN);
    rc = SQLITE_ERROR;
    goto done;
  }
  memset(&c, 0, sizeof c);
  c.tok_type = out->kind;
  c.vocab_size = m->vocab > 0 ? m->vocab : 1;
  c.do_lower_case = out->lower, c.strip_accents = out->strip;
  c.chinese_chars = out->chinese;
  c.bos = c.eos = c.pad = c.append = c.sep = c.mask = c.unk = -1;
  if (relattn_tokenizer_new(&t, &c, tok, tok_n, FN, err, sizeof err) !=
      RELATTN_OK) {
    *pzErr = sqlite3_mprintf("%s", err);
    rc = SQLITE_ERROR;
    goto done;
  }
  for (i = 0; i < N_ROLES; i++) {
    const char *want = text[i] ? text[i] : m->fam->roles[i];
    id[i] = want ? tokenId(db, t, tok_config, want) : -1;
  }
  if (out->kind == RELATTN_TOK_SENTENCEPIECE && !m->fam->eos_only &&
      !out->json_unigram) {
    /* DebertaV2Tokenizer (a PreTrainedTokenizer) adds the special tokens
    ** its files lack after their ids, in SPECIAL_TOKENS_ATTRIBUTES order:
    ** bos ([CLS] by default), eos ([SEP]), unk, sep, pad, cls, mask. So
    ** deberta-v3's spm.model without [MASK] gets it at the number of its
    ** pieces, 128000. */
    static const int order[] = {R_CLS, R_SEP, R_UNK, R_PAD, R_MASK};
    int next = nextId(db, t, tok_config), k, r;
    for (k = 0; k < (int)(sizeof order / sizeof order[0]); k++) {
      const char *want;
      i = order[k];
      want = text[i] ? text[i] : m->fam->roles[i];
      if (!want || id[i] >= 0) continue;
      for (r = 0; r < N_ROLES; r++) {
        const char *other = text[r] ? text[r] : m->fam->roles[r];
        if (r != i && id[r] >= 0 && other && strcmp(other, want) == 0) break;
      }
      if (r < N_ROLES) {
        id[i] = id[r];
        continue;
      }
      if (next >= m->vocab) {
        char e[RELATTN_ECHO_BUF];
        *pzErr = sqlite3_mprintf("%s: the tokenizer adds '%s' (%s) at id %d, "
                                 "past the model's vocab_size %d", FN,
                                 relattn_echo(e, want, -1), keys[i], next,
                                 m->vocab);
        rc = SQLITE_ERROR;
        goto done;
      }
      id[i] = next++;
    }
  }
  for (i = 0; i < N_ROLES; i++) {
    const char *want = text[i] ? text[i] : m->fam->roles[i];
    if (id[i] < 0 && want &&
        ((!m->fam->eos_only && (i == R_CLS || i == R_SEP)) ||
         (m->fam->eos_only && i == R_EOS) ||
         (i == R_MASK && m->head == RELATTN_HEAD_MLM))) {
      char e[RELATTN_ECHO_BUF];
      *pzErr = sqlite3_mprintf("%s: the tokenizer has no '%s' token (%s)%s",
                               FN, relattn_echo(e, want, -1), keys[i],
                               i == R_MASK ? ", which the masked-LM head "
                                             "needs" : "");
      rc = SQLITE_ERROR;
      goto done;
    }
  }
  out->pad = id[R_PAD], out->unk = id[R_UNK];
  if (m->fam->eos_only) {
    out->bos = -1, out->sep = -1, out->mask = -1;
    out->eos = out->append = id[R_EOS];
  } else {
    out->bos = id[R_CLS];
    out->eos = out->append = out->sep = id[R_SEP];
    out->mask = id[R_MASK];
  }
  if (out->kind == RELATTN_TOK_SENTENCEPIECE && !out->json_unigram) {
    /* AutoTokenizer's: the converter's tokenizer.json, run as the
    ** tokenizers library runs it */
    int roles[7];
    const char *rt[7];
    roles[0] = out->bos, roles[1] = out->eos, roles[2] = out->pad;
    roles[3] = out->append, roles[4] = out->sep, roles[5] = out->mask;
    roles[6] = out->unk;
    for (i = 0; i < 7; i++) {
      int r;
      rt[i] = NULL;
      for (r = 0; r < N_ROLES && roles[i] >= 0; r++)
        if (id[r] == roles[i]) {
          rt[i] = text[r] ? text[r] : m->fam->roles[r];
          break;
        }
    }
    rc = convertSpm(db, m, t, tok_config, tok, tok_n, roles, rt, 7,
                    out->lower, out, pzErr);
    if (rc != SQLITE_OK) goto done;
  }
done:
  relattn_tokenizer_free(t);
  relattn_hf_tokjson_free(&tj);
  for (i = 0; i < N_ROLES; i++) sqlite3_free(text[i]);
  return rc;
}

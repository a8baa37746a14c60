/*
** entities.c: a token classifier's logits turned into words or entities
** with character offsets, as transformers' TokenClassificationPipeline
** (pipelines/token_classification.py: gather_pre_entities, aggregate,
** aggregate_word(s), group_entities, group_sub_entities) turns them, with
** a fast tokenizer's offsets (relattn_tokenizer_encode_spans).
**
** HOW IT WORKS
**   1. each token's scores are the softmax of its logits; its word is its
**      text in the vocabulary (an [UNK]: the text it covers);
**   2. is_subword: a WordPiece token whose text is longer or shorter than
**      what it covers ("##" in front); any other kind by the pipeline's
**      fallback, the token starts past 0 and neither the character before
**      it nor its first one is a space;
**   3. none: a row per token, its best label and score; simple: the same,
**      grouped (5); first / average / max: the tokens of a word (a token
**      and the subwords after it) take the label of the first token, of
**      the mean scores, or of the token with the highest score;
**   4. words are joined as the tokenizer's decoder joins tokens
**      (convert_tokens_to_string): WordPiece drops "##" and puts a space
**      before the others, then its cleanup (" ." -> "." ...) per token;
**      SentencePiece turns U+2581 into spaces and drops the first one;
**   5. groups: B-X starts a group, I-X (or a label without a B-/I- prefix)
**      joins the group of the same X before it; a group's label is its
**      first label past its first "-", its score the mean of its members';
**   6. rows whose label (none) or group (others) is ignored are left out.
*/
#include "tok.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct pre {
  const uint8_t *word; /* its text (token or covered text), wlen bytes */
  size_t wlen;
  double *scores;      /* (L) */
  int64_t start, end;  /* characters */
  int index;
  int subword;
} pre;

typedef struct ent {
  int label;
  double score;
  char *word;
  int64_t start, end;
  int index;
} ent;

/* Characters (code points) in p[0..n): every byte but a continuation. */
static int64_t chars(const uint8_t *p, size_t n) {
  int64_t c = 0;
  size_t i;
  for (i = 0; i < n; i++) c += (p[i] & 0xC0) != 0x80;
  return c;
}

/* The Rust WordPiece decoder's cleanup on one token. */
static void cleanup(relattn_bytebuf *b, size_t from) {
  static const char *const f[] = {" .", " ?", " !", " ,", " ' ", " n't",
                                  " 'm", " do not", " 's", " 've", " 're"};
  static const char *const t[] = {".", "?", "!", ",", "'", "n't",
                                  "'m", " don't", "'s", "'ve", "'re"};
  size_t r;
  for (r = 0; r < sizeof f / sizeof f[0]; r++) {
    size_t x = from, y = from, lf = strlen(f[r]), lt = strlen(t[r]);
    while (x < b->n) {
      if (b->n - x >= lf && memcmp(b->p + x, f[r], lf) == 0) {
        memmove(b->p + y, t[r], lt); /* never longer than what it replaces */
        x += lf, y += lt;
      } else {
        b->p[y++] = b->p[x++];
      }
    }
    b->n = y;
  }
}

/* convert_tokens_to_string of n strings by the tokenizer kind's decoder,
** malloc'd and NUL-terminated. */
static char *joinTokens(int kind, const uint8_t *const *w, const size_t *wl,
                        int n) {
  relattn_bytebuf b = {0};
  int i, rc = RELATTN_OK;
  for (i = 0; i < n && rc == RELATTN_OK; i++) {
    const uint8_t *p = w[i];
    size_t len = wl[i], from = b.n, k;
    if (kind == RELATTN_TOK_WORDPIECE) {
      if (i > 0) {
        if (len >= 2 && p[0] == '#' && p[1] == '#')
          p += 2, len -= 2;
        else
          rc = relattn_bytebuf_add(&b, " ", 1);
      }
      if (rc == RELATTN_OK) rc = relattn_bytebuf_add(&b, p, len);
      if (rc == RELATTN_OK) cleanup(&b, from);
    } else if (kind == RELATTN_TOK_SENTENCEPIECE) {
      /* Metaspace: U+2581 (E2 96 81) is a space; the first one goes */
      for (k = 0; k < len && rc == RELATTN_OK;) {
        if (len - k >= 3 && p[k] == 0xE2 && p[k + 1] == 0x96 &&
            p[k + 2] == 0x81) {
          rc = relattn_bytebuf_add(&b, " ", 1);
          k += 3;
        } else {
          rc = relattn_bytebuf_add(&b, p + k, 1);
          k++;
        }
      }
      if (rc == RELATTN_OK && i == 0 && b.n > 0 && b.p[0] == ' ') {
        memmove(b.p, b.p + 1, b.n - 1);
        b.n--;
      }
    } else {
      rc = relattn_bytebuf_add(&b, p, len);
    }
  }
  if (rc == RELATTN_OK) rc = relattn_bytebuf_add(&b, "", 1);
  if (rc != RELATTN_OK) {
    free(b.p);
    return NULL;
  }
  return (char *)b.p;
}

static int argmax(const double *s, int L) {
  int i, best = 0;
  for (i = 1; i < L; i++)
    if (s[i] > s[best]) best = i;
  return best;
}

/* get_tag: (B or I, the tag); a label without B-/I- is an I of itself. */
static void getTag(const char *label, int *bi, const char **tag) {
  if ((label[0] == 'B' || label[0] == 'I') && label[1] == '-') {
    *bi = label[0];
    *tag = label + 2;
  } else {
    *bi = 'I';
    *tag = label;
  }
}

static int ignored(const char *label, const char *const *ignore, int n) {
  int i;
  for (i = 0; i < n; i++)
    if (strcmp(label, ignore[i]) == 0) return 1;
  return 0;
}

void relattn_entities_free(relattn_entity *e, int n) {
  int i;
  for (i = 0; e && i < n; i++) {
    free(e[i].word);
    free(e[i].group);
  }
  free(e);
}

int relattn_entities_make(const relattn_entities_in *in, relattn_entity **out,
                          int *n_out) {
  const int n = in->n, L = in->n_labels;
  pre *p = NULL;
  ent *w = NULL;
  relattn_entity *o = NULL;
  double *scores = NULL;
  int64_t *cpos = NULL; /* characters before each byte boundary */
  const uint8_t **ws = NULL;
  size_t *wl = NULL, b;
  int i, j, k, nw = 0, no = 0, rc = RELATTN_ERR_NOMEM;
  *out = NULL;
  *n_out = 0;
  p = calloc(n ? (size_t)n : 1, sizeof *p);
  w = calloc(n ? (size_t)n : 1, sizeof *w);
  o = calloc(n ? (size_t)n : 1, sizeof *o);
  scores = malloc(sizeof *scores * ((size_t)n * (size_t)L + 1));
  cpos = malloc(sizeof *cpos * (in->text_n + 1));
  ws = malloc(sizeof *ws * ((size_t)n + 1));
  wl = malloc(sizeof *wl * ((size_t)n + 1));
  if (!p || !w || !o || !scores || !cpos || !ws || !wl) goto done;
  cpos[0] = 0;
  for (b = 0; b < in->text_n; b++)
    cpos[b + 1] = cpos[b] + ((in->text[b] & 0xC0) != 0x80);

  /* 1, 2: the pre-entities */
  for (i = 0; i < n; i++) {
    const float *z = in->logits + (size_t)i * L;
    double *s = scores + (size_t)i * L, mx = z[0], sum = 0;
    uint32_t b0 = in->spans[2 * i], b1 = in->spans[2 * i + 1];
    size_t tl = 0;
    const uint8_t *tt = in->token_text(in->ctx, in->ids[i], &tl);
    for (k = 1; k < L; k++)
      if (z[k] > mx) mx = z[k];
    for (k = 0; k < L; k++) sum += s[k] = exp((double)z[k] - mx);
    for (k = 0; k < L; k++) s[k] /= sum;
    p[i].scores = s;
    p[i].start = cpos[b0];
    p[i].end = cpos[b1];
    p[i].index = in->index[i];
    p[i].word = tt;
    p[i].wlen = tl;
    if (in->kind == RELATTN_TOK_WORDPIECE) {
      p[i].subword = chars(tt, tl) != p[i].end - p[i].start;
    } else {
      /* sentence[start - 1 : start + 1] holds no space */
      int before = b0 > 0, here = b0 < in->text_n;
      size_t q = b0;
      if (before) { /* the character before b0 */
        q = b0 - 1;
        while (q > 0 && (in->text[q] & 0xC0) == 0x80) q--;
      }
      p[i].subword = p[i].start > 0 && !(before && in->text[q] == ' ') &&
                     !(here && in->text[b0] == ' ');
    }
    if (in->ids[i] == in->unk) {
      p[i].word = in->text + b0;
      p[i].wlen = b1 - b0;
      p[i].subword = 0;
    }
  }

  /* 3: words (entities of one token each for none and simple) */
  if (in->strategy == RELATTN_AGG_NONE || in->strategy == RELATTN_AGG_SIMPLE) {
    for (i = 0; i < n; i++, nw++) {
      w[nw].label = argmax(p[i].scores, L);
      w[nw].score = p[i].scores[w[nw].label];
      w[nw].word = malloc(p[i].wlen + 1);
      if (!w[nw].word) goto done;
      memcpy(w[nw].word, p[i].word, p[i].wlen);
      w[nw].word[p[i].wlen] = 0;
      w[nw].start = p[i].start, w[nw].end = p[i].end;
      w[nw].index = p[i].index;
    }
  } else {
    for (i = 0; i < n; i = j, nw++) {
      int best = i;
      for (j = i + 1; j < n && p[j].subword; j++) {
      }
      for (k = i; k < j; k++) ws[k - i] = p[k].word, wl[k - i] = p[k].wlen;
      w[nw].word = joinTokens(in->kind, ws, wl, j - i);
      if (!w[nw].word) goto done;
      if (in->strategy == RELATTN_AGG_FIRST) {
        w[nw].label = argmax(p[i].scores, L);
        w[nw].score = p[i].scores[w[nw].label];
      } else if (in->strategy == RELATTN_AGG_MAX) {
        /* max(entities, key=scores.max()): the first highest */
        for (k = i + 1; k < j; k++)
          if (p[k].scores[argmax(p[k].scores, L)] >
              p[best].scores[argmax(p[best].scores, L)])
            best = k;
        w[nw].label = argmax(p[best].scores, L);
        w[nw].score = p[best].scores[w[nw].label];
      } else { /* average: the mean scores' best, the first on a tie */
        int m, lab = 0;
        double bestv = -1;
        for (m = 0; m < L; m++) {
          double acc = 0;
          for (k = i; k < j; k++) acc += p[k].scores[m];
          acc /= (double)(j - i);
          if (acc > bestv) bestv = acc, lab = m;
        }
        w[nw].label = lab;
        w[nw].score = bestv;
      }
      w[nw].start = p[i].start, w[nw].end = p[j - 1].end;
      w[nw].index = -1;
    }
  }

  /* 5, 6: groups, or the rows themselves for none */
  if (in->strategy == RELATTN_AGG_NONE) {
    for (i = 0; i < nw; i++) {
      if (ignored(in->labels[w[i].label], in->ignore, in->n_ignore)) continue;
      o[no].label = w[i].label;
      o[no].score = w[i].score;
      o[no].word = w[i].word;
      w[i].word = NULL;
      o[no].start = w[i].start, o[no].end = w[i].end;
      o[no].index = w[i].index;
      no++;
    }
  } else {
    for (i = 0; i < nw; i = j) {
      int bi, lbi;
      const char *tag, *ltag, *first = in->labels[w[i].label], *dash;
      double sum = w[i].score;
      getTag(first, &lbi, &ltag);
      for (j = i + 1; j < nw; j++) {
        getTag(in->labels[w[j].label], &bi, &tag);
        getTag(in->labels[w[j - 1].label], &lbi, &ltag);
        if (!(strcmp(tag, ltag) == 0 && bi != 'B')) break;
        sum += w[j].score;
      }
      /* entities[0]["entity"].split("-", 1)[-1] */
      dash = strchr(first, '-');
      o[no].group = strdup(dash ? dash + 1 : first);
      if (!o[no].group) goto done;
      o[no].label = w[i].label;
      o[no].score = sum / (double)(j - i);
      for (k = i; k < j; k++)
        ws[k - i] = (const uint8_t *)w[k].word, wl[k - i] = strlen(w[k].word);
      o[no].word = joinTokens(in->kind, ws, wl, j - i);
      if (!o[no].word) {
        free(o[no].group);
        o[no].group = NULL;
        goto done;
      }
      o[no].start = w[i].start, o[no].end = w[j - 1].end;
      o[no].index = -1;
      if (ignored(o[no].group, in->ignore, in->n_ignore)) {
        free(o[no].word);
        free(o[no].group);
        o[no].word = o[no].group = NULL;
        continue;
      }
      no++;
    }
  }
  *out = o;
  *n_out = no;
  o = NULL;
  rc = RELATTN_OK;
done:
  for (i = 0; i < nw; i++) free(w[i].word);
  if (o) relattn_entities_free(o, no);
  free(p);
  free(w);
  free(scores);
  free(cpos);
  free(ws);
  free(wl);
  return rc;
}

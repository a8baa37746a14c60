/*
** test_entities.c: src/entities.c on tokens and logits made by hand, so
** each rule of transformers' TokenClassificationPipeline is seen on its
** own: subwords by "##" (WordPiece) and by the spaces around a token
** (SentencePiece), the five aggregation strategies, B-/I- grouping, the
** group's name past its first "-", ignored labels, [UNK] words, character
** offsets of multi-byte text, and words joined as the decoders join them.
** Scores are checked against the softmax written out here (1e-12).
*/
#include <string.h>

#include "relattn.h"
#include "tok.h"
#include "unit.h"

static const char *const LABELS[] = {"O", "B-PER", "I-PER", "B-LOC", "I-LOC",
                                     "MISC"};
enum { L = 6 };

/* Token texts by id: the test's own vocabulary. */
static const char *const VOCAB[] = {"[UNK]", "ada", "##lo", "##ve", "met",
                                    "london", "now", "\xe2\x96\x81" "Ada",
                                    "lo", "\xe2\x96\x81" "in", "!"};

static const uint8_t *vocabText(void *ctx, int32_t id, size_t *len) {
  (void)ctx;
  *len = strlen(VOCAB[id]);
  return (const uint8_t *)VOCAB[id];
}

/* logits: the label lab gets 2 (or hi), every other 0 */
static void onehot(float *z, int lab, float hi) {
  int k;
  for (k = 0; k < L; k++) z[k] = 0;
  z[lab] = hi;
}

static double prob(float hi) { return exp(hi) / (exp(hi) + (L - 1)); }

static int run(relattn_entities_in *in, int strategy, relattn_entity **e,
               int *n) {
  in->strategy = strategy;
  return relattn_entities_make(in, e, n);
}

static void check_wordpiece(void) {
  /* "Adalove met London now": ada ##lo ##ve met london now */
  const char *text = "Adalove met London now";
  const int32_t ids[] = {1, 2, 3, 4, 5, 6};
  const uint32_t spans[] = {0, 3, 3, 5, 5, 7, 8, 11, 12, 18, 19, 22};
  const int index[] = {1, 2, 3, 4, 5, 6};
  const int lab[] = {1, 2, 1, 0, 3, 4}; /* B-PER I-PER B-PER O B-LOC I-LOC */
  const float hi[] = {2, 3, 2, 2, 2, 4};
  static const char *const ignore[] = {"O"};
  float logits[6 * L];
  relattn_entities_in in;
  relattn_entity *e;
  int n, i;
  for (i = 0; i < 6; i++) onehot(logits + i * L, lab[i], hi[i]);
  memset(&in, 0, sizeof in);
  in.text = (const uint8_t *)text, in.text_n = strlen(text);
  in.ids = ids, in.spans = spans, in.logits = logits, in.n = 6;
  in.n_labels = L, in.index = index, in.labels = LABELS;
  in.kind = RELATTN_TOK_WORDPIECE, in.unk = 0;
  in.ignore = ignore, in.n_ignore = 1, in.token_text = vocabText;

  /* none: a row per token but the O, its label, score, text, index */
  CHECK(run(&in, RELATTN_AGG_NONE, &e, &n) == RELATTN_OK && n == 5, "none n");
  CHECK(e[0].label == 1 && !e[0].group && fabs(e[0].score - prob(2)) < 1e-12 &&
            strcmp(e[0].word, "ada") == 0 && e[0].start == 0 &&
            e[0].end == 3 && e[0].index == 1,
        "none row 0");
  CHECK(strcmp(e[1].word, "##lo") == 0 && e[1].label == 2 &&
            e[1].index == 2 && e[3].index == 5 && e[4].index == 6,
        "none rows: the O (met) left out");
  relattn_entities_free(e, n);

  /* simple: ada ##lo group (B then I of PER); ##ve starts a new PER (B);
  ** London now: LOC */
  CHECK(run(&in, RELATTN_AGG_SIMPLE, &e, &n) == RELATTN_OK && n == 3,
        "simple n %d", n);
  CHECK(strcmp(e[0].group, "PER") == 0 && strcmp(e[0].word, "adalo") == 0 &&
            e[0].start == 0 && e[0].end == 5 && e[0].index == -1 &&
            fabs(e[0].score - (prob(2) + prob(3)) / 2) < 1e-12,
        "simple group 0: '%s' %g", e[0].word, e[0].score);
  CHECK(strcmp(e[1].group, "PER") == 0 && strcmp(e[1].word, "##ve") == 0,
        "simple group 1: '%s'", e[1].word);
  CHECK(strcmp(e[2].group, "LOC") == 0 &&
            strcmp(e[2].word, "london now") == 0 && e[2].start == 12 &&
            e[2].end == 22,
        "simple group 2: '%s'", e[2].word);
  relattn_entities_free(e, n);

  /* first: the word adalove takes ada's B-PER */
  CHECK(run(&in, RELATTN_AGG_FIRST, &e, &n) == RELATTN_OK && n == 2,
        "first n %d", n);
  CHECK(strcmp(e[0].group, "PER") == 0 && strcmp(e[0].word, "adalove") == 0 &&
            e[0].start == 0 && e[0].end == 7 &&
            fabs(e[0].score - prob(2)) < 1e-12,
        "first word: '%s' %g", e[0].word, e[0].score);
  relattn_entities_free(e, n);

  /* max: ##lo's I-PER (3 is the highest), then a PER group of its own */
  CHECK(run(&in, RELATTN_AGG_MAX, &e, &n) == RELATTN_OK && n == 2 &&
            strcmp(e[0].group, "PER") == 0 &&
            fabs(e[0].score - prob(3)) < 1e-12,
        "max");
  relattn_entities_free(e, n);

  /* average: the mean of the three rows; label 1 (twice at 2) beats
  ** label 2 (once at 3) */
  CHECK(run(&in, RELATTN_AGG_AVERAGE, &e, &n) == RELATTN_OK && n == 2,
        "average n");
  {
    double m1 = (prob(2) + (1 - prob(3)) / (L - 1) + prob(2)) / 3;
    CHECK(strcmp(e[0].group, "PER") == 0 && fabs(e[0].score - m1) < 1e-12,
          "average score %g, want %g", e[0].score, m1);
  }
  relattn_entities_free(e, n);

  /* nothing ignored: the O group comes back, its name the label itself */
  in.n_ignore = 0;
  CHECK(run(&in, RELATTN_AGG_FIRST, &e, &n) == RELATTN_OK && n == 3 &&
            strcmp(e[1].group, "O") == 0 && strcmp(e[1].word, "met") == 0,
        "no ignore");
  relattn_entities_free(e, n);
  in.n_ignore = 1;
}

static void check_sentencepiece(void) {
  /* "Ada lo in!": "\u2581Ada" [0,3); "lo" [4,6), after a space: not a
  ** subword; "\u2581in" [6,9) with its space; "!" [9,10), no space at it
  ** or before it: a subword */
  const char *text = "Ada lo in!";
  const int32_t ids[] = {7, 8, 9, 10};
  const uint32_t spans[] = {0, 3, 4, 6, 6, 9, 9, 10};
  const int index[] = {1, 2, 3, 4};
  const int lab[] = {1, 2, 5, 5}; /* B-PER I-PER MISC MISC */
  float logits[4 * L];
  static const char *const ignore[] = {"O"};
  relattn_entities_in in;
  relattn_entity *e;
  int n, i;
  for (i = 0; i < 4; i++) onehot(logits + i * L, lab[i], 2);
  memset(&in, 0, sizeof in);
  in.text = (const uint8_t *)text, in.text_n = strlen(text);
  in.ids = ids, in.spans = spans, in.logits = logits, in.n = 4;
  in.n_labels = L, in.index = index, in.labels = LABELS;
  in.kind = RELATTN_TOK_SENTENCEPIECE, in.unk = 0;
  in.ignore = ignore, in.n_ignore = 1, in.token_text = vocabText;
  /* first: words Ada | lo | in! ; groups PER (Ada lo: the decoder joins
  ** "Ada" and "lo" with nothing between, as Metaspace does) and MISC */
  CHECK(run(&in, RELATTN_AGG_FIRST, &e, &n) == RELATTN_OK && n == 2,
        "spm first n %d", n);
  CHECK(strcmp(e[0].group, "PER") == 0 && strcmp(e[0].word, "Adalo") == 0 &&
            e[0].start == 0 && e[0].end == 6,
        "spm group 0: '%s'", e[0].word);
  CHECK(strcmp(e[1].group, "MISC") == 0 && strcmp(e[1].word, "in!") == 0 &&
            e[1].start == 6 && e[1].end == 10,
        "spm group 1: '%s' %lld %lld", e[1].word, (long long)e[1].start,
        (long long)e[1].end);
  relattn_entities_free(e, n);
  /* none keeps the pieces as the vocabulary spells them */
  CHECK(run(&in, RELATTN_AGG_NONE, &e, &n) == RELATTN_OK && n == 4 &&
            strcmp(e[0].word, "\xe2\x96\x81" "Ada") == 0,
        "spm none");
  relattn_entities_free(e, n);
}

static void check_unknown_and_characters(void) {
  /* "é ☃ x": é (2 bytes) and the snowman (3) are [UNK]: their words are the
  ** text they cover, offsets in characters */
  const char *text = "\xc3\xa9 \xe2\x98\x83 now";
  const int32_t ids[] = {0, 0, 6};
  const uint32_t spans[] = {0, 2, 3, 6, 7, 10};
  const int index[] = {1, 2, 3};
  float logits[3 * L];
  relattn_entities_in in;
  relattn_entity *e;
  int n, i;
  for (i = 0; i < 3; i++) onehot(logits + i * L, 5, 2);
  memset(&in, 0, sizeof in);
  in.text = (const uint8_t *)text, in.text_n = strlen(text);
  in.ids = ids, in.spans = spans, in.logits = logits, in.n = 3;
  in.n_labels = L, in.index = index, in.labels = LABELS;
  in.kind = RELATTN_TOK_WORDPIECE, in.unk = 0;
  in.token_text = vocabText;
  CHECK(run(&in, RELATTN_AGG_NONE, &e, &n) == RELATTN_OK && n == 3 &&
            strcmp(e[0].word, "\xc3\xa9") == 0 && e[0].start == 0 &&
            e[0].end == 1 && strcmp(e[1].word, "\xe2\x98\x83") == 0 &&
            e[1].start == 2 && e[1].end == 3 && e[2].start == 4 &&
            e[2].end == 7,
        "unknown words and character offsets");
  relattn_entities_free(e, n);
  /* MISC has no B-/I-: each continues the one before, one group */
  CHECK(run(&in, RELATTN_AGG_SIMPLE, &e, &n) == RELATTN_OK && n == 1 &&
            strcmp(e[0].group, "MISC") == 0 &&
            strcmp(e[0].word, "\xc3\xa9 \xe2\x98\x83 now") == 0,
        "one MISC group: '%s'", n ? e[0].word : "");
  relattn_entities_free(e, n);
  /* no tokens: no rows */
  in.n = 0;
  CHECK(run(&in, RELATTN_AGG_FIRST, &e, &n) == RELATTN_OK && n == 0,
        "no tokens");
  relattn_entities_free(e, n);
}

static void check_wordpiece_decoder_cleanup(void) {
  /* the WordPiece decoder's cleanup, token by token: "london !" -> "london!" */
  const char *text = "london!";
  const int32_t ids[] = {5, 10};
  const uint32_t spans[] = {0, 6, 6, 7};
  const int index[] = {1, 2};
  float logits[2 * L];
  relattn_entities_in in;
  relattn_entity *e;
  int n;
  onehot(logits, 3, 2);
  onehot(logits + L, 4, 2);
  memset(&in, 0, sizeof in);
  in.text = (const uint8_t *)text, in.text_n = strlen(text);
  in.ids = ids, in.spans = spans, in.logits = logits, in.n = 2;
  in.n_labels = L, in.index = index, in.labels = LABELS;
  in.kind = RELATTN_TOK_WORDPIECE, in.unk = 0;
  in.token_text = vocabText;
  CHECK(run(&in, RELATTN_AGG_SIMPLE, &e, &n) == RELATTN_OK && n == 1 &&
            strcmp(e[0].word, "london!") == 0,
        "cleanup: '%s'", n ? e[0].word : "");
  relattn_entities_free(e, n);
}

static void check_spans(void) {
  /* WordPiece spans: accents stripped, lower-cased, [UNK] words whole */
  relattn_config c;
  relattn_tokenizer *t;
  char err[256];
  const char *vocab = "[UNK]\nun\n##aff\n##able\nx";
  const char *text = " Un\xc3\x81" "ffable x zz";
  int32_t *ids;
  uint32_t *sp;
  size_t n;
  memset(&c, 0, sizeof c);
  c.tok_type = RELATTN_TOK_WORDPIECE;
  c.vocab_size = 5;
  c.bos = c.eos = c.pad = -1;
  c.do_lower_case = 1, c.strip_accents = -1, c.chinese_chars = 1;
  CHECK(relattn_tokenizer_new(&t, &c, (const uint8_t *)vocab, strlen(vocab),
                              "t", err, sizeof err) == RELATTN_OK,
        "spans: %s", err);
  CHECK(relattn_tokenizer_encode_spans(t, (const uint8_t *)text, strlen(text),
                                       100, &ids, &sp, &n) == RELATTN_OK &&
            n == 5,
        "spans: 5 tokens");
  if (n == 5) {
    static const uint32_t want[] = {1, 3, 3, 7, 7, 11, 12, 13, 14, 16};
    static const int32_t want_ids[] = {1, 2, 3, 4, 0};
    CHECK(memcmp(sp, want, sizeof want) == 0 &&
              memcmp(ids, want_ids, sizeof want_ids) == 0,
          "spans: un [1,3) ##aff [3,7) ##able [7,11) x [12,13) [UNK] [14,16): "
          "%u %u %u %u %u %u %u %u %u %u",
          sp[0], sp[1], sp[2], sp[3], sp[4], sp[5], sp[6], sp[7], sp[8],
          sp[9]);
  }
  free(ids);
  free(sp);
  relattn_tokenizer_free(t);
}

int main(void) {
  unit_seed();
  check_wordpiece();
  check_sentencepiece();
  check_unknown_and_characters();
  check_wordpiece_decoder_cleanup();
  check_spans();
  UNIT_DONE();
}

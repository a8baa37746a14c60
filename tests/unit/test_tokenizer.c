/*
** test_tokenizer.c: the tokenizer interface (src/tokenizer.c) and the
** Unicode helpers (src/unicode.c) without SQLite: UTF-8 decoding against a
** reference decoder written here from RFC 3629's table, random byte
** strings through the byte tokenizer, the limit that stops encoding early,
** WordPiece's file checks, the tokenizer file kinds, and split_special on texts with invalid UTF-8
** and several kinds of whitespace around the special tokens. (Exactness against the reference
** tokenizers is tested through SQL: tests/sql/test_tokenizers.py and
** test_sentencepiece.py.)
*/
#include <string.h>

#include "relattn.h"
#include "unicode.h"
#include "unit.h"

/* RFC 3629, section 4: the well-formed byte sequences. */
static int ref_len(const uint8_t *s, size_t n) {
  uint8_t a = s[0], b = n > 1 ? s[1] : 0, c = n > 2 ? s[2] : 0,
          d = n > 3 ? s[3] : 0;
#define T(x) ((x) >= 0x80 && (x) <= 0xBF)
  if (a <= 0x7F) return 1;
  if (a >= 0xC2 && a <= 0xDF) return n > 1 && T(b) ? 2 : 0;
  if (a == 0xE0) return n > 2 && b >= 0xA0 && b <= 0xBF && T(c) ? 3 : 0;
  if ((a >= 0xE1 && a <= 0xEC) || a == 0xEE || a == 0xEF)
    return n > 2 && T(b) && T(c) ? 3 : 0;
  if (a == 0xED) return n > 2 && b >= 0x80 && b <= 0x9F && T(c) ? 3 : 0;
  if (a == 0xF0)
    return n > 3 && b >= 0x90 && b <= 0xBF && T(c) && T(d) ? 4 : 0;
  if (a >= 0xF1 && a <= 0xF3) return n > 3 && T(b) && T(c) && T(d) ? 4 : 0;
  if (a == 0xF4)
    return n > 3 && b >= 0x80 && b <= 0x8F && T(c) && T(d) ? 4 : 0;
  return 0;
#undef T
}

static void check_utf8(void) {
  int i, k, bad = 0;
  for (i = 0; i < 200000; i++) {
    uint8_t s[4], back[4];
    size_t n = 1 + unit_next() % 4;
    uint32_t cp = 0;
    int got, want;
    for (k = 0; k < 4; k++) {
      uint64_t r = unit_next();
      s[k] = (uint8_t)(k == 0 ? r : (r & 1) ? 0x80 | (r >> 8 & 0x3F) : r >> 8);
    }
    got = relattn_utf8_decode(s, n, &cp);
    want = ref_len(s, n);
    if (got != want) bad++;
    if (got > 0 && (relattn_utf8_encode(cp, back) != got ||
                    memcmp(back, s, (size_t)got) != 0))
      bad++;
  }
  CHECK(bad == 0, "utf8: %d disagreements with RFC 3629", bad);
}

static void check_bytes(void) {
  relattn_config c;
  relattn_tokenizer *t;
  char err[256];
  uint8_t text[300], *out;
  int32_t *ids, marks[4] = {65, 256, 66, 999};
  size_t n, i, len;
  int ok = 1, rc;
  memset(&c, 0, sizeof c);
  c.tok_type = RELATTN_TOK_BYTES;
  c.vocab_size = 1000;
  c.bos = 256, c.eos = -1, c.pad = -1;
  CHECK(relattn_tokenizer_new(&t, &c, NULL, 0, "t", err, sizeof err) ==
            RELATTN_OK, "bytes: %s", err);
  for (i = 0; i < sizeof text; i++) text[i] = (uint8_t)unit_next();
  CHECK(relattn_tokenizer_encode(t, text, sizeof text, 2, 1000, &ids, &n) ==
            RELATTN_OK && n == sizeof text, "bytes: encode");
  for (i = 0; i < n; i++) ok &= ids[2 + i] == text[i];
  CHECK(ok, "bytes: ids are the bytes, after the lead slots");
  CHECK(relattn_tokenizer_decode(t, ids + 2, n, &out, &len, "t", err,
                                 sizeof err) == RELATTN_OK &&
            len == sizeof text && memcmp(out, text, len) == 0 && out[len] == 0,
        "bytes: decode inverts encode");
  free(out);
  free(ids);
  /* the limit stops the work: 299 allowed, 300 given */
  rc = relattn_tokenizer_encode(t, text, sizeof text, 1, 299, &ids, &n);
  CHECK(rc == RELATTN_ERR_TOOBIG && ids == NULL, "bytes: limit, rc %d", rc);
  rc = relattn_tokenizer_decode(t, marks, 4, &out, &len, "d", err, sizeof err);
  CHECK(rc == RELATTN_ERR_ARG &&
            strcmp(err, "d: token 999 at position 3 is not a byte (0-255) "
                        "nor the tokenizer's bos, eos or pad") == 0,
        "bytes: decode error '%s'", err);
  relattn_tokenizer_free(t);
}

static void check_wordpiece(void) {
  relattn_config c;
  relattn_tokenizer *t;
  char err[256];
  const char *vocab = "[UNK]\r\nun\r##aff\n##able\nx";
  int32_t *ids;
  size_t n;
  memset(&c, 0, sizeof c);
  c.tok_type = RELATTN_TOK_WORDPIECE;
  c.vocab_size = 5;
  c.bos = c.eos = c.pad = -1;
  c.do_lower_case = 1, c.strip_accents = -1, c.chinese_chars = 1;
  CHECK(relattn_tokenizer_new(&t, &c, (const uint8_t *)vocab, strlen(vocab),
                              "t", err, sizeof err) == RELATTN_OK,
        "wordpiece: %s", err);
  CHECK(relattn_tokenizer_n_ids(t) == 5, "wordpiece: 5 lines");
  CHECK(relattn_tokenizer_encode(t, (const uint8_t *)"UNAFFABLE", 9, 0, 10,
                                 &ids, &n) == RELATTN_OK && n == 3 &&
            ids[0] == 1 && ids[1] == 2 && ids[2] == 3,
        "wordpiece: un ##aff ##able");
  free(ids);
  relattn_tokenizer_free(t);
  c.vocab_size = 4;
  CHECK(relattn_tokenizer_new(&t, &c, (const uint8_t *)vocab, strlen(vocab),
                              "t", err, sizeof err) == RELATTN_ERR_ARG &&
            strcmp(err, "t: the tokenizer has 5 tokens, more than vocab_size "
                        "(4)") == 0,
        "wordpiece: too many tokens: '%s'", err);
  c.vocab_size = 10;
  CHECK(relattn_tokenizer_new(&t, &c, (const uint8_t *)"a\xff\n", 3, "t", err,
                              sizeof err) == RELATTN_ERR_FORMAT &&
            strcmp(err, "t: tokenizer.wordpiece is not valid UTF-8 at byte "
                        "1") == 0,
        "wordpiece: invalid UTF-8: '%s'", err);
}

/* relattn_tokenizer_file_kind on files made by hand: each kind, and the
** bytes that are two kinds at once (a .model that is also UTF-8 text),
** and what is no kind (empty, a protobuf cut short, fields that are not
** ModelProto's). */
static void check_file_kind(void) {
#define B(s) s, sizeof s - 1
  static const struct {
    const char *bytes;
    size_t n;
    int kind;
  } cases[] = {
      {B("\n[UNK]\nhello\n"), RELATTN_TOKFILE_VOCAB}, /* first line empty */
      {B("[PAD]\n[UNK]\n"), RELATTN_TOKFILE_VOCAB},
      {B("\xef\xbb\xbf {\"model\": {}}\r\n"), RELATTN_TOKFILE_JSON},
      {B("{\n[UNK]\n"), RELATTN_TOKFILE_VOCAB},           /* no closing } */
      {B("\x0a\x03\x0a\x01" "a"), RELATTN_TOKFILE_SPM},   /* a piece 'a' */
      {B("\x0a\x08\x0a\x01" "a\x15\x00\x00\x80\xbf\x12\x00"),
       RELATTN_TOKFILE_SPM},                               /* score -1 */
      {B("\x0a\x02\x18\x02\xc2\x0c\x00"), RELATTN_TOKFILE_SPM}, /* field 200 */
      {B("\x0a\x03\x0a\x01"), RELATTN_TOKFILE_VOCAB},     /* cut short */
      {B("\x0a\x02\x20\x01"), RELATTN_TOKFILE_VOCAB},     /* piece field 4 */
      {B("\x12\x00"), RELATTN_TOKFILE_VOCAB},             /* no piece */
      {B("\x32\x00\x0a\x00"), RELATTN_TOKFILE_VOCAB},     /* field 6 */
      {B("\x0a\xff"), RELATTN_TOKFILE_UNKNOWN},
      {B(""), RELATTN_TOKFILE_UNKNOWN},
  };
#undef B
  size_t i;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = relattn_tokenizer_file_kind((const uint8_t *)cases[i].bytes,
                                          cases[i].n);
    CHECK(got == cases[i].kind, "file kind of case %zu: %s, not %s", i,
          relattn_tokenizer_file_name(got),
          relattn_tokenizer_file_name(cases[i].kind));
  }
}

/* split_special over the byte tokenizer: a text made of chunks, so what
** the split must give is known from how the text was made. Text chunks:
** letters, whitespace (str.isspace: space, tab, U+3000, U+00A0) and
** malformed UTF-8 (each followed by 'a', so no two chunks join into a
** character); special chunks: "[M]" (256, lstrip), "[MM]" (257, rstrip,
** "[M]" is not its prefix but shares one), "<\xff>" (258, both, a text
** that is not UTF-8 itself). */
static void check_split_special(void) {
  static const char *const texts[] = {"a", "b", " ", "\t", "\xe3\x80\x80",
                                      "\xc2\xa0", "\xff" "a", "\xe3\x80" "a",
                                      "\x80" "a"};
  static const int space[] = {0, 0, 1, 1, 1, 1, 0, 0, 0};
  static const relattn_special_token sp[] = {
      {256, "[M]", 1, 0, "tokenizer.bos"},
      {257, "[MM]", 0, 1, "tokenizer.eos"},
      {258, "<\xff>", 1, 1, "tokenizer.pad"}};
  relattn_config c;
  relattn_tokenizer *t;
  char err[256];
  int round, bad_ids = 0, bad_text = 0, bad_limit = 0, rc;
  memset(&c, 0, sizeof c);
  c.tok_type = RELATTN_TOK_BYTES;
  c.vocab_size = 300;
  c.bos = 256, c.eos = 257, c.pad = 258;
  CHECK(relattn_tokenizer_new(&t, &c, NULL, 0, "t", err, sizeof err) ==
            RELATTN_OK, "split: %s", err);
  CHECK(relattn_tokenizer_set_special(t, sp, 3, "t", err, sizeof err) ==
            RELATTN_OK, "split: %s", err);
  for (round = 0; round < 3000; round++) {
    int chunk[24], n_chunks = (int)(unit_next() % 24), k, a, b;
    uint8_t text[128], want_text[256];
    int32_t want[128], *ids;
    size_t n = 0, n_want = 0, n_text = 0, n_ids, len;
    uint8_t *out;
    int prev = -1; /* index of the special before the part, -1: none */
    for (k = 0; k < n_chunks; k++) {
      chunk[k] = (int)(unit_next() % 12); /* 0-8 text, 9-11 special */
      const char *s = chunk[k] < 9 ? texts[chunk[k]] : sp[chunk[k] - 9].text;
      memcpy(text + n, s, strlen(s));
      n += strlen(s);
    }
    /* the parts between specials, stripped by chunk */
    for (a = 0; a <= n_chunks;) {
      int next;
      for (b = a; b < n_chunks && chunk[b] < 9; b++) {
      }
      next = b < n_chunks ? chunk[b] - 9 : -1;
      if (prev >= 0 && sp[prev].rstrip)
        while (a < b && space[chunk[a]]) a++;
      if (next >= 0 && sp[next].lstrip)
        while (b > a && space[chunk[b - 1]]) b--;
      if (a < b && n_text) want_text[n_text++] = ' ';
      for (k = a; k < b; k++) {
        const char *s = texts[chunk[k]];
        size_t m;
        for (m = 0; m < strlen(s); m++) {
          want[n_want++] = (uint8_t)s[m];
          want_text[n_text++] = (uint8_t)s[m];
        }
      }
      for (b = a; b < n_chunks && chunk[b] < 9; b++) {
      }
      if (b == n_chunks) break;
      want[n_want++] = sp[next].id;
      if (n_text) want_text[n_text++] = ' ';
      memcpy(want_text + n_text, sp[next].text, strlen(sp[next].text));
      n_text += strlen(sp[next].text);
      prev = next;
      a = b + 1;
    }
    rc = relattn_tokenizer_encode(t, text, n, 1, 1000, &ids, &n_ids);
    if (rc != RELATTN_OK || n_ids != n_want ||
        memcmp(ids + 1, want, n_want * sizeof *want) != 0) {
      bad_ids++;
    } else {
      if (relattn_tokenizer_decode(t, ids + 1, n_ids, &out, &len, "t", err,
                                   sizeof err) != RELATTN_OK ||
          len != n_text || memcmp(out, want_text, len) != 0)
        bad_text++;
      else
        free(out);
    }
    free(ids);
    /* the limit: one id fewer stops it */
    if (n_want > 0) {
      rc = relattn_tokenizer_encode(t, text, n, 0, n_want - 1, &ids, &n_ids);
      if (rc != RELATTN_ERR_TOOBIG || ids) bad_limit++;
    }
  }
  CHECK(bad_ids == 0, "split: %d texts with other ids", bad_ids);
  CHECK(bad_text == 0, "split: %d texts decoded otherwise", bad_text);
  CHECK(bad_limit == 0, "split: %d texts past the limit", bad_limit);
  /* what set_special refuses, leaving no specials behind */
  {
    relattn_special_token bad[2] = {{256, "", 0, 0, "tokenizer.bos"},
                                    {257, NULL, 0, 0, "tokenizer.eos"}};
    int32_t *ids;
    size_t n_ids;
    rc = relattn_tokenizer_set_special(t, bad, 1, "t", err, sizeof err);
    CHECK(rc == RELATTN_ERR_ARG &&
              strcmp(err, "t: tokenizer.split_special: token 256 "
                          "(tokenizer.bos) has an empty text") == 0,
          "split: empty text '%s'", err);
    rc = relattn_tokenizer_set_special(t, bad + 1, 1, "t", err, sizeof err);
    CHECK(rc == RELATTN_ERR_ARG &&
              strcmp(err, "t: tokenizer.split_special: token 257 "
                          "(tokenizer.eos) has no text in the tokenizer's "
                          "file; give it in tokenizer.added_tokens") == 0,
          "split: no text '%s'", err);
    bad[0].text = "[M]", bad[1].text = "[M]";
    rc = relattn_tokenizer_set_special(t, bad, 2, "t", err, sizeof err);
    CHECK(rc == RELATTN_ERR_ARG &&
              strcmp(err, "t: tokenizer.split_special: tokens 256 "
                          "(tokenizer.bos) and 257 (tokenizer.eos) have the "
                          "same text") == 0,
          "split: same text '%s'", err);
    CHECK(relattn_tokenizer_encode(t, (const uint8_t *)"[M]", 3, 0, 10, &ids,
                                   &n_ids) == RELATTN_OK &&
              n_ids == 3 && ids[0] == '[',
          "split: a refused set leaves none");
    free(ids);
  }
  relattn_tokenizer_free(t);
}

/* relattn_base64_decode against an encoder written here (RFC 4648 4:
** each 3 bytes as 4 of the 64 characters, '=' padding), on random bytes;
** and what is not base64 refused. */
static void check_base64(void) {
  static const char abc[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  static const char *const bad[] = {"ab!c", "a===", "QQ=x", "QR==", "Q"};
  uint8_t in[64], out[64];
  char enc[100];
  int k, wrong = 0;
  size_t i, n, got;
  for (k = 0; k < 200; k++) {
    size_t e = 0;
    n = (size_t)(unit_next() % 60);
    for (i = 0; i < n; i++) in[i] = (uint8_t)unit_next();
    for (i = 0; i < n; i += 3) {
      uint32_t v = (uint32_t)in[i] << 16 |
                   (uint32_t)(i + 1 < n ? in[i + 1] : 0) << 8 |
                   (uint32_t)(i + 2 < n ? in[i + 2] : 0);
      enc[e++] = abc[v >> 18 & 63];
      enc[e++] = abc[v >> 12 & 63];
      enc[e++] = i + 1 < n ? abc[v >> 6 & 63] : '=';
      enc[e++] = i + 2 < n ? abc[v & 63] : '=';
    }
    if (relattn_base64_decode(enc, e, out, &got) != RELATTN_OK || got != n ||
        (n && memcmp(in, out, n) != 0))
      wrong++;
  }
  CHECK(wrong == 0, "base64: %d of 200 random strings decoded otherwise",
        wrong);
  for (k = 0; k < 5; k++)
    CHECK(relattn_base64_decode(bad[k], strlen(bad[k]), out, &got) ==
              RELATTN_ERR_FORMAT,
          "base64: '%s' is not base64", bad[k]);
}

int main(void) {
  unit_seed();
  check_base64();
  check_utf8();
  check_bytes();
  check_wordpiece();
  check_file_kind();
  check_split_special();
  UNIT_DONE();
}

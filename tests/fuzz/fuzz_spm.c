/*
** fuzz_spm.c: the SentencePiece model reader, normalizer, encoders and
** decoder (src/tok_sentencepiece.c) on untrusted .model files.
**
** Input: 2 bytes little-endian n, then n bytes of text, then the .model
** file. When the file parses, the text is encoded (at most 65536 ids) and
** the ids decoded, and encoded again with spans (the same ids, each span
** inside the text); then the text's bytes read as int32 ids (some of them
** out of range) are decoded too. Then split_special: the file's first and
** last pieces and a token past them whose text is the text's first bytes
** (flags from its first byte) are split out, and the text encoded and
** decoded again. Seeds: tests/fuzz/make_spm_seeds.py.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relattn.h"

/* The same text encoded with spans: the same ids, each span inside the
** text and not reversed. */
static void spansCheck(const relattn_tokenizer *t, const uint8_t *text,
                       size_t n, const int32_t *want, size_t n_want) {
  int32_t *ids = NULL;
  uint32_t *spans = NULL;
  size_t n_ids = 0, i;
  if (relattn_tokenizer_encode_spans(t, text, n, 65536, &ids, &spans,
                                     &n_ids) != RELATTN_OK)
    return;
  if (n_ids != n_want || memcmp(ids, want, n_ids * sizeof *ids) != 0) abort();
  for (i = 0; i < n_ids; i++)
    if (spans[2 * i] > spans[2 * i + 1] || spans[2 * i + 1] > n) abort();
  free(ids);
  free(spans);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  relattn_config c;
  relattn_tokenizer *t = NULL;
  int32_t *ids = NULL;
  uint8_t *text = NULL;
  size_t n, n_ids = 0, len;
  char err[256];
  if (size < 2) return 0;
  n = (size_t)data[0] | (size_t)data[1] << 8;
  data += 2, size -= 2;
  if (n > size) n = size;
  memset(&c, 0, sizeof c);
  c.tok_type = RELATTN_TOK_SENTENCEPIECE;
  c.vocab_size = 1 << 24;
  c.bos = c.eos = c.pad = -1;
  if (relattn_tokenizer_new(&t, &c, data + n, size - n, "fuzz", err,
                            sizeof err) != RELATTN_OK)
    return 0;
  if (relattn_tokenizer_encode(t, data, n, 1, 65536, &ids, &n_ids) ==
      RELATTN_OK) {
    size_t i;
    for (i = 0; i < n_ids; i++)
      if (ids[1 + i] < 0 || ids[1 + i] >= relattn_tokenizer_n_ids(t)) abort();
    if (relattn_tokenizer_decode(t, ids + 1, n_ids, &text, &len, "fuzz", err,
                                 sizeof err) == RELATTN_OK)
      free(text);
    spansCheck(t, data, n, ids + 1, n_ids);
    free(ids);
  }
  if (n >= 4) {
    int32_t *raw = malloc(n / 4 * sizeof *raw);
    if (raw) {
      memcpy(raw, data, n / 4 * 4);
      if (relattn_tokenizer_decode(t, raw, n / 4, &text, &len, "fuzz", err,
                                   sizeof err) == RELATTN_OK)
        free(text);
      free(raw);
    }
  }
  if (n >= 2) {
    relattn_special_token sp[3];
    char added[5];
    size_t k = n - 1 < 4 ? n - 1 : 4, i;
    int32_t last = relattn_tokenizer_n_ids(t) - 1;
    memcpy(added, data + 1, k);
    added[k] = 0; /* may be shorter: a NUL inside */
    memset(sp, 0, sizeof sp);
    sp[0].id = 0, sp[0].key = "first";
    sp[1].id = last, sp[1].key = "last";
    sp[1].lstrip = data[0] & 1, sp[1].rstrip = data[0] >> 1 & 1;
    sp[2].id = last + 1, sp[2].text = added, sp[2].key = "added";
    sp[2].lstrip = data[0] >> 2 & 1, sp[2].rstrip = data[0] >> 3 & 1;
    if (relattn_tokenizer_set_special(t, sp, 3, "fuzz", err, sizeof err) ==
            RELATTN_OK &&
        relattn_tokenizer_encode(t, data, n, 0, 65536, &ids, &n_ids) ==
            RELATTN_OK) {
      for (i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] > last + 1) abort();
      if (relattn_tokenizer_decode(t, ids, n_ids, &text, &len, "fuzz", err,
                                   sizeof err) == RELATTN_OK)
        free(text);
      spansCheck(t, data, n, ids, n_ids);
      free(ids);
    }
  }
  relattn_tokenizer_free(t);
  return 0;
}

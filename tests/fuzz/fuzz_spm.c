/*
** fuzz_spm.c: the SentencePiece model reader, normalizer, encoders and
** decoder (src/tok_sentencepiece.c) on untrusted .model files.
**
** Input: 2 bytes little-endian n, then n bytes of text, then the .model
** file. When the file parses, the text is encoded (at most 65536 ids) and
** the ids decoded; then the text's bytes read as int32 ids (some of them
** out of range) are decoded too. Seeds: tests/fuzz/make_spm_seeds.py.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relattn.h"

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
  relattn_tokenizer_free(t);
  return 0;
}

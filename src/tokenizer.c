/*
** tokenizer.c: the byte tokenizer (docs/reference.md). UTF-8 bytes are ids
** 0-255; bos, eos and pad (from the config) are ids >= 256.
*/
#include "relattn.h"

void relattn_tokenize_bytes(const uint8_t *text, size_t n, int32_t *out) {
  size_t i;
  for (i = 0; i < n; i++) out[i] = text[i];
}

int relattn_detokenize_bytes(const relattn_config *c, const int32_t *ids,
                             size_t n, uint8_t *out, size_t *out_len,
                             const char *what, char *err, size_t errlen) {
  size_t i, len = 0;
  for (i = 0; i < n; i++) {
    int32_t t = ids[i];
    if (t >= 0 && t < 256)
      out[len++] = (uint8_t)t;
    else if (t == c->bos || t == c->eos || t == c->pad)
      continue; /* markers, not text */
    else
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: token %d at position %zu is not a byte (0-255) "
                            "nor the tokenizer's bos, eos or pad",
                            what, (int)t, i);
  }
  *out_len = len;
  return RELATTN_OK;
}

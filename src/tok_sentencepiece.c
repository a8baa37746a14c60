/*
** tok_sentencepiece.c: SentencePiece models (not yet).
*/
#include "tok.h"

int relattn_sentencepiece_init(relattn_tokenizer **t, const relattn_config *c,
                               const uint8_t *file, size_t n, const char *what,
                               char *err, size_t errlen) {
  *t = NULL;
  return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                        "%s: tokenizer.type 'sentencepiece' is not supported "
                        "yet", what);
}

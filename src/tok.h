/*
** tok.h: what the tokenizer kinds share (src/tokenizer.c, tok_*.c). The
** public interface is in relattn.h; this is the inside of one.
*/
#ifndef RELATTN_TOK_H
#define RELATTN_TOK_H

#include "buf.h"
#include "relattn.h"

struct relattn_tokenizer {
  int kind;            /* RELATTN_TOK_* */
  int n_ids;           /* ids the tokenizer defines: [0, n_ids) */
  int bos, eos, pad;   /* from the config, -1 when absent */
  /* Appends the ids of text (n bytes, any bytes) to out. */
  int (*encode)(const relattn_tokenizer *t, const uint8_t *text, size_t n,
                relattn_idbuf *out);
  /* Appends the text of ids to out; errors name what and the position
  ** (at + i: ids may be a part of the caller's sequence). */
  int (*decode)(const relattn_tokenizer *t, const int32_t *ids, size_t n,
                size_t at, relattn_bytebuf *out, const char *what, char *err,
                size_t errlen);
  void (*destroy)(relattn_tokenizer *t);
  /* The id of the token whose text is p[0..n), or -1; NULL: none. */
  int32_t (*piece_id)(const relattn_tokenizer *t, const uint8_t *p, size_t n);
  /* The text of id in the file (*n bytes), or NULL; NULL: none. */
  const uint8_t *(*id_text)(const relattn_tokenizer *t, int32_t id,
                            size_t *n);
  /* tokenizer.split_special (src/tokenizer.c): the tokens split out of a
  ** text before it is encoded; n_special 0: none */
  struct tok_special {
    int32_t id;
    uint8_t *text; /* (n) malloc'd */
    size_t n;
    int lstrip, rstrip;
  } *special;
  int n_special;
  uint8_t first[256]; /* 1: a special text starts with this byte */
};

/* A kind's constructor (src/tokenizer.c's table of kinds): it allocates t
** and fills it from the file; relattn_tokenizer_new then sets the common
** fields (kind, bos, eos, pad) and checks n_ids. */
typedef int relattn_tok_init(relattn_tokenizer **t, const relattn_config *c,
                             const uint8_t *file, size_t n, const char *what,
                             char *err, size_t errlen);
relattn_tok_init relattn_wordpiece_init;
/* 1: file is a protobuf ModelProto to its end, its top-level fields those
** of sentencepiece_model.proto (or extensions), each piece a SentencePiece
** message, and there is a piece. */
int relattn_sentencepiece_is_model(const uint8_t *file, size_t n);
relattn_tok_init relattn_sentencepiece_init;

#endif /* RELATTN_TOK_H */

/*
** generate.h: one generation call in SQL (ext/generate_fn.c), shared by
** relattn_generate, relattn_generate_tokens and relattn_scan's generated
** column.
*/
#ifndef RELATTN_GENERATE_H
#define RELATTN_GENERATE_H

#include "functions.h"

typedef struct relattn_gen_call {
  relattn_call mc;          /* the model held and its input */
  relattn_gen_opts o;       /* the options as read */
  char *stops[16];          /* options.stop */
  int n_stops;
  relattn_gen_result r;     /* the new tokens */
  uint8_t *raw;             /* their text as the tokenizer gives it */
  size_t len;               /* its length, cut before the first stop string */
  size_t *ends;             /* (r.n) where each token's text ends in raw */
} relattn_gen_call;

/* Runs one generation: the model and input as every model function reads
** them (NULL input: SQLITE_OK with g->mc.n == 0), options (NULL: the
** defaults; a message naming the key it refuses), the memory checked
** against relattn_max_memory(), the search interruptible. With pieces,
** g->ends too (relattn_generate_tokens). Returns an SQLite code with
** *pzErr set on failure; relattn_gen_clear after, either way. */
int relattn_gen_run(relattn_conn *conn, sqlite3_value *model,
                    sqlite3_value *input, sqlite3_value *options, int pieces,
                    relattn_gen_call *g, char **pzErr);
void relattn_gen_clear(relattn_gen_call *g);

#endif /* RELATTN_GENERATE_H */

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

/* Reads options (JSON text, NULL: the defaults) for model m into o and
** stops (up to 16, each sqlite3_malloc'd; *n_stops of them, also on
** failure): NULL, or a message "<fn>: <what>.top_p must be ...". On the
** connection's thread (it runs SQLite's JSON functions). */
char *relattn_gen_parse(relattn_conn *conn, const relattn_model *m,
                        const char *fn, const char *what, const char *json,
                        relattn_gen_opts *o, char **stops, int *n_stops);
/* How many of a model input's n tokens (relattn_model_input) a search is
** given: a decoder's without the appended token ([SEP], </s>), which
** would end the text it continues; an encoder-decoder's source whole. */
int relattn_gen_input_n(const relattn_model *m, int n);
/* One generation to its text (malloc'd, valid UTF-8, cut before the first
** stop string; *len bytes): the memory checked against max_memory first.
** Calls no SQLite function, so relattn_scan's workers run it on their own
** pools. Returns a relattn_status with err set. */
int relattn_gen_text(const relattn_model *m, const relattn_gen_opts *o,
                     char *const *stops, int n_stops, const int32_t *input,
                     int n, relattn_pool *pool, sqlite3_int64 max_memory,
                     char **text, size_t *len, char *err, size_t errsz);

#endif /* RELATTN_GENERATE_H */

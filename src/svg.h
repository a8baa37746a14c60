/*
** svg.h: pictures as SVG 1.1 text (src/svg.c): an attention map, the mean
** weight by relative distance, a text shaded by surprise. Plain C, no
** SQLite; ext/svg_fn.c turns model runs and rows into these inputs.
**
** Every picture is bounded whatever its input: an attention map draws at
** most RELATTN_SVG_MAX_SIDE x RELATTN_SVG_MAX_SIDE cells (longer sequences
** are pooled into bins of consecutive positions), a surprise strip at most
** RELATTN_SVG_MAX_TOKENS tokens, a profile at most RELATTN_SVG_MAX_SERIES
** panels of at most 2 * RELATTN_SVG_MAX_RANGE + 3 bars.
**
** Token text is shown safely: the XML specials are escaped, and a byte that
** is not part of valid UTF-8, a control character (C0, DEL, C1) or a code
** point XML forbids is shown as \xNN (a backslash as \\).
*/
#ifndef RELATTN_SVG_H
#define RELATTN_SVG_H

#include <stddef.h>
#include <stdint.h>

#define RELATTN_SVG_MAX_SIDE 128    /* cells per side of an attention map */
#define RELATTN_SVG_MAX_TOKENS 4096 /* tokens in a surprise strip */
#define RELATTN_SVG_MAX_SERIES 64   /* panels in a profile */
#define RELATTN_SVG_MAX_RANGE 128   /* distances shown on each side */
#define RELATTN_SVG_SURPRISE_TOP 16 /* bits at the dark end of the scale */

/* A token as a label: its bytes (any bytes), or a special token's name. */
typedef struct relattn_svg_token {
  const uint8_t *text;  /* (len) bytes; need not be valid UTF-8 */
  size_t len;
  int special;          /* 1: text is a name ("bos"), drawn as <bos> */
} relattn_svg_token;

/* One head's attention map. Rows are queries, columns keys. */
typedef struct relattn_svg_map {
  const float *w;                 /* (n, n) weights, row i sums to 1 */
  int n;
  const relattn_svg_token *tok;   /* (n) labels of the positions */
  int clip;                       /* band half-width k; 0: no band drawn */
  int causal;                     /* keys after the query are masked */
  const char *title;              /* UTF-8, escaped here */
} relattn_svg_map;

/* Colour of a map cell: ramp(sqrt(w)), w in [0, 1]. Writes "#rrggbb". */
void relattn_svg_weight_colour(double w, char out[8]);
/* Colour of a surprise of bits: ramp(bits / RELATTN_SVG_SURPRISE_TOP). */
void relattn_svg_bits_colour(double bits, char out[8]);

/* The map as SVG text. *out is malloc'd (free() it), NUL-terminated, *len
** bytes. Returns RELATTN_OK, RELATTN_ERR_ARG or RELATTN_ERR_NOMEM. */
int relattn_svg_attention(const relattn_svg_map *m, char **out, size_t *len,
                          char *err, size_t errlen);

/* A text with each token shaded by its surprise. */
typedef struct relattn_svg_text {
  int n;                          /* <= RELATTN_SVG_MAX_TOKENS */
  const relattn_svg_token *tok;   /* (n) */
  const float *bits;              /* (n) -log2 p; NaN: not scored */
  const relattn_svg_token *top;   /* (n) the model's first choice, or NULL */
  const float *top_bits;          /* (n) its surprise, or NULL */
  const char *title;
} relattn_svg_text;

int relattn_svg_surprise(const relattn_svg_text *t, char **out, size_t *len,
                         char *err, size_t errlen);

/* Mean weight by distance: one panel per series. sum and count have
** 2 * range + 3 entries: [0] pools every distance < -range, [1 + range + d]
** is distance d for |d| <= range, [2 * range + 2] pools every distance
** > range. */
typedef struct relattn_svg_series {
  const char *label;              /* UTF-8 (escaped here); NULL: none */
  const double *sum;              /* (2 * range + 3) sums of weights */
  const double *count;            /* (2 * range + 3) pairs seen */
} relattn_svg_series;

int relattn_svg_profile(const relattn_svg_series *s, int n_series, int range,
                        int clip, const char *title, char **out, size_t *len,
                        char *err, size_t errlen);

/* The range of distances a profile keeps for a model with this clip (0:
** none known): 3 * clip, at least 8, at most RELATTN_SVG_MAX_RANGE. */
int relattn_svg_profile_range(int clip);

#endif /* RELATTN_SVG_H */

/*
** svg.c: pictures as SVG 1.1 text: an attention map with its clip band, the
** mean weight by relative distance (one panel per head), a text with each
** token shaded by its surprise. See svg.h for the inputs and the bounds.
**
** The output is plain SVG 1.1 (svg, g, rect, line, polyline, text, title),
** UTF-8, white background, sized in pixels so it reads at its own size.
** Each part sits in a <g id="..."> (cells, band, xlabels, ylabels, legend,
** tokens, bars, ...) so tools and tests can find it. Numbers are written
** with integer arithmetic: the host's locale cannot turn 0.5 into "0,5".
**
** Colour scales are piecewise linear through a few stops of falling
** lightness, so a darker cell always means a larger value: white through
** blue to navy for weights (on sqrt(w): a weight of 0.05 is visible, 1 is
** the darkest), white through yellow and red to dark purple for surprise
** (linear in bits, RELATTN_SVG_SURPRISE_TOP and above the darkest).
*/
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "relattn.h"

/* ---- output buffer ------------------------------------------------------ */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    char *p;
    while (cap < b->len + n + 1) {
      if (cap > SIZE_MAX / 2) {
        b->oom = 1;
        return;
      }
      cap *= 2;
    }
    p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

/* printf for integers and ready-made strings only (never %f: locale). */
static void putf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void putf(sbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* v with dec decimals (0..6), rounded, without the locale's help. */
static void fmtNum(char *out, size_t outlen, double v, int dec) {
  static const long long pow10[] = {1, 10, 100, 1000, 10000, 100000, 1000000};
  long long scaled, ip, fp;
  int neg;
  if (!isfinite(v)) v = 0;
  if (v > 1e12) v = 1e12;
  if (v < -1e12) v = -1e12;
  neg = v < 0;
  scaled = llround(fabs(v) * (double)pow10[dec]);
  ip = scaled / pow10[dec];
  fp = scaled % pow10[dec];
  if (scaled == 0) neg = 0;
  if (dec == 0)
    snprintf(out, outlen, "%s%lld", neg ? "-" : "", ip);
  else
    snprintf(out, outlen, "%s%lld.%0*lld", neg ? "-" : "", ip, dec, fp);
}

/* A coordinate: one decimal, trailing ".0" dropped. */
static void putPx(sbuf *b, double v) {
  char tmp[48];
  size_t n;
  fmtNum(tmp, sizeof tmp, v, 1);
  n = strlen(tmp);
  if (n > 2 && tmp[n - 2] == '.' && tmp[n - 1] == '0') tmp[n - 2] = 0;
  puts_(b, tmp);
}

/* ---- text: UTF-8 checked, escaped for XML, shown safely ------------------ */

/* Length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no
** surrogates, nothing past U+10FFFF), its code point in *cp; 0 if invalid. */
static int utf8Next(const uint8_t *s, size_t n, uint32_t *cp) {
  uint8_t c = s[0];
  if (c < 0x80) {
    *cp = c;
    return 1;
  }
  if (c >= 0xC2 && c <= 0xDF) {
    if (n < 2 || (s[1] & 0xC0) != 0x80) return 0;
    *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
    return 2;
  }
  if (c >= 0xE0 && c <= 0xEF) {
    uint8_t lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    if (n < 3 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80) return 0;
    *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) |
          (s[2] & 0x3F);
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    uint8_t lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    if (n < 4 || s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 ||
        (s[3] & 0xC0) != 0x80)
      return 0;
    *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
  }
  return 0;
}

/* Code points shown as their bytes: controls (C0, DEL, C1), what XML 1.0
** forbids (U+FFFE, U+FFFF), and the invisible bidi controls that could make
** a label read as something else. */
static int hiddenCp(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0xFFFE ||
         cp == 0xFFFF || cp == 0x200E || cp == 0x200F || cp == 0x061C ||
         (cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Columns a code point takes in a monospace font: 0 for combining marks,
** 2 for East Asian wide characters, else 1 (a rough table: layout only). */
static int cpCols(uint32_t cp) {
  if ((cp >= 0x300 && cp <= 0x36F) || (cp >= 0x200B && cp <= 0x200D))
    return 0;
  if ((cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
      (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
      (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
      (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1F64F) ||
      (cp >= 0x1F900 && cp <= 0x1F9FF) || (cp >= 0x20000 && cp <= 0x3FFFD))
    return 2;
  return 1;
}

enum { TEXT_SPACES = 1 }; /* flags: show spaces as U+2423 (labels) */

/* Appends s escaped (or, with b NULL, only measures it); stops before
** passing max_cols columns (0: no limit) and ends with U+2026 then. Returns
** the columns taken. */
static int putText(sbuf *b, const uint8_t *s, size_t n, int flags,
                   int max_cols) {
  size_t i = 0;
  int cols = 0;
  while (i < n) {
    uint32_t cp = 0;
    int len = utf8Next(s + i, n - i, &cp);
    char esc[48];
    const char *out;
    size_t out_len;
    int w;
    if (len == 0 || hiddenCp(cp)) {
      int k, m = len ? len : 1;
      for (k = 0; k < m; k++)
        snprintf(esc + 4 * k, sizeof esc - 4 * k, "\\x%02X", s[i + k]);
      out = esc;
      out_len = 4 * (size_t)m;
      w = 4 * m;
      len = m;
    } else if (cp == '&') {
      out = "&amp;", out_len = 5, w = 1;
    } else if (cp == '<') {
      out = "&lt;", out_len = 4, w = 1;
    } else if (cp == '>') {
      out = "&gt;", out_len = 4, w = 1;
    } else if (cp == '"') {
      out = "&quot;", out_len = 6, w = 1;
    } else if (cp == '\'') {
      out = "&apos;", out_len = 6, w = 1;
    } else if (cp == '\\') {
      out = "\\\\", out_len = 2, w = 2;
    } else if (cp == ' ' && (flags & TEXT_SPACES)) {
      out = "\xE2\x90\xA3", out_len = 3, w = 1; /* U+2423 OPEN BOX */
    } else {
      out = (const char *)s + i, out_len = (size_t)len, w = cpCols(cp);
    }
    if (max_cols > 0 && cols + w > max_cols - 1 && i + (size_t)len < n) {
      if (b) puts_(b, "\xE2\x80\xA6"); /* U+2026 HORIZONTAL ELLIPSIS */
      return cols + 1;
    }
    if (b) put(b, out, out_len);
    cols += w;
    i += (size_t)len;
  }
  return cols;
}

/* A token as a label: its text, or <name> for a special token. */
static int putToken(sbuf *b, const relattn_svg_token *t, int flags,
                    int max_cols) {
  int cols;
  if (!t->special) return putText(b, t->text, t->len, flags, max_cols);
  if (b) puts_(b, "&lt;");
  cols = putText(b, t->text, t->len, 0, max_cols ? max_cols - 2 : 0);
  if (b) puts_(b, "&gt;");
  return cols + 2;
}

static void putTitle(sbuf *b, const char *title) {
  if (!title) return;
  putText(b, (const uint8_t *)title, strlen(title), 0, 0);
}

/* ---- colour ------------------------------------------------------------- */

typedef struct stop {
  double t;
  int r, g, bl;
} stop;

/* White to navy through light and mid blue. */
static const stop weight_ramp[] = {
    {0.0, 255, 255, 255}, {0.3, 170, 204, 232}, {0.65, 60, 122, 190},
    {1.0, 10, 30, 80}};
/* White to dark purple through yellow, orange and red. */
static const stop bits_ramp[] = {
    {0.0, 255, 255, 255}, {0.25, 254, 224, 144}, {0.5, 249, 140, 60},
    {0.75, 210, 40, 40},  {1.0, 90, 0, 40}};

static void ramp(const stop *s, int n, double t, int rgb[3]) {
  int i = 0;
  double f;
  if (!(t > 0)) t = 0; /* NaN too */
  if (t > 1) t = 1;
  while (i < n - 2 && t > s[i + 1].t) i++;
  f = (t - s[i].t) / (s[i + 1].t - s[i].t);
  rgb[0] = (int)lround(s[i].r + f * (s[i + 1].r - s[i].r));
  rgb[1] = (int)lround(s[i].g + f * (s[i + 1].g - s[i].g));
  rgb[2] = (int)lround(s[i].bl + f * (s[i + 1].bl - s[i].bl));
}

static void hexColour(const int rgb[3], char out[8]) {
  snprintf(out, 8, "#%02x%02x%02x", rgb[0] & 255, rgb[1] & 255, rgb[2] & 255);
}

/* Relative luminance in 0..255 (Rec. 709 weights, on the coded values:
** enough to pick black or white text). */
static double lum(const int rgb[3]) {
  return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2];
}

static double weightT(double w) { return w > 0 ? sqrt(w < 1 ? w : 1) : 0; }

void relattn_svg_weight_colour(double w, char out[8]) {
  int rgb[3];
  ramp(weight_ramp, 4, weightT(w), rgb);
  hexColour(rgb, out);
}

void relattn_svg_bits_colour(double bits, char out[8]) {
  int rgb[3];
  ramp(bits_ramp, 5, bits / RELATTN_SVG_SURPRISE_TOP, rgb);
  hexColour(rgb, out);
}

/* ---- shared pieces ------------------------------------------------------- */

#define FONT "DejaVu Sans, Verdana, Arial, sans-serif"
#define MONO "DejaVu Sans Mono, Menlo, Consolas, monospace"
#define BAND_COLOUR "#e8590c"

/* The picture is w x h units; it takes the window's width up to w pixels, so
 * a wide one (a profile of 16 panels is about 1500) shrinks to fit instead of
 * running off the right edge. */
static void header(sbuf *b, int w, int h, const char *title) {
  putf(b,
       "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
       "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
       "width=\"100%%\" viewBox=\"0 0 %d %d\" "
       "style=\"max-width:%dpx;height:auto\" "
       "font-family=\"" FONT "\" font-size=\"12\">\n<title>",
       w, h, w);
  putTitle(b, title);
  putf(b,
       "</title>\n<desc>made by relattn %s</desc>\n"
       "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
       RELATTN_VERSION, w, h);
  if (title) {
    puts_(b, "<text id=\"heading\" x=\"16\" y=\"22\" font-size=\"15\" "
             "font-weight=\"bold\">");
    putTitle(b, title);
    puts_(b, "</text>\n");
  }
}

/* The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten
** that is >= x > 0 (an axis that the tallest bar nearly fills). */
static double niceCeil(double x) {
  static const double m[] = {1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10};
  double p = pow(10, floor(log10(x)));
  size_t i;
  for (i = 0; i < sizeof m / sizeof m[0] - 1; i++)
    if (x <= m[i] * p * (1 + 1e-9)) break;
  return m[i] * p;
}

/* A tick step of 1, 2, 5 x 10^k positions that is >= x. */
static int niceStep(double x) {
  int p = 1;
  if (x <= 1) return 1;
  for (;;) {
    if (p >= x) return p;
    if (2 * p >= x) return 2 * p;
    if (5 * p >= x) return 5 * p;
    if (p > 100000000) return p * 10;
    p *= 10;
  }
}

static int finish(sbuf *b, char **out, size_t *len, char *err, size_t errlen) {
  puts_(b, "</svg>\n");
  if (b->oom) {
    free(b->p);
    *out = NULL;
    *len = 0;
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "out of memory for the picture");
  }
  *out = b->p;
  *len = b->len;
  return RELATTN_OK;
}

/* ---- attention map ------------------------------------------------------- */

int relattn_svg_attention(const relattn_svg_map *m, char **out, size_t *len,
                          char *err, size_t errlen) {
  sbuf b = {0};
  int n = m->n, per, bins, cell, labels, font, rotate = 0, max_cols = 0;
  int i, j, bi, bj, x0, y0, side, lw, lh, w, h, legend_x, bar_h, k = m->clip;
  double cw;
  char colour[8], num[48];
  *out = NULL;
  *len = 0;
  if (n < 1 || !m->w || !m->tok)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG, "the map is empty");
  if (k < 0) k = 0;
  per = (n + RELATTN_SVG_MAX_SIDE - 1) / RELATTN_SVG_MAX_SIDE;
  bins = (n + per - 1) / per;
  cell = 720 / bins;
  if (cell > 18) cell = 18;
  if (cell < 4) cell = 4;
  side = bins * cell;
  labels = per == 1 && cell >= 10;
  font = labels ? (cell - 2 < 12 ? cell - 2 : 12) : 11;
  cw = 0.62 * font;
  if (labels) {
    for (i = 0; i < n; i++) {
      int c = putToken(NULL, &m->tok[i], TEXT_SPACES, 12);
      if (c > max_cols) max_cols = c;
    }
    rotate = max_cols > 1;
    lw = (int)(max_cols * cw) + 8;
    lh = rotate ? lw : font + 6;
  } else {
    char digits[24];
    lw = (int)(snprintf(digits, sizeof digits, "%d", n) * 7) + 10;
    lh = 18;
  }
  x0 = 30 + lw;
  y0 = 36 + 18 + lh;
  legend_x = x0 + side + 28;
  bar_h = 200;
  w = legend_x + 170;
  h = y0 + side + (per > 1 ? 48 : 30);
  if (h < y0 + bar_h + 120) h = y0 + bar_h + 120;

  header(&b, w, h, m->title);

  /* axis titles */
  putf(&b,
       "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">"
       "keys (the positions attended to)</text>\n",
       x0 + side / 2, 36 + 12);
  putf(&b,
       "<text transform=\"translate(%d,%d) rotate(-90)\" "
       "text-anchor=\"middle\" fill=\"#444\">queries</text>\n",
       18, y0 + side / 2);

  /* the plot: a grey ground where keys are masked, cells over it */
  putf(&b,
       "<g id=\"cells\">\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
       "fill=\"#eeeeee\"/>\n",
       x0, y0, side, side);
  for (bi = 0; bi < bins; bi++) {
    int q_lo = bi * per, q_hi = q_lo + per < n ? q_lo + per : n;
    for (bj = 0; bj < bins; bj++) {
      int k_lo = bj * per, k_hi = k_lo + per < n ? k_lo + per : n;
      double sum = 0;
      if (m->causal && k_lo > q_hi - 1) break; /* every key masked */
      for (i = q_lo; i < q_hi; i++)
        for (j = k_lo; j < k_hi; j++) {
          double x = m->w[(size_t)i * n + j];
          if (isfinite(x)) sum += x;
        }
      sum /= (q_hi - q_lo);
      relattn_svg_weight_colour(sum, colour);
      fmtNum(num, sizeof num, sum, 4);
      putf(&b,
           "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
           "fill=\"%s\"><title>",
           x0 + bj * cell, y0 + bi * cell, cell, cell, colour);
      if (per == 1)
        putf(&b, "query %d, key %d, distance %d: %s", q_lo, k_lo,
             k_lo - q_lo, num);
      else
        putf(&b, "queries %d-%d, keys %d-%d: %s", q_lo, q_hi - 1, k_lo,
             k_hi - 1, num);
      puts_(&b, "</title></rect>\n");
    }
  }
  puts_(&b, "</g>\n");

  /* the clip band: key - query = -k + 1/2 and k - 1/2, in token units
  ** (cell (i, j) spans [j, j+1] x [i, i+1]), between the cells of distance
  ** k - 1 (inside) and k (the edge rows of the table) */
  puts_(&b, "<g id=\"band\">\n");
  if (k > 0 && k < n) {
    double s = (double)cell / per, c = k - 0.5;
    puts_(&b, "<line x1=\"");
    putPx(&b, x0);
    puts_(&b, "\" y1=\"");
    putPx(&b, y0 + c * s);
    puts_(&b, "\" x2=\"");
    putPx(&b, x0 + (n - c) * s);
    puts_(&b, "\" y2=\"");
    putPx(&b, y0 + n * s);
    puts_(&b, "\" stroke=\"" BAND_COLOUR "\" stroke-width=\"1.5\" "
              "stroke-dasharray=\"6 3\"/>\n");
    if (!m->causal) {
      puts_(&b, "<line x1=\"");
      putPx(&b, x0 + c * s);
      puts_(&b, "\" y1=\"");
      putPx(&b, y0);
      puts_(&b, "\" x2=\"");
      putPx(&b, x0 + n * s);
      puts_(&b, "\" y2=\"");
      putPx(&b, y0 + (n - c) * s);
      puts_(&b, "\" stroke=\"" BAND_COLOUR "\" stroke-width=\"1.5\" "
                "stroke-dasharray=\"6 3\"/>\n");
    }
  }
  puts_(&b, "</g>\n");

  /* labels: every token's text, or position ticks */
  puts_(&b, "<g id=\"ylabels\" fill=\"#222\">\n");
  if (labels) {
    for (i = 0; i < n; i++) {
      putf(&b, "<text x=\"%d\" y=\"", x0 - 4);
      putPx(&b, y0 + i * cell + cell / 2.0 + font * 0.35);
      putf(&b, "\" font-family=\"" MONO "\" font-size=\"%d\" "
               "text-anchor=\"end\"%s>",
           font, m->tok[i].special ? " font-style=\"italic\" fill=\"#777\""
                                    : "");
      putToken(&b, &m->tok[i], TEXT_SPACES, 12);
      puts_(&b, "</text>\n");
    }
  } else {
    int step = niceStep(36.0 * per / cell);
    for (i = 0; i < n; i += step) {
      putf(&b, "<text x=\"%d\" y=\"", x0 - 4);
      putPx(&b, y0 + (double)i * cell / per + 4);
      putf(&b, "\" font-size=\"10\" text-anchor=\"end\">%d</text>\n", i);
    }
  }
  puts_(&b, "</g>\n<g id=\"xlabels\" fill=\"#222\">\n");
  if (labels) {
    for (j = 0; j < n; j++) {
      const char *style =
          m->tok[j].special ? " font-style=\"italic\" fill=\"#777\"" : "";
      if (rotate) {
        puts_(&b, "<text transform=\"translate(");
        putPx(&b, x0 + j * cell + cell / 2.0 + font * 0.35);
        putf(&b, ",%d) rotate(-90)\" font-family=\"" MONO "\" "
                 "font-size=\"%d\"%s>",
             y0 - 4, font, style);
      } else {
        puts_(&b, "<text x=\"");
        putPx(&b, x0 + j * cell + cell / 2.0);
        putf(&b, "\" y=\"%d\" font-family=\"" MONO "\" font-size=\"%d\" "
                 "text-anchor=\"middle\"%s>",
             y0 - 4, font, style);
      }
      putToken(&b, &m->tok[j], TEXT_SPACES, 12);
      puts_(&b, "</text>\n");
    }
  } else {
    int step = niceStep(48.0 * per / cell);
    for (j = 0; j < n; j += step) {
      puts_(&b, "<text x=\"");
      putPx(&b, x0 + (double)j * cell / per);
      putf(&b, "\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\">%d"
               "</text>\n",
           y0 - 5, j);
    }
  }
  puts_(&b, "</g>\n");

  /* legend: the colour bar on a sqrt scale, then the band */
  {
    static const double ticks[] = {0, 0.01, 0.05, 0.1, 0.25, 0.5, 1};
    const int steps = 50, ly = y0 + 20;
    int s;
    putf(&b, "<g id=\"legend\">\n<text x=\"%d\" y=\"%d\" fill=\"#222\">%s"
             "</text>\n",
         legend_x, y0 + 6, per == 1 ? "weight" : "weight per query");
    for (s = 0; s < steps; s++) {
      double t = (s + 0.5) / steps;
      int rgb[3];
      ramp(weight_ramp, 4, t, rgb);
      hexColour(rgb, colour);
      puts_(&b, "<rect x=\"");
      putf(&b, "%d\" y=\"", legend_x);
      putPx(&b, ly + bar_h - (double)(s + 1) * bar_h / steps);
      puts_(&b, "\" width=\"16\" height=\"");
      putPx(&b, (double)bar_h / steps + 0.5);
      putf(&b, "\" fill=\"%s\"/>\n", colour);
    }
    putf(&b, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"%d\" "
             "fill=\"none\" stroke=\"#888\"/>\n",
         legend_x, ly, bar_h);
    for (s = 0; s < (int)(sizeof ticks / sizeof ticks[0]); s++) {
      double y = ly + bar_h - sqrt(ticks[s]) * bar_h;
      puts_(&b, "<line x1=\"");
      putf(&b, "%d\" x2=\"%d\" y1=\"", legend_x + 16, legend_x + 20);
      putPx(&b, y);
      puts_(&b, "\" y2=\"");
      putPx(&b, y);
      puts_(&b, "\" stroke=\"#444\"/>\n<text x=\"");
      putf(&b, "%d\" y=\"", legend_x + 23);
      putPx(&b, y + 4);
      puts_(&b, "\" font-size=\"11\" fill=\"#222\">");
      fmtNum(num, sizeof num, ticks[s], ticks[s] < 0.1 && ticks[s] > 0 ? 2
                                        : ticks[s] == 0.25 ? 2 : 1);
      putf(&b, "%s</text>\n", num);
    }
    putf(&b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#444\">"
             "shade: square root</text>\n",
         legend_x, ly + bar_h + 16);
    if (k > 0) {
      int yb = ly + bar_h + 40;
      putf(&b, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" "
               "stroke=\"" BAND_COLOUR "\" stroke-width=\"1.5\" "
               "stroke-dasharray=\"6 3\"/>\n",
           legend_x, legend_x + 24, yb - 4, yb - 4);
      putf(&b, "<text x=\"%d\" y=\"%d\" font-size=\"11\" fill=\"#222\">"
               "clip band edge:</text>\n<text x=\"%d\" y=\"%d\" "
               "font-size=\"11\" fill=\"#222\">|key - query| &lt; %d "
               "inside</text>\n",
           legend_x + 30, yb, legend_x, yb + 16, k);
    }
    if (m->causal)
      putf(&b, "<rect x=\"%d\" y=\"%d\" width=\"16\" height=\"12\" "
               "fill=\"#eeeeee\"/>\n<text x=\"%d\" y=\"%d\" font-size=\"11\" "
               "fill=\"#222\">masked (causal)</text>\n",
           legend_x, ly + bar_h + 66, legend_x + 22, ly + bar_h + 76);
    puts_(&b, "</g>\n");
  }
  if (per > 1)
    putf(&b, "<text id=\"note\" x=\"%d\" y=\"%d\" font-size=\"11\" "
             "fill=\"#444\">%d positions in all, pooled in bins of %d: a "
             "cell is the weight a query puts on those keys, averaged over "
             "the bin's queries</text>\n",
         x0, y0 + side + 20, n, per);
  return finish(&b, out, len, err, errlen);
}

/* ---- profile: mean weight by distance ------------------------------------ */

int relattn_svg_profile_range(int clip) {
  int r = clip > 0 ? 3 * clip : 32;
  if (clip > RELATTN_SVG_MAX_RANGE) r = RELATTN_SVG_MAX_RANGE;
  if (r < 8) r = 8;
  if (r > RELATTN_SVG_MAX_RANGE) r = RELATTN_SVG_MAX_RANGE;
  return r;
}

int relattn_svg_profile(const relattn_svg_series *s, int n_series, int range,
                        int clip, const char *title, char **out, size_t *len,
                        char *err, size_t errlen) {
  sbuf b = {0};
  int nb_all = 2 * range + 3, lo = nb_all, hi = -1, nb, i, p, cols, rows;
  int bw, plot_w, plot_h = 120, panel_w, panel_h, top = 40, w, h;
  double ymax = 0;
  char num[48];
  *out = NULL;
  *len = 0;
  if (n_series < 1 || n_series > RELATTN_SVG_MAX_SERIES)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "a profile has 1 to %d series, not %d",
                          RELATTN_SVG_MAX_SERIES, n_series);
  if (range < 1 || range > RELATTN_SVG_MAX_RANGE)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "the range must be 1 to %d, not %d",
                          RELATTN_SVG_MAX_RANGE, range);
  for (p = 0; p < n_series; p++)
    for (i = 0; i < nb_all; i++)
      if (s[p].count[i] > 0) {
        double mean = s[p].sum[i] / s[p].count[i];
        if (i < lo) lo = i;
        if (i > hi) hi = i;
        if (mean > ymax) ymax = mean;
      }
  if (hi < 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG, "no pairs to show");
  ymax = ymax > 0 ? niceCeil(ymax) : 1;
  nb = hi - lo + 1;
  cols = n_series < 4 ? n_series : 4;
  rows = (n_series + cols - 1) / cols;
  bw = (cols == 1 ? 720 : 300) / nb;
  if (bw > 14) bw = 14;
  if (bw < 2) bw = 2;
  plot_w = nb * bw;
  panel_w = 50 + plot_w + 20;
  panel_h = 24 + plot_h + 34;
  w = 16 + cols * panel_w;
  if (w < 640) w = 640;
  h = top + rows * panel_h + 50;

  header(&b, w, h, title);
  puts_(&b, "<g id=\"panels\">\n");
  for (p = 0; p < n_series; p++) {
    int px = 16 + (p % cols) * panel_w + 50, py = top + (p / cols) * panel_h;
    int y_base = py + 24 + plot_h, step = niceStep(36.0 / bw), t;
    /* bar i sits at px + (i - lo) * bw; distance of bar i: i - range - 1 */
    putf(&b, "<g class=\"panel\">\n<text x=\"%d\" y=\"%d\" font-size=\"13\" "
             "font-weight=\"bold\" fill=\"#222\">",
         px, py + 16);
    if (s[p].label) putTitle(&b, s[p].label);
    puts_(&b, "</text>\n");
    /* the band |d| < clip, shaded, with its edges dashed */
    if (clip > 0) {
      int a = -clip + 1 + range + 1, z = clip - 1 + range + 1;
      if (a < lo) a = lo;
      if (z > hi) z = hi;
      if (a <= z) {
        putf(&b, "<rect class=\"band\" x=\"%d\" y=\"%d\" width=\"%d\" "
                 "height=\"%d\" fill=\"#fde8d7\"/>\n",
             px + (a - lo) * bw, py + 24, (z - a + 1) * bw, plot_h);
        if (a > lo || -clip + range + 1 >= lo)
          putf(&b, "<line class=\"edge\" x1=\"%d\" x2=\"%d\" y1=\"%d\" "
                   "y2=\"%d\" stroke=\"" BAND_COLOUR "\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"6 3\"/>\n",
               px + (a - lo) * bw, px + (a - lo) * bw, py + 24, y_base);
        if (z < hi)
          putf(&b, "<line class=\"edge\" x1=\"%d\" x2=\"%d\" y1=\"%d\" "
                   "y2=\"%d\" stroke=\"" BAND_COLOUR "\" stroke-width=\"1.5\" "
                   "stroke-dasharray=\"6 3\"/>\n",
               px + (z + 1 - lo) * bw, px + (z + 1 - lo) * bw, py + 24,
               y_base);
      }
    }
    /* y axis: 0, half, top, with light grid lines */
    for (t = 0; t <= 2; t++) {
      int y = y_base - t * plot_h / 2;
      putf(&b, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" "
               "stroke=\"%s\"/>\n<text x=\"%d\" y=\"%d\" font-size=\"10\" "
               "text-anchor=\"end\" fill=\"#444\">",
           px - 3, px + plot_w, y, y, t ? "#e4e4e4" : "#888", px - 5, y + 4);
      fmtNum(num, sizeof num, ymax * t / 2, ymax * t / 2 < 0.1 && t ? 3 : 2);
      putf(&b, "%s</text>\n", num);
    }
    /* bars */
    puts_(&b, "<g class=\"bars\">\n");
    for (i = lo; i <= hi; i++) {
      double mean, bar;
      char colour[8];
      int d = i - range - 1, pooled = i == 0 || i == nb_all - 1;
      if (!(s[p].count[i] > 0)) continue;
      mean = s[p].sum[i] / s[p].count[i];
      bar = mean > 0 ? mean / ymax * plot_h : 0;
      snprintf(colour, sizeof colour, "%s", pooled ? "#9fb8d8" : "#3c7abe");
      puts_(&b, "<rect x=\"");
      putf(&b, "%d\" y=\"", px + (i - lo) * bw);
      putPx(&b, y_base - bar);
      putf(&b, "\" width=\"%d\" height=\"", bw > 3 ? bw - 1 : bw);
      putPx(&b, bar);
      putf(&b, "\" fill=\"%s\"><title>", colour);
      if (pooled)
        putf(&b, "distances %s %d (pooled)", i == 0 ? "&lt;" : "&gt;",
             i == 0 ? -range : range);
      else
        putf(&b, "distance %d", d);
      fmtNum(num, sizeof num, mean, 4);
      putf(&b, ": mean weight %s over ", num);
      fmtNum(num, sizeof num, s[p].count[i], 0);
      putf(&b, "%s pairs</title></rect>\n", num);
    }
    puts_(&b, "</g>\n");
    /* x axis: distances at multiples of a step, 0 always */
    for (i = lo; i <= hi; i++) {
      int d = i - range - 1;
      if (i == 0 || i == nb_all - 1 || d % step) continue;
      putf(&b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" "
               "text-anchor=\"middle\" fill=\"#444\">%d</text>\n",
           px + (i - lo) * bw + bw / 2, y_base + 13, d);
    }
    putf(&b, "<text x=\"%d\" y=\"%d\" font-size=\"10\" text-anchor=\"middle\" "
             "fill=\"#666\">distance = key - query</text>\n</g>\n",
         px + plot_w / 2, y_base + 27);
  }
  puts_(&b, "</g>\n");
  /* legend */
  {
    int ly = h - 26;
    puts_(&b, "<g id=\"legend\" font-size=\"11\" fill=\"#222\">\n");
    putf(&b, "<rect x=\"16\" y=\"%d\" width=\"12\" height=\"12\" "
             "fill=\"#3c7abe\"/>\n<text x=\"33\" y=\"%d\">mean weight of the "
             "pairs at that distance</text>\n",
         ly, ly + 10);
    putf(&b, "<rect x=\"300\" y=\"%d\" width=\"12\" height=\"12\" "
             "fill=\"#9fb8d8\"/>\n<text x=\"317\" y=\"%d\">beyond &#177;%d, "
             "pooled</text>\n",
         ly, ly + 10, range);
    if (clip > 0)
      putf(&b, "<rect x=\"450\" y=\"%d\" width=\"12\" height=\"12\" "
               "fill=\"#fde8d7\" stroke=\"" BAND_COLOUR "\" "
               "stroke-dasharray=\"3 2\"/>\n<text x=\"467\" y=\"%d\">clip band "
               "|distance| &lt; %d</text>\n",
           ly, ly + 10, clip);
    puts_(&b, "</g>\n");
  }
  return finish(&b, out, len, err, errlen);
}

/* ---- surprise strip ------------------------------------------------------ */

/* A unit is what one label shows: one token, or the tokens that together
** make one UTF-8 character (byte tokens of a multi-byte character). */
typedef struct unit {
  int first, count;  /* tokens [first, first + count) */
  int cols;          /* columns of its label */
  int x, y;          /* placed at, in pixels */
  int ends_word;     /* its text ends with a space */
  int ends_line;     /* its text ends with a newline */
} unit;

/* Tokens from i on whose bytes, joined, are exactly one valid UTF-8
** character that none of them is alone; 0 when there are none such. */
static int utf8Group(const relattn_svg_token *tok, int n, int i) {
  uint8_t buf[4];
  size_t have = 0;
  int k;
  uint32_t cp;
  if (tok[i].special || tok[i].len == 0 || tok[i].len >= 4 ||
      utf8Next(tok[i].text, tok[i].len, &cp) == (int)tok[i].len)
    return 0;
  for (k = i; k < n && !tok[k].special; k++) {
    if (have + tok[k].len > 4 || tok[k].len == 0) return 0;
    memcpy(buf + have, tok[k].text, tok[k].len);
    have += tok[k].len;
    if (utf8Next(buf, have, &cp) == (int)have)
      return k > i && !hiddenCp(cp) ? k - i + 1 : 0;
  }
  return 0;
}

/* The bytes of a group that utf8Group found (4 at most) into buf. */
static size_t joinBytes(const relattn_svg_token *tok, int first, int count,
                        uint8_t buf[4]) {
  size_t have = 0;
  int k;
  for (k = first; k < first + count; k++) {
    memcpy(buf + have, tok[k].text, tok[k].len);
    have += tok[k].len;
  }
  return have;
}

static void putTokenTitle(sbuf *b, const relattn_svg_text *t, int i) {
  char num[48];
  putf(b, "<title>token %d ", i);
  puts_(b, "&#8220;");
  putToken(b, &t->tok[i], TEXT_SPACES, 40);
  puts_(b, "&#8221;: ");
  if (isnan(t->bits[i])) {
    puts_(b, "not scored (no token before it)");
  } else {
    fmtNum(num, sizeof num, t->bits[i], 2);
    putf(b, "%s bits", num);
    if (t->top && t->top_bits) {
      puts_(b, "; the model expected &#8220;");
      putToken(b, &t->top[i], TEXT_SPACES, 40);
      fmtNum(num, sizeof num, t->top_bits[i], 2);
      putf(b, "&#8221; (%s bits)", num);
    }
  }
  puts_(b, "</title>");
}

int relattn_svg_surprise(const relattn_svg_text *t, char **out, size_t *len,
                         char *err, size_t errlen) {
  sbuf b = {0};
  const double cw = 9.0;            /* px per column at font-size 15 */
  const int line_w = 780, line_h = 26, box_h = 22, left = 16, top = 44;
  unit *u;
  int n = t->n, nu = 0, i, lines, x, y, w, h, scored = 0, unscored = 0;
  double total = 0;
  char colour[8], num[48];
  *out = NULL;
  *len = 0;
  if (n < 1 || !t->tok || !t->bits)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG, "the text is empty");
  if (n > RELATTN_SVG_MAX_TOKENS)
    return relattn_errorf(err, errlen, RELATTN_ERR_TOOBIG,
                          "a surprise picture shows at most %d tokens, not %d",
                          RELATTN_SVG_MAX_TOKENS, n);
  u = malloc(sizeof *u * (size_t)n);
  if (!u)
    return relattn_errorf(err, errlen, RELATTN_ERR_NOMEM,
                          "out of memory for the picture");
  for (i = 0; i < n;) {
    unit *v = &u[nu++];
    const relattn_svg_token *tk;
    int g = utf8Group(t->tok, n, i);
    v->first = i;
    v->count = g ? g : 1;
    i += v->count;
    tk = &t->tok[i - 1];
    v->cols = 0;
    if (g) {
      uint8_t buf[4];
      size_t have = joinBytes(t->tok, v->first, v->count, buf);
      v->cols = putText(NULL, buf, have, 0, 0);
    } else {
      v->cols = putToken(NULL, &t->tok[v->first], 0, 24);
    }
    if (v->cols < 1) v->cols = 1;
    v->ends_word = !tk->special && tk->len > 0 && tk->text[tk->len - 1] == ' ';
    v->ends_line = !tk->special && tk->len > 0 && tk->text[tk->len - 1] == '\n';
  }
  /* lay out: words (units up to a space) kept on one line when they fit */
  x = 0;
  y = 0;
  for (i = 0; i < nu;) {
    int e = i, word = 0, k;
    while (e < nu) {
      word += (int)(u[e].cols * cw + 2);
      if (u[e++].ends_word || u[e - 1].ends_line) break;
    }
    if (x > 0 && x + word > line_w && word <= line_w) {
      x = 0;
      y++;
    }
    for (k = i; k < e; k++) {
      int uw = (int)(u[k].cols * cw + 2);
      if (x > 0 && x + uw > line_w) {
        x = 0;
        y++;
      }
      u[k].x = x;
      u[k].y = y;
      x += uw;
      if (u[k].ends_line) {
        x = 0;
        y++;
      }
    }
    i = e;
  }
  lines = x > 0 ? y + 1 : (y > 0 ? y : 1);
  w = left * 2 + line_w;
  h = top + lines * line_h + 96;

  for (i = 0; i < n; i++)
    if (isnan(t->bits[i]))
      unscored++;
    else {
      scored++;
      total += t->bits[i];
    }

  header(&b, w, h, t->title);
  puts_(&b, "<g id=\"tokens\" font-family=\"" MONO "\" font-size=\"15\">\n");
  for (i = 0; i < nu; i++) {
    const unit *v = &u[i];
    double uw = (int)(v->cols * cw + 2), sub = uw / v->count;
    int px = left + v->x, py = top + v->y * line_h, k, dark = 0;
    for (k = 0; k < v->count; k++) {
      int tk = v->first + k, rgb[3];
      double bits = t->bits[tk];
      if (isnan(bits)) {
        rgb[0] = rgb[1] = rgb[2] = 221;
      } else {
        ramp(bits_ramp, 5, bits / RELATTN_SVG_SURPRISE_TOP, rgb);
      }
      hexColour(rgb, colour);
      if (lum(rgb) < 120) dark = 1;
      puts_(&b, "<rect x=\"");
      putPx(&b, px + k * sub);
      putf(&b, "\" y=\"%d\" width=\"", py);
      putPx(&b, sub);
      putf(&b, "\" height=\"%d\" fill=\"%s\">", box_h, colour);
      putTokenTitle(&b, t, tk);
      puts_(&b, "</rect>\n");
    }
    /* the label: one per unit; a lone space needs none */
    if (v->count == 1 && !t->tok[v->first].special &&
        t->tok[v->first].len == 1 && t->tok[v->first].text[0] == ' ')
      continue;
    puts_(&b, "<text x=\"");
    putPx(&b, px + uw / 2);
    putf(&b, "\" y=\"%d\" text-anchor=\"middle\" xml:space=\"preserve\"%s>",
         py + 16, dark ? " fill=\"#ffffff\"" : "");
    if (v->count > 1) {
      uint8_t buf[4];
      size_t have = joinBytes(t->tok, v->first, v->count, buf);
      putText(&b, buf, have, 0, 0);
    } else {
      putToken(&b, &t->tok[v->first], 0, 24);
    }
    puts_(&b, "</text>\n");
  }
  puts_(&b, "</g>\n");

  /* legend: the scale in bits, 0 to the top and beyond */
  {
    const int lx = left, ly = top + lines * line_h + 30, bar_w = 384;
    const int steps = 64;
    int s;
    puts_(&b, "<g id=\"legend\" font-size=\"11\" fill=\"#222\">\n");
    putf(&b, "<text x=\"%d\" y=\"%d\" font-size=\"12\">surprise: bits, "
             "-log2 p(token | the tokens before it)</text>\n",
         lx, ly - 8);
    for (s = 0; s < steps; s++) {
      int rgb[3];
      ramp(bits_ramp, 5, (s + 0.5) / steps, rgb);
      hexColour(rgb, colour);
      putf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"14\" "
               "fill=\"%s\"/>\n",
           lx + s * bar_w / steps, ly, bar_w / steps, colour);
    }
    putf(&b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"14\" "
             "fill=\"none\" stroke=\"#888\"/>\n",
         lx, ly, bar_w);
    for (s = 0; s <= RELATTN_SVG_SURPRISE_TOP; s += 2) {
      int tx = lx + s * bar_w / RELATTN_SVG_SURPRISE_TOP;
      putf(&b, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" "
               "stroke=\"#444\"/>\n<text x=\"%d\" y=\"%d\" "
               "text-anchor=\"middle\">%d%s</text>\n",
           tx, tx, ly + 14, ly + 18, tx, ly + 30, s,
           s == RELATTN_SVG_SURPRISE_TOP ? "+" : "");
    }
    if (unscored)
      putf(&b, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" "
               "fill=\"#dddddd\"/>\n<text x=\"%d\" y=\"%d\">not scored"
               "</text>\n",
           lx + bar_w + 24, ly, lx + bar_w + 42, ly + 11);
    if (scored) {
      fmtNum(num, sizeof num, total / scored, 2);
      putf(&b, "<text x=\"%d\" y=\"%d\">mean %s bits over %d scored "
               "tokens</text>\n",
           lx + bar_w + 24, ly + 30, num, scored);
    }
    puts_(&b, "</g>\n");
  }
  free(u);
  return finish(&b, out, len, err, errlen);
}

/*
** test_svg.c: the pictures of src/svg.c. Output is valid UTF-8 with no
** control characters whatever the token bytes; hostile bytes are shown as
** \xNN and XML specials escaped; cells, bins and bars come out in the counts
** and with the values the inputs give (against a float64 recomputation);
** sizes stay bounded for long inputs; limits are refused with their message.
** The XML itself is parsed by the Python tests (tests/sql/test_svg.py).
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "relattn.h"
#include "svg.h"
#include "unit.h"

/* 1 when s is valid UTF-8 (RFC 3629) with no C0 control but \n, no DEL. */
static int clean_utf8(const char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = (unsigned char)s[i];
    int len, k;
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n') || c == 0x7F) return 0;
      i++;
      continue;
    }
    len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (!len || (c >= 0xE0 && c < 0xF0 && len != 3) || i + len > n) return 0;
    for (k = 1; k < len; k++)
      if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
    if (c == 0xC2 && (unsigned char)s[i + 1] < 0xA0) return 0; /* C1 */
    if (c == 0xE0 && (unsigned char)s[i + 1] < 0xA0) return 0;
    if (c == 0xED && (unsigned char)s[i + 1] > 0x9F) return 0;
    if (c == 0xF0 && (unsigned char)s[i + 1] < 0x90) return 0;
    if (c == 0xF4 && (unsigned char)s[i + 1] > 0x8F) return 0;
    i += (size_t)len;
  }
  return 1;
}

static size_t count(const char *s, const char *what) {
  size_t c = 0, n = strlen(what);
  while ((s = strstr(s, what))) {
    c++;
    s += n;
  }
  return c;
}

/* The text between the first `from` and the next `to` after it. */
static const char *section(const char *s, const char *from, char *buf,
                           size_t cap, const char *to) {
  const char *a = strstr(s, from), *z;
  size_t n;
  buf[0] = 0;
  if (!a) return buf;
  a += strlen(from);
  z = strstr(a, to);
  n = z ? (size_t)(z - a) : strlen(a);
  if (n >= cap) n = cap - 1;
  memcpy(buf, a, n);
  buf[n] = 0;
  return buf;
}

/* A random causal or full map whose rows sum to 1. */
static float *random_map(int n, int causal) {
  float *w = malloc(sizeof *w * (size_t)n * n);
  int i, j;
  for (i = 0; i < n; i++) {
    double sum = 0;
    int last = causal ? i : n - 1;
    for (j = 0; j < n; j++) {
      double x = j <= last ? exp(3 * unit_uniform()) : 0;
      w[(size_t)i * n + j] = (float)x;
      sum += x;
    }
    for (j = 0; j < n; j++) w[(size_t)i * n + j] /= (float)sum;
  }
  return w;
}

static relattn_svg_token *byte_tokens(int n, uint8_t *bytes) {
  relattn_svg_token *t = calloc((size_t)n, sizeof *t);
  int i;
  for (i = 0; i < n; i++) {
    t[i].text = &bytes[i];
    t[i].len = 1;
  }
  return t;
}

static void test_hostile_text(void) {
  /* every byte value as a token, in the map's labels and the strip */
  uint8_t bytes[256];
  relattn_svg_token tok[256];
  float *w = random_map(256, 1), bits[256];
  relattn_svg_map m;
  relattn_svg_text t;
  char *out = NULL, err[256];
  size_t len = 0;
  int i, rc;
  for (i = 0; i < 256; i++) {
    bytes[i] = (uint8_t)i;
    tok[i].text = &bytes[i];
    tok[i].len = 1;
    tok[i].special = 0;
    bits[i] = (float)(20 * (unit_uniform() + 1) / 2);
  }
  memset(&m, 0, sizeof m);
  m.w = w;
  m.n = 40; /* labels drawn at 40 positions: the first 40 bytes, controls */
  m.tok = tok;
  m.clip = 4;
  m.causal = 1;
  m.title = "<title> & \"quotes\" \x01 \xff";
  rc = relattn_svg_attention(&m, &out, &len, err, sizeof err);
  CHECK(rc == RELATTN_OK, "map: %s", err);
  CHECK(out && strlen(out) == len, "map length");
  CHECK(out && clean_utf8(out, len), "map output is clean UTF-8");
  CHECK(out && strstr(out, "&lt;title&gt; &amp; &quot;quotes&quot; \\x01 "
                           "\\xFF</title>"),
        "map title escaped");
  CHECK(out && strstr(out, ">\\x00</text>") && strstr(out, ">\\x1F</text>") &&
            strstr(out, ">\\x09</text>"),
        "control bytes shown as \\xNN");
  CHECK(out && strstr(out, ">&amp;</text>") && strstr(out, ">&apos;</text>") &&
            strstr(out, ">&quot;</text>") && strstr(out, ">\xE2\x90\xA3</text>"),
        "XML specials escaped, space shown as U+2423");
  free(out);

  memset(&t, 0, sizeof t);
  t.n = 256;
  t.tok = tok;
  t.bits = bits;
  t.title = "strip";
  rc = relattn_svg_surprise(&t, &out, &len, err, sizeof err);
  CHECK(rc == RELATTN_OK, "strip: %s", err);
  CHECK(out && clean_utf8(out, len), "strip output is clean UTF-8");
  /* one rect per token in the tokens group */
  {
    static char buf[1 << 20];
    section(out, "<g id=\"tokens\"", buf, sizeof buf, "</g>");
    CHECK(count(buf, "<rect") == 256, "strip has %zu token rects",
          count(buf, "<rect"));
    CHECK(strstr(buf, ">\\x80</text>") && strstr(buf, ">\\xFF</text>") &&
              strstr(buf, ">\\x7F</text>") && strstr(buf, ">&lt;</text>") &&
              strstr(buf, ">\\\\</text>"),
          "lone bytes over 0x7F, DEL, '<' and backslash escaped");
  }
  free(out);
  free(w);
}

static void test_utf8_groups_and_bidi(void) {
  /* "é" as two byte tokens is one label over two boxes; a lone lead byte,
  ** an overlong, a surrogate and U+202E are shown as bytes */
  static const uint8_t s[] = "a\xC3\xA9z\xC3 \xC0\xAF\xED\xA0\x80\xE2\x80\xAE!";
  int n = (int)sizeof s - 1, i, rc;
  uint8_t copy[sizeof s];
  relattn_svg_token *tok;
  float bits[sizeof s];
  relattn_svg_text t;
  char *out = NULL, err[256];
  size_t len;
  memcpy(copy, s, sizeof s);
  tok = byte_tokens(n, copy);
  for (i = 0; i < n; i++) bits[i] = (float)i;
  bits[0] = NAN;
  memset(&t, 0, sizeof t);
  t.n = n;
  t.tok = tok;
  t.bits = bits;
  rc = relattn_svg_surprise(&t, &out, &len, err, sizeof err);
  CHECK(rc == RELATTN_OK, "strip: %s", err);
  CHECK(out && clean_utf8(out, len), "clean UTF-8");
  CHECK(out && strstr(out, ">\xC3\xA9</text>"), "é drawn once");
  CHECK(out && count(out, "\xC3\xA9") == 1, "é once (titles show its bytes)");
  CHECK(out && strstr(out, ">\\xC3</text>"), "lone lead byte as \\xC3");
  CHECK(out && strstr(out, ">\\xC0</text>") && strstr(out, ">\\xAF</text>"),
        "overlong bytes");
  CHECK(out && strstr(out, ">\\xED</text>"), "surrogate bytes");
  CHECK(out && !strstr(out, "\xE2\x80\xAE"), "no raw U+202E");
  CHECK(out && strstr(out, "not scored"), "NaN is not scored");
  free(out);
  free(tok);
}

/* A map cell's title value, for the cell with this title prefix. */
static double cell_value(const char *svg, const char *prefix) {
  const char *p = strstr(svg, prefix);
  return p ? strtod(p + strlen(prefix), NULL) : -1;
}

static void test_map_cells_and_bins(void) {
  int sizes[] = {7, 128, 129, 1000}, s;
  for (s = 0; s < 4; s++) {
    int n = sizes[s], causal = s % 2 == 0, per, bins, i, j, rc, bad = 0;
    uint8_t *bytes = malloc((size_t)n);
    relattn_svg_token *tok;
    float *w = random_map(n, causal);
    relattn_svg_map m;
    char *out = NULL, err[256], prefix[96], colour[8], *cells;
    size_t len, expect;
    for (i = 0; i < n; i++) bytes[i] = (uint8_t)('a' + i % 26);
    tok = byte_tokens(n, bytes);
    memset(&m, 0, sizeof m);
    m.w = w;
    m.n = n;
    m.tok = tok;
    m.clip = 3;
    m.causal = causal;
    rc = relattn_svg_attention(&m, &out, &len, err, sizeof err);
    CHECK(rc == RELATTN_OK, "n %d: %s", n, err);
    per = (n + 127) / 128;
    bins = (n + per - 1) / per;
    expect = causal ? (size_t)bins * (bins + 1) / 2 : (size_t)bins * bins;
    cells = malloc(len + 1);
    section(out, "<g id=\"cells\">", cells, len + 1, "</g>");
    /* the ground plus one rect per drawn cell */
    CHECK(count(cells, "<rect") == expect + 1, "n %d: %zu rects, not %zu", n,
          count(cells, "<rect") - 1, expect);
    CHECK(count(out, "<line") >= 1, "band drawn");
    /* a few cells: the value is the bin's mass per query, and the fill is
    ** the colour of that value */
    for (i = 0; i < 5; i++) {
      int bi = (int)((unit_uniform() + 1) / 2 * bins) % bins;
      int bj = causal ? (int)((unit_uniform() + 1) / 2 * (bi + 1)) % (bi + 1)
                      : (int)((unit_uniform() + 1) / 2 * bins) % bins;
      int q_lo = bi * per, q_hi = q_lo + per < n ? q_lo + per : n;
      int k_lo = bj * per, k_hi = k_lo + per < n ? k_lo + per : n, a, c;
      double ref = 0, got;
      const char *at;
      for (a = q_lo; a < q_hi; a++)
        for (c = k_lo; c < k_hi; c++) ref += w[(size_t)a * n + c];
      ref /= q_hi - q_lo;
      if (per == 1)
        snprintf(prefix, sizeof prefix, "<title>query %d, key %d, distance "
                 "%d: ", q_lo, k_lo, k_lo - q_lo);
      else
        snprintf(prefix, sizeof prefix, "<title>queries %d-%d, keys %d-%d: ",
                 q_lo, q_hi - 1, k_lo, k_hi - 1);
      got = cell_value(cells, prefix);
      if (fabs(got - ref) > 0.00005 + 1e-6) bad++;
      relattn_svg_weight_colour(ref, colour);
      at = strstr(cells, prefix);
      /* the rect's fill comes right before its title */
      while (at && at > cells && strncmp(at, "fill=\"", 6)) at--;
      if (!at || strncmp(at + 6, colour, 7)) bad++;
    }
    CHECK(bad == 0, "n %d: %d cells differ from the float64 bin mass", n,
          bad);
    /* bounded: 128 x 128 cells at most, whatever n */
    CHECK(len < ((size_t)2 << 20), "n %d: %zu bytes", n, len);
    CHECK(clean_utf8(out, len), "clean");
    if (n == 1000) CHECK(strstr(out, "pooled in bins of 8"), "bins noted");
    free(cells);
    free(out);
    free(tok);
    free(bytes);
    free(w);
    (void)j;
  }
}

static void test_colours(void) {
  char a[8], b[8];
  int i, mono = 1;
  double prev = 1e9;
  relattn_svg_weight_colour(0, a);
  relattn_svg_weight_colour(1, b);
  CHECK(strcmp(a, "#ffffff") == 0 && strcmp(b, "#0a1e50") == 0,
        "weight ends %s %s", a, b);
  relattn_svg_bits_colour(NAN, a);
  CHECK(strcmp(a, "#ffffff") == 0, "NaN bits %s", a);
  /* darker as the value grows */
  for (i = 0; i <= 100; i++) {
    unsigned r, g, bl;
    double l;
    relattn_svg_bits_colour(i * 0.2, a);
    sscanf(a, "#%02x%02x%02x", &r, &g, &bl);
    l = 0.2126 * r + 0.7152 * g + 0.0722 * bl;
    if (l > prev + 1e-9) mono = 0;
    prev = l;
  }
  CHECK(mono, "bits ramp darkens");
}

static void test_profile(void) {
  int range = relattn_svg_profile_range(16), nb = 2 * range + 3, p, i, rc;
  double sum[3][2 * 128 + 3], cnt[3][2 * 128 + 3];
  relattn_svg_series s[65];
  char *out = NULL, err[256];
  size_t len;
  CHECK(range == 48, "range for clip 16: %d", range);
  CHECK(relattn_svg_profile_range(0) == 32 &&
            relattn_svg_profile_range(1) == 8 &&
            relattn_svg_profile_range(100) == RELATTN_SVG_MAX_RANGE,
        "ranges");
  for (p = 0; p < 3; p++) {
    for (i = 0; i < nb; i++) {
      cnt[p][i] = i <= range + 1 ? 10 : 0; /* distances <= 0 only */
      sum[p][i] = cnt[p][i] * (unit_uniform() + 1) / 4;
    }
    s[p].label = p == 1 ? "head <1> & \xff" : "head";
    s[p].sum = sum[p];
    s[p].count = cnt[p];
  }
  rc = relattn_svg_profile(s, 3, range, 16, "profile", &out, &len, err,
                           sizeof err);
  CHECK(rc == RELATTN_OK, "profile: %s", err);
  CHECK(out && clean_utf8(out, len), "clean");
  CHECK(out && count(out, "class=\"panel\"") == 3, "3 panels");
  /* bars: distances -48..0 and the pooled one, per panel */
  CHECK(out && count(out, "<title>distance ") == 3 * (size_t)(range + 1),
        "%zu bars", out ? count(out, "<title>distance ") : 0);
  CHECK(out && count(out, "(pooled)") == 3, "pooled bars");
  CHECK(out && strstr(out, "head &lt;1&gt; &amp; \\xFF"), "label escaped");
  {
    char prefix[64], num[32];
    snprintf(prefix, sizeof prefix, "<title>distance -3: mean weight ");
    snprintf(num, sizeof num, "%.4f", sum[0][range + 1 - 3] / 10);
    CHECK(out && strstr(out, prefix) &&
              strncmp(strstr(out, prefix) + strlen(prefix), num,
                      strlen(num)) == 0,
          "distance -3 of panel 0 is %s", num);
  }
  free(out);
  for (p = 0; p < 65; p++) s[p] = s[0];
  rc = relattn_svg_profile(s, 65, range, 16, "x", &out, &len, err,
                           sizeof err);
  CHECK(rc == RELATTN_ERR_ARG &&
            strcmp(err, "a profile has 1 to 64 series, not 65") == 0,
        "series limit: %s", err);
}

static void test_limits(void) {
  relattn_svg_text t;
  char *out = NULL, err[256];
  size_t len;
  float bits[1];
  relattn_svg_token tok[1];
  int rc;
  memset(&t, 0, sizeof t);
  t.n = RELATTN_SVG_MAX_TOKENS + 1;
  t.tok = tok;
  t.bits = bits;
  rc = relattn_svg_surprise(&t, &out, &len, err, sizeof err);
  CHECK(rc == RELATTN_ERR_TOOBIG &&
            strcmp(err, "a surprise picture shows at most 4096 tokens, "
                        "not 4097") == 0,
        "strip limit: %s", err);
  /* the most a strip can be: 4096 tokens that each need an escape */
  {
    int n = RELATTN_SVG_MAX_TOKENS, i;
    uint8_t *b = malloc((size_t)n);
    float *bb = malloc(sizeof *bb * (size_t)n);
    relattn_svg_token *tk;
    for (i = 0; i < n; i++) {
      b[i] = (uint8_t)(0x80 + i % 64);
      bb[i] = (float)(i % 17);
    }
    tk = byte_tokens(n, b);
    t.n = n;
    t.tok = tk;
    t.bits = bb;
    t.top = tk;
    t.top_bits = bb;
    rc = relattn_svg_surprise(&t, &out, &len, err, sizeof err);
    CHECK(rc == RELATTN_OK && len < ((size_t)4 << 20), "largest strip %zu",
          len);
    free(out);
    free(tk);
    free(b);
    free(bb);
  }
}

int main(void) {
  unit_seed();
  test_hostile_text();
  test_utf8_groups_and_bidi();
  test_map_cells_and_bins();
  test_colours();
  test_profile();
  test_limits();
  UNIT_DONE();
}

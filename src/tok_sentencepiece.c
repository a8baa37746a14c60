/*
** tok_sentencepiece.c: SentencePiece models (a .model file: DeBERTa-v3's
** spm.model, T5's spiece.model), with the ids sentencepiece 0.1.97 gives
** (SentencePieceProcessor::Encode / Decode).
**
** HOW IT WORKS
** The file is a protobuf ModelProto (sentencepiece_model.proto), read with
** a bounded reader: every varint and length is checked against the end of
** the message it is in; unknown fields are skipped. Used: pieces (piece,
** score, type), trainer_spec (model_type, byte_fallback,
** treat_whitespace_as_suffix, unk_surface), normalizer_spec
** (precompiled_charsmap, add_dummy_prefix, remove_extra_whitespaces,
** escape_whitespaces).
**
** Normalization, as normalizer.cc: at each position the longest
** user-defined piece passes as it is; else the longest rule of the
** precompiled character map (a darts-clone double-array trie of UTF-8
** keys, each value an offset into a pool of NUL-terminated replacements)
** replaces its key; else one UTF-8 character is copied, an invalid byte
** becoming U+FFFD. Spaces: leading ones dropped, runs collapsed and
** trailing ones dropped (remove_extra_whitespaces), one in front
** (add_dummy_prefix), each written as U+2581 (escape_whitespaces).
**
** Unigram, as unigram_model.cc's EncodeOptimized: Viterbi over the
** normalized bytes, each piece its score, a user-defined piece
** length * max_score - 0.1, a character no piece covers the unknown id at
** min_score - 10. BPE, as bpe_model.cc: characters (user-defined pieces
** whole and frozen), then the adjacent pair whose join is a piece with the
** highest score is merged (ties: the leftmost) until none is; unused
** pieces are split back into the pair they came from. Last, with
** byte_fallback, an unknown piece becomes its bytes' <0xNN> pieces.
*/
#include "tok.h"
#include "unicode.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { P_NORMAL = 1, P_UNKNOWN = 2, P_CONTROL = 3, P_USER = 4, P_UNUSED = 5,
       P_BYTE = 6 };
enum { M_UNIGRAM = 1, M_BPE = 2 };

typedef struct spm {
  relattn_tokenizer base; /* must be first */
  uint8_t *file;          /* a copy: pieces and the map point into it */
  int n;                  /* pieces */
  uint32_t *off, *len;    /* (n): piece bytes in file */
  float *score;           /* (n) */
  uint8_t *type;          /* (n): P_* */
  int model, byte_fallback, unk;
  int bytes[256];         /* <0xNN> piece ids */
  float min_score, max_score;
  /* a byte trie of the normal, user-defined and unused pieces */
  int32_t *node_id;       /* (n_nodes): piece ending here, or -1 */
  int32_t root[256];      /* children of the root, -1: none */
  int32_t *l1;            /* children of the root's children: (256, 256) by
                          ** first and second byte, -1: none */
  struct edge {           /* deeper: open addressing */
    uint64_t key;         /* (parent << 8 | byte) + 1, 0: empty */
    int32_t child;
  } *edges;
  size_t edge_mask;
  int n_nodes;
  int has_user;           /* any user-defined piece */
  /* control, unknown and byte pieces by their text (PieceToId) */
  int32_t *reserved;      /* open addressing over ids, -1 empty */
  size_t reserved_mask;
  /* the normalizer */
  uint32_t *units;        /* (n_units) darts-clone units, NULL: no map */
  size_t n_units;
  const uint8_t *pool;    /* replacements */
  size_t pool_n;
  int dummy_prefix, extra_ws, escape_ws;
  const uint8_t *unk_surface;
  size_t unk_surface_n;
  /* a tokenizer.json's Unigram (below, "Hugging Face's pipeline"): hf 1 */
  int hf;
  double *dscore;         /* (n): the JSON's scores */
  double min_dscore;
  struct hfstep {         /* one normalizer, pre-tokenizer or decoder */
    int kind;             /* HN_*, HP_*, HD_* */
    const uint8_t *a, *b; /* its strings, in file */
    size_t an, bn;
    int x, y;             /* its numbers */
  } *norm, *pre, *dec;    /* (n_norm), (n_pre), (n_dec) */
  int n_norm, n_pre, n_dec;
  struct hfadded {        /* added_tokens */
    int32_t id;
    const uint8_t *text;  /* (n) in file */
    size_t n;
    int special, lstrip, rstrip;
  } *added;               /* (n_added) */
  int n_added;
} spm;

/* ---- protobuf ------------------------------------------------------------- */

typedef struct pb {
  const uint8_t *p, *end;
} pb;

static int pbVarint(pb *r, uint64_t *v) {
  uint64_t x = 0;
  int shift;
  for (shift = 0; shift < 64; shift += 7) {
    uint8_t b;
    if (r->p >= r->end) return 0;
    b = *r->p++;
    x |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return 1;
    }
  }
  return 0; /* more than 10 bytes */
}

/* The next field: its number, wire type, and its value (varint, fixed32)
** or bytes (length-delimited). 0 at the end, -1 when malformed. */
typedef struct pbfield {
  uint64_t num;
  int wire;
  uint64_t v;
  const uint8_t *data;
  size_t len;
} pbfield;

static int pbNext(pb *r, pbfield *f) {
  uint64_t key;
  if (r->p >= r->end) return 0;
  if (!pbVarint(r, &key)) return -1;
  f->num = key >> 3;
  f->wire = (int)(key & 7);
  switch (f->wire) {
    case 0:
      return pbVarint(r, &f->v) ? 1 : -1;
    case 1:
      if (r->end - r->p < 8) return -1;
      r->p += 8;
      return 1;
    case 2:
      if (!pbVarint(r, &f->v) || f->v > (uint64_t)(r->end - r->p)) return -1;
      f->data = r->p;
      f->len = (size_t)f->v;
      r->p += f->len;
      return 1;
    case 5:
      if (r->end - r->p < 4) return -1;
      f->v = (uint32_t)r->p[0] | (uint32_t)r->p[1] << 8 |
             (uint32_t)r->p[2] << 16 | (uint32_t)r->p[3] << 24;
      r->p += 4;
      return 1;
    default:
      return -1; /* groups: not in this format */
  }
}

/* sentencepiece_model.proto: ModelProto has pieces (1), trainer_spec (2),
** normalizer_spec (3), self_test_data (4) and denormalizer_spec (5), all
** messages; SentencePiece has piece (1, bytes), score (2, float) and type
** (3, enum); both allow extensions from field 200. A vocab.txt read as
** protobuf fails within a few fields. */
int relattn_sentencepiece_is_model(const uint8_t *file, size_t n) {
  pb r, q;
  pbfield f, g;
  int rc, pieces = 0;
  r.p = file, r.end = file + n;
  while ((rc = pbNext(&r, &f)) == 1) {
    if (f.num >= 200) continue;
    if (f.num < 1 || f.num > 5 || f.wire != 2) return 0;
    if (f.num != 1) continue;
    pieces++;
    q.p = f.data, q.end = f.data + f.len;
    while ((rc = pbNext(&q, &g)) == 1)
      if (g.num < 200 && !(g.num == 1 && g.wire == 2) &&
          !(g.num == 2 && g.wire == 5) && !(g.num == 3 && g.wire == 0))
        return 0;
    if (rc < 0) return 0;
  }
  return rc == 0 && pieces > 0;
}

/* ---- the piece trie ------------------------------------------------------- */

static size_t edgeSlot(const spm *s, uint64_t key) {
  uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return (size_t)(h >> 20) & s->edge_mask;
}

/* Nodes 1..256 are the root's children (node 1 + first byte), so their
** children are a direct table: the two levels every walk starts with. */
static inline int32_t child(const spm *s, int32_t node, uint8_t b) {
  uint64_t key;
  size_t i;
  if (node == 0) return s->root[b];
  if (node <= 256) return s->l1[(size_t)(node - 1) << 8 | b];
  key = ((uint64_t)node << 8 | b) + 1;
  for (i = edgeSlot(s, key);; i = (i + 1) & s->edge_mask) {
    if (s->edges[i].key == key) return s->edges[i].child;
    if (s->edges[i].key == 0) return -1;
  }
}

/* Adds piece id to the trie; 0 when it is already there. */
static int trieAdd(spm *s, int id) {
  const uint8_t *p = s->file + s->off[id];
  uint32_t k;
  int32_t node = 0;
  for (k = 0; k < s->len[id]; k++) {
    int32_t c = child(s, node, p[k]);
    if (c < 0) {
      if (node == 0) {
        c = 1 + p[k]; /* reserved: see child() */
        s->root[p[k]] = c;
      } else if (node <= 256) {
        c = s->n_nodes++;
        s->l1[(size_t)(node - 1) << 8 | p[k]] = c;
      } else {
        uint64_t key = ((uint64_t)node << 8 | p[k]) + 1;
        size_t i = edgeSlot(s, key);
        c = s->n_nodes++;
        while (s->edges[i].key) i = (i + 1) & s->edge_mask;
        s->edges[i].key = key;
        s->edges[i].child = c;
      }
      s->node_id[c] = -1;
    }
    node = c;
  }
  if (s->node_id[node] >= 0) return 0;
  s->node_id[node] = id;
  return 1;
}

/* The id of the normal, user-defined or unused piece p[0..n), or -1. */
static int32_t trieFind(const spm *s, const uint8_t *p, size_t n) {
  int32_t node = 0;
  size_t k;
  for (k = 0; k < n && node >= 0; k++) node = child(s, node, p[k]);
  return node > 0 ? s->node_id[node] : -1;
}

static uint32_t hashBytes(const uint8_t *p, size_t n) {
  uint32_t h = 2166136261u;
  size_t i;
  for (i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
  return h;
}

static int32_t reservedFind(const spm *s, const uint8_t *p, size_t n) {
  size_t i;
  for (i = hashBytes(p, n) & s->reserved_mask;; i = (i + 1) & s->reserved_mask) {
    int32_t id = s->reserved[i];
    if (id < 0) return -1;
    if (s->len[id] == n && memcmp(s->file + s->off[id], p, n) == 0) return id;
  }
}

/* PieceToId: reserved pieces first, then the others, else unk. */
static int32_t pieceToId(const spm *s, const uint8_t *p, size_t n) {
  int32_t id = reservedFind(s, p, n);
  if (id < 0) id = trieFind(s, p, n);
  return id < 0 ? s->unk : id;
}

/* Length of the longest user-defined piece at p, 0 when none. */
static size_t userPrefix(const spm *s, const uint8_t *p, size_t n) {
  int32_t node = 0;
  size_t k, best = 0;
  if (!s->has_user) return 0;
  for (k = 0; k < n; k++) {
    node = child(s, node, p[k]);
    if (node < 0) break;
    if (s->node_id[node] >= 0 && s->type[s->node_id[node]] == P_USER)
      best = k + 1;
  }
  return best;
}

/* string_util::OneCharLen: from the first byte alone. */
static size_t oneCharLen(uint8_t b) {
  static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                  1, 1, 1, 1, 2, 2, 3, 4};
  return len[b >> 4];
}

/* ---- the normalizer --------------------------------------------------------- */

/* darts-clone's commonPrefixSearch, bounded: the longest key that is a
** prefix of p among the first 32 found (as normalizer.cc asks for), or 0. */
static size_t mapPrefix(const spm *s, const uint8_t *p, size_t n,
                        uint32_t *value) {
  size_t pos = 0, i, best = 0;
  int found = 0;
  uint32_t unit;
  if (!s->units) return 0;
  unit = s->units[0];
  pos ^= (unit >> 10) << ((unit & (1u << 9)) >> 6);
  for (i = 0; i < n; i++) {
    pos ^= p[i];
    if (pos >= s->n_units) return best;
    unit = s->units[pos];
    if ((unit & ((1u << 31) | 0xff)) != p[i]) return best;
    pos ^= (unit >> 10) << ((unit & (1u << 9)) >> 6);
    if ((unit >> 8) & 1) {
      if (pos >= s->n_units) return best;
      if (found++ < 32) {
        best = i + 1;
        *value = s->units[pos] & 0x7fffffffu;
      }
    }
  }
  return best;
}

/* One step of the normalizer at p: *out, *out_n the replacement, returns
** the bytes consumed (> 0). */
static size_t normPrefix(const spm *s, const uint8_t *p, size_t n,
                         const uint8_t **out, size_t *out_n) {
  static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
  uint32_t v = 0, cp;
  size_t len = userPrefix(s, p, n);
  int l;
  if (len) {
    *out = p, *out_n = len;
    return len;
  }
  len = mapPrefix(s, p, n, &v);
  if (len && v < s->pool_n) {
    const uint8_t *r = s->pool + v, *z = memchr(r, 0, s->pool_n - v);
    *out = r;
    *out_n = z ? (size_t)(z - r) : s->pool_n - v;
    return len;
  }
  l = relattn_utf8_decode(p, n, &cp);
  if (l == 0) {
    *out = fffd, *out_n = 3;
    return 1;
  }
  *out = p, *out_n = (size_t)l;
  return (size_t)l;
}

/* Appends count spans [from, to) to map (uint32 pairs), when map is set. */
static int mapAdd(relattn_bytebuf *map, size_t count, size_t from, size_t to) {
  size_t k;
  int rc;
  uint32_t pair[2];
  if (!map) return RELATTN_OK;
  pair[0] = (uint32_t)from, pair[1] = (uint32_t)to;
  for (k = 0; k < count; k++)
    if ((rc = relattn_bytebuf_add(map, pair, sizeof pair)) != RELATTN_OK)
      return rc;
  return RELATTN_OK;
}

/* The normalized text into o; with map, each of its bytes' span of p. */
static int normalize(const spm *s, const uint8_t *p, size_t n,
                     relattn_bytebuf *o, relattn_bytebuf *map) {
  static const uint8_t ws[3] = {0xE2, 0x96, 0x81}; /* U+2581 */
  const uint8_t *r, *p0 = p;
  size_t rn, used, k;
  int prev_space = s->extra_ws, rc;
  if (s->extra_ws) /* leading spaces */
    while (n > 0) {
      used = normPrefix(s, p, n, &r, &rn);
      if (rn != 1 || r[0] != ' ') break;
      p += used, n -= used;
    }
  if (n == 0) return RELATTN_OK;
  if (s->dummy_prefix) {
    /* the prefix stands for no character: an empty span where the text
    ** starts, as SentencePiece's own offsets give it */
    rc = s->escape_ws ? relattn_bytebuf_add(o, ws, 3)
                      : relattn_bytebuf_add(o, " ", 1);
    if (rc == RELATTN_OK)
      rc = mapAdd(map, s->escape_ws ? 3 : 1, (size_t)(p - p0),
                  (size_t)(p - p0));
    if (rc) return rc;
  }
  while (n > 0) {
    used = normPrefix(s, p, n, &r, &rn);
    while (prev_space && rn > 0 && r[0] == ' ') r++, rn--;
    if (rn > 0) {
      uint8_t *w;
      if (rn > (SIZE_MAX - o->n) / 3 - 3) return RELATTN_ERR_NOMEM;
      if ((rc = relattn_bytebuf_add(o, NULL, 3 * rn)) != RELATTN_OK) return rc;
      o->n -= 3 * rn; /* room reserved; written below */
      w = o->p + o->n;
      for (k = 0; k < rn; k++) {
        if (s->escape_ws && r[k] == ' ') {
          memcpy(w, ws, 3);
          w += 3;
        } else {
          *w++ = r[k];
        }
      }
      if ((rc = mapAdd(map, (size_t)(w - (o->p + o->n)), (size_t)(p - p0),
                       (size_t)(p - p0) + used)) != RELATTN_OK)
        return rc;
      o->n = (size_t)(w - o->p);
      prev_space = r[rn - 1] == ' ';
    }
    p += used, n -= used;
    if (!s->extra_ws) prev_space = 0;
  }
  if (s->extra_ws) { /* trailing spaces */
    if (s->escape_ws)
      while (o->n >= 3 && memcmp(o->p + o->n - 3, ws, 3) == 0) o->n -= 3;
    else
      while (o->n >= 1 && o->p[o->n - 1] == ' ') o->n--;
  }
  if (map) map->n = o->n * 2 * sizeof(uint32_t); /* the map follows */
  return RELATTN_OK;
}

/* ---- the models ------------------------------------------------------------- */

/* One piece of the model's answer: with byte_fallback, an unknown piece
** becomes its bytes. */
static int emit(const spm *s, int32_t id, const uint8_t *p, size_t n,
                relattn_idbuf *out) {
  size_t k;
  int rc;
  if (out->spans_on && out->nmap && n > 0) {
    /* normalized bytes [p, p + n): from the first one's start to the last
    ** one's end in the text */
    size_t i0 = (size_t)(p - out->nbase), i1 = i0 + n - 1;
    out->s0 = out->nmap[2 * i0];
    out->s1 = out->nmap[2 * i1 + 1];
  }
  if (id == s->unk && s->byte_fallback) {
    for (k = 0; k < n; k++)
      if ((rc = relattn_idbuf_push(out, s->bytes[p[k]])) != RELATTN_OK)
        return rc;
    return RELATTN_OK;
  }
  return relattn_idbuf_push(out, id);
}

typedef struct best {
  float score;
  int32_t id;
  int32_t start; /* -1: not reached */
} best;

static int unigram(const spm *s, const uint8_t *t, size_t n,
                   relattn_idbuf *out) {
  best *b;
  size_t start, end, nb;
  int32_t *path;
  const float unk_score = s->min_score - 10.0f;
  int rc = RELATTN_OK;
  if (n > 0x7ffffffe) return RELATTN_ERR_TOOBIG;
  b = malloc((n + 1) * sizeof *b);
  if (!b) return RELATTN_ERR_NOMEM;
  for (end = 0; end <= n; end++) b[end].start = -1, b[end].id = -1;
  b[0].score = 0;
  for (start = 0; start < n;) {
    const float here = b[start].score;
    size_t mblen = oneCharLen(t[start]), key = start;
    int32_t node = 0;
    int single = 0;
    if (mblen > n - start) mblen = n - start;
    while (key < n) {
      int32_t id;
      node = child(s, node, t[key++]);
      if (node < 0) break;
      id = s->node_id[node];
      if (id >= 0 && s->type[id] != P_UNUSED) {
        best *tg = &b[key];
        size_t len = key - start;
        /* in double, as the reference's ternary (float or double) types
        ** it; stored as float */
        double score = s->type[id] == P_USER
                           ? (double)((float)len * s->max_score) - 0.1
                           : (double)s->score[id];
        double cand = score + (double)here;
        if (tg->start < 0 || cand > (double)tg->score)
          tg->score = (float)cand, tg->start = (int32_t)start, tg->id = id;
        if (len == mblen) single = 1;
      }
    }
    if (!single) {
      best *tg = &b[start + mblen];
      float cand = unk_score + here;
      if (tg->start < 0 || cand > tg->score)
        tg->score = cand, tg->start = (int32_t)start, tg->id = s->unk;
    }
    start += mblen;
  }
  /* backtrack: the ends of the best path, then the pieces in order */
  for (nb = 0, end = n; end > 0; end = (size_t)b[end].start) nb++;
  path = malloc((nb ? nb : 1) * sizeof *path);
  if (!path) {
    free(b);
    return RELATTN_ERR_NOMEM;
  }
  for (end = n, start = nb; end > 0; end = (size_t)b[end].start)
    path[--start] = (int32_t)end;
  for (start = 0; start < nb && rc == RELATTN_OK; start++) {
    size_t e = (size_t)path[start], s0 = (size_t)b[e].start;
    rc = emit(s, b[e].id, t + s0, e - s0, out);
  }
  free(path);
  free(b);
  return rc;
}

/* BPE: a symbol list and a binary heap of candidate merges. */
typedef struct sym {
  uint32_t start, len;
  int32_t prev, next;
  int freeze;
} sym;
typedef struct pair {
  float score;
  int32_t left, right;
  uint32_t size;
} pair;
typedef struct heap {
  pair *p;
  size_t n, cap;
} heap;
/* Where unused pieces were merged from (bpe_model.cc's rev_merge): the
** last pair recorded for a piece is the one it splits back into. */
typedef struct revmerge {
  struct { int32_t id; uint32_t left; } *p;
  size_t n, cap;
} revmerge;

static int pairBefore(const pair *a, const pair *b) { /* a pops first */
  return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int heapPush(heap *h, pair x) {
  size_t i;
  if (h->n == h->cap) {
    size_t cap = h->cap ? 2 * h->cap : 64;
    pair *q = realloc(h->p, cap * sizeof *q);
    if (!q) return RELATTN_ERR_NOMEM;
    h->p = q, h->cap = cap;
  }
  for (i = h->n++; i > 0 && pairBefore(&x, &h->p[(i - 1) / 2]); i = (i - 1) / 2)
    h->p[i] = h->p[(i - 1) / 2];
  h->p[i] = x;
  return RELATTN_OK;
}

static pair heapPop(heap *h) {
  pair top = h->p[0], last = h->p[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && pairBefore(&h->p[c + 1], &h->p[c])) c++;
    if (!pairBefore(&h->p[c], &last)) break;
    h->p[i] = h->p[c];
    i = c;
  }
  if (h->n) h->p[i] = last;
  return top;
}

static int addPair(const spm *s, const uint8_t *t, const sym *y, int32_t l,
                   int32_t r, heap *h, revmerge *rm) {
  int32_t id;
  pair x;
  if (l < 0 || r < 0 || y[l].freeze || y[r].freeze) return RELATTN_OK;
  id = trieFind(s, t + y[l].start, y[l].len + y[r].len);
  if (id < 0) return RELATTN_OK;
  x.score = s->score[id];
  x.left = l, x.right = r;
  x.size = y[l].len + y[r].len;
  if (s->type[id] == P_UNUSED) {
    if (rm->n == rm->cap) {
      size_t cap = rm->cap ? 2 * rm->cap : 16;
      void *q = realloc(rm->p, cap * sizeof *rm->p);
      if (!q) return RELATTN_ERR_NOMEM;
      rm->p = q, rm->cap = cap;
    }
    rm->p[rm->n].id = id;
    rm->p[rm->n++].left = y[l].len;
  }
  return heapPush(h, x);
}

/* An unused piece is split back into the pair it was merged from, each
** half again when it is unused too. */
static int resegment(const spm *s, const uint8_t *p, size_t n,
                     const revmerge *rm, relattn_idbuf *out) {
  int32_t id = pieceToId(s, p, n);
  size_t k = rm->n;
  int rc;
  if (id < 0 || s->type[id] != P_UNUSED) return emit(s, id, p, n, out);
  while (k > 0 && rm->p[k - 1].id != id) k--;
  if (k == 0 || rm->p[k - 1].left == 0 || rm->p[k - 1].left >= n)
    return emit(s, id, p, n, out);
  k = rm->p[k - 1].left; /* both halves are shorter: this ends */
  rc = resegment(s, p, k, rm, out);
  return rc ? rc : resegment(s, p + k, n - k, rm, out);
}

static int bpe(const spm *s, const uint8_t *t, size_t n, relattn_idbuf *out) {
  sym *y;
  heap h = {0};
  revmerge rm = {0};
  size_t pos = 0, ny = 0;
  int32_t i;
  int rc = RELATTN_OK;
  if (n > 0x7ffffffe) return RELATTN_ERR_TOOBIG;
  y = malloc((n ? n : 1) * sizeof *y);
  if (!y) return RELATTN_ERR_NOMEM;
  while (pos < n) {
    size_t len = userPrefix(s, t + pos, n - pos);
    y[ny].freeze = len > 0;
    if (!len) len = oneCharLen(t[pos]);
    if (len > n - pos) len = n - pos;
    y[ny].start = (uint32_t)pos, y[ny].len = (uint32_t)len;
    y[ny].prev = (int32_t)ny - 1;
    pos += len;
    y[ny].next = pos < n ? (int32_t)ny + 1 : -1;
    ny++;
  }
  for (i = 1; i < (int32_t)ny && rc == RELATTN_OK; i++)
    rc = addPair(s, t, y, i - 1, i, &h, &rm);
  while (h.n > 0 && rc == RELATTN_OK) {
    pair top = heapPop(&h);
    sym *l = &y[top.left], *r = &y[top.right];
    if (l->len == 0 || r->len == 0 || l->len + r->len != top.size) continue;
    l->len += r->len;
    l->next = r->next;
    if (r->next >= 0) y[r->next].prev = top.left;
    r->len = 0;
    rc = addPair(s, t, y, l->prev, top.left, &h, &rm);
    if (rc == RELATTN_OK) rc = addPair(s, t, y, top.left, l->next, &h, &rm);
  }
  for (i = ny ? 0 : -1; i >= 0 && rc == RELATTN_OK; i = y[i].next)
    rc = resegment(s, t + y[i].start, y[i].len, &rm, out);
  free(h.p);
  free(rm.p);
  free(y);
  return rc;
}

static int spmEncode(const relattn_tokenizer *t, const uint8_t *text,
                     size_t n, relattn_idbuf *out) {
  const spm *s = (const spm *)t;
  relattn_bytebuf norm = {0}, map = {0};
  size_t first = out->n, i, m;
  int rc = normalize(s, text, n, &norm, out->spans_on ? &map : NULL);
  out->nmap = (const uint32_t *)map.p;
  out->nbase = norm.p;
  if (rc == RELATTN_OK && norm.n > 0)
    rc = s->model == M_BPE ? bpe(s, norm.p, norm.n, out)
                           : unigram(s, norm.p, norm.n, out);
  out->nmap = NULL;
  out->nbase = NULL;
  free(norm.p);
  free(map.p);
  if (rc == RELATTN_OK && !s->byte_fallback) {
    /* a run of unknown pieces is one, as the reference gives it (with
    ** byte_fallback they became bytes); its span is the run's */
    for (i = m = first; i < out->n; i++) {
      if (out->ids[i] == s->unk && m > first && out->ids[m - 1] == s->unk) {
        if (out->spans_on) out->spans[2 * (m - 1) + 1] = out->spans[2 * i + 1];
        continue;
      }
      relattn_idbuf_move(out, m++, i);
    }
    out->n = m;
  }
  return rc;
}

/* The first piece whose text is p[0..n), of any type (an import looks up
** a handful of special pieces once: a scan is enough). */
static int32_t spmPieceId(const relattn_tokenizer *t, const uint8_t *p,
                          size_t n) {
  const spm *s = (const spm *)t;
  int i;
  for (i = 0; i < s->n; i++)
    if (s->len[i] == n && memcmp(s->file + s->off[i], p, n) == 0) return i;
  return -1;
}

static const uint8_t *spmIdText(const relattn_tokenizer *t, int32_t id,
                                size_t *n) {
  const spm *s = (const spm *)t;
  if (id < 0 || id >= s->n) return NULL;
  *n = s->len[id];
  return s->file + s->off[id];
}

/* ---- Hugging Face's pipeline (a tokenizer.json's Unigram) -------------------- */

/* A Unigram tokenizer.json (ext/hf_tokjson.c) is stored as a ModelProto
** whose extension field HF_FIELD holds what the spm model has not: the
** normalizers, pre-tokenizers and decoders in order, the scores as the
** JSON's doubles, and the added tokens. With it the model runs as Hugging
** Face's tokenizers library (0.23) runs the file: added tokens cut out
** first (added_vocabulary.rs: leftmost-longest, lstrip / rstrip taking the
** whitespace next to them); each part between them normalized, split into
** words (metaspace.rs, WhitespaceSplit), and each word through the Viterbi
** of models/unigram/model.rs (encode_optimized: every piece in the trie,
** scores and path sums in double, an uncovered character the unknown id at
** min_score - 10, a run of unknowns fused into one, byte_fallback); decode
** through the decoders (the crate's decoders/) with the special tokens
** skipped. */

enum { HF_FIELD = 777 };
enum { HN_PRECOMPILED = 1, HN_REPLACE = 2, HN_REPLACE_RUN = 3, HN_STRIP = 4,
       HN_LOWERCASE = 5, HN_NFKC = 6, HN_NFC = 7 };
enum { HP_METASPACE = 1, HP_WHITESPACE_SPLIT = 2 };
enum { HD_METASPACE = 1, HD_REPLACE = 2, HD_BYTE_FALLBACK = 3, HD_FUSE = 4,
       HD_STRIP = 5 };
enum { HF_NEVER = 0, HF_FIRST = 1, HF_ALWAYS = 2 };

static const uint8_t fffd3[3] = {0xEF, 0xBF, 0xBD};

/* Rust's char::is_whitespace */
static int rustSpace(uint32_t c) {
  return (relattn_uflags8_of(c) & RELATTN_U_BERT_WS) != 0;
}

/* p[0..n) with each invalid UTF-8 sequence U+FFFD, as a JavaScript or
** Python caller's string reaches the library */
static int validUtf8(const uint8_t *p, size_t n, relattn_bytebuf *o,
                     relattn_bytebuf *om) {
  size_t i = 0, k;
  int rc = RELATTN_OK;
  while (i < n && rc == RELATTN_OK) {
    uint32_t cp, at[2];
    int l = relattn_utf8_decode(p + i, n - i, &cp);
    size_t w = l == 0 ? 3 : (size_t)l;
    if (l == 0) rc = relattn_bytebuf_add(o, fffd3, 3);
    else rc = relattn_bytebuf_add(o, p + i, (size_t)l);
    /* offsets: each byte its own, U+FFFD the bad byte's */
    for (k = 0; om && k < w && rc == RELATTN_OK; k++) {
      at[0] = (uint32_t)(i + (l ? k : 0)), at[1] = at[0] + 1;
      rc = relattn_bytebuf_add(om, at, sizeof at);
    }
    i += l == 0 ? 1 : (size_t)l;
  }
  return rc;
}

/* spm_precompiled's transform: the first (shortest) key of the map that
** is a prefix of p[0..n), its replacement in *out; 0 when none. */
static int mapFirst(const spm *s, const uint8_t *p, size_t n,
                    const uint8_t **out, size_t *out_n) {
  size_t pos = 0, i;
  uint32_t unit, v;
  if (!s->units) return 0;
  unit = s->units[0];
  pos ^= (unit >> 10) << ((unit & (1u << 9)) >> 6);
  for (i = 0; i < n; i++) {
    pos ^= p[i];
    if (pos >= s->n_units) return 0;
    unit = s->units[pos];
    if ((unit & ((1u << 31) | 0xff)) != p[i]) return 0;
    pos ^= (unit >> 10) << ((unit & (1u << 9)) >> 6);
    if ((unit >> 8) & 1) {
      const uint8_t *z;
      if (pos >= s->n_units) return 0;
      v = s->units[pos] & 0x7fffffffu;
      if (v >= s->pool_n) return 0;
      z = memchr(s->pool + v, 0, s->pool_n - v);
      *out = s->pool + v;
      *out_n = z ? (size_t)(z - (s->pool + v)) : s->pool_n - v;
      return 1;
    }
  }
  return 0;
}

/* UAX #29's Control (GB4, GB5), from the categories: Cc, Cf but the
** joiners, Zl, Zp; private use is not one. */
static int graphemeControl(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || cp == 0x2028 || cp == 0x2029)
    return 1;
  if (cp == 0x200C || cp == 0x200D || (cp >= 0xE000 && cp < 0xF900) ||
      cp >= 0xF0000)
    return 0;
  return (relattn_uflags_of(cp) & RELATTN_U_CONTROL) != 0;
}

/* Alignments, for the offsets: with a normalized buffer, a map of 2
** uint32 a byte, the [start, end) in the text it comes from (im the
** input's, om the output's; NULL when no offsets are asked for). Bytes that
** replace input bytes [i, i + g) map to their whole span. */
static int alSpan(relattn_bytebuf *om, const uint32_t *im, size_t i,
                  size_t g, size_t count) {
  uint32_t pr[2];
  size_t k;
  int rc = RELATTN_OK;
  if (!om || !im || g == 0) return RELATTN_OK;
  pr[0] = im[2 * i], pr[1] = im[2 * (i + g - 1) + 1];
  for (k = 0; k < count && rc == RELATTN_OK; k++)
    rc = relattn_bytebuf_add(om, pr, sizeof pr);
  return rc;
}

static int alCopy(relattn_bytebuf *om, const uint32_t *im, size_t i,
                  size_t l) {
  if (!om || !im || l == 0) return RELATTN_OK;
  return relattn_bytebuf_add(om, im + 2 * i, 2 * l * sizeof *im);
}

/* The start of the last UTF-8 character of p[0..n), n > 0 */
static size_t lastChar(const uint8_t *p, size_t n) {
  size_t j = n - 1;
  while (j > 0 && n - j < 4 && (p[j] & 0xC0) == 0x80) j--;
  return j;
}

/* NormalizedString::transform_range's alignments (the library's
** normalizer.rs) for out (on bytes) replacing in[0..n) (its map im): the
** k-th output character takes the k-th input character's span, those past
** the input's count (insertions) the last one's. A Replace removes the
** match first and inserts its content: every character of it takes the
** match's last character's span (last set). */
static int alReplace(relattn_bytebuf *om, const uint32_t *im,
                     const uint8_t *in, size_t n, const uint8_t *out,
                     size_t on, int last) {
  size_t i = last && n ? lastChar(in, n) : 0, o = 0;
  int rc = RELATTN_OK;
  if (!om || !im || n == 0) return RELATTN_OK;
  while (o < on && rc == RELATTN_OK) {
    uint32_t cp;
    int ol = relattn_utf8_decode(out + o, on - o, &cp);
    int il = relattn_utf8_decode(in + i, n - i, &cp);
    if (ol == 0) ol = 1;
    if (il == 0) il = 1;
    rc = alSpan(om, im, i, (size_t)il, (size_t)ol);
    o += (size_t)ol;
    if (i + (size_t)il < n) i += (size_t)il;
  }
  return rc;
}

/* Precompiled (normalizers/precompiled.rs): over grapheme clusters, a
** cluster shorter than 6 bytes replaced whole when the map has a key that
** is a prefix of it, else each character by itself. The clusters are
** UAX #29's as far as the Unicode tables give them (a character, then the
** marks and joiners that follow it; CR LF). */
/* Offsets through Precompiled: each output character's length and change,
** as precompiled.rs's replace() lists them for transform(). */
typedef struct hftr {
  struct { uint32_t len; int32_t change; } *t;
  size_t n, cap;
} hftr;

/* replace(): old input characters became out[0..on): each a change of 0,
** the ones past old's count insertions (1), or, fewer, the last entry of
** the list (an earlier part's, if these are none) takes the removal. */
static int trReplace(hftr *tr, size_t old, const uint8_t *out, size_t on) {
  size_t q = 0, nw = 0;
  while (q < on) {
    uint32_t cp;
    int ql = relattn_utf8_decode(out + q, on - q, &cp);
    if (ql == 0) ql = 1;
    if (tr->n == tr->cap) {
      size_t cap = tr->cap ? 2 * tr->cap : 64;
      void *t2 = realloc(tr->t, cap * sizeof *tr->t);
      if (!t2) return RELATTN_ERR_NOMEM;
      tr->t = t2, tr->cap = cap;
    }
    tr->t[tr->n].len = (uint32_t)ql, tr->t[tr->n++].change = 0;
    q += (size_t)ql, nw++;
  }
  if (nw > old)
    for (q = tr->n - (nw - old); q < tr->n; q++) tr->t[q].change = 1;
  else if (nw < old && tr->n > 0)
    tr->t[tr->n - 1].change -= (int32_t)(old - nw);
  return RELATTN_OK;
}

static int hfPrecompiled(const spm *s, const uint8_t *p, size_t n,
                         relattn_bytebuf *o, const uint32_t *im,
                         relattn_bytebuf *om) {
  hftr tr = {0};
  size_t i = 0, at, k;
  int rc = RELATTN_OK;
  while (i < n && rc == RELATTN_OK) {
    uint32_t cp;
    size_t g = (size_t)relattn_utf8_decode(p + i, n - i, &cp), from = o->n;
    const uint8_t *r;
    size_t rn;
    int whole = 0;
    if (g == 0) g = 1;
    if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') {
      g = 2;
    } else if (!graphemeControl(cp)) { /* GB4: nothing joins a control */
      while (i + g < n) {
        int l = relattn_utf8_decode(p + i + g, n - i - g, &cp);
        if (l == 0 || !(relattn_uflags_of(cp) & RELATTN_U_GEXTEND)) break;
        g += (size_t)l;
      }
    }
    if (g < 6 && mapFirst(s, p + i, g, &r, &rn)) {
      rc = relattn_bytebuf_add(o, r, rn);
      whole = 1;
    }
    for (k = 0; !whole && k < g && rc == RELATTN_OK;) {
      int l = relattn_utf8_decode(p + i + k, g - k, &cp);
      if (l == 0) l = 1;
      if (mapFirst(s, p + i + k, (size_t)l, &r, &rn))
        rc = relattn_bytebuf_add(o, r, rn);
      else
        rc = relattn_bytebuf_add(o, p + i + k, (size_t)l);
      if (om && im && rc == RELATTN_OK)
        rc = trReplace(&tr, 1, o->p + from, o->n - from);
      from = o->n;
      k += (size_t)l;
    }
    if (whole && om && im && rc == RELATTN_OK) {
      size_t old = 0;
      for (k = 0; k < g; old++) {
        int l = relattn_utf8_decode(p + i + k, g - k, &cp);
        k += l ? (size_t)l : 1;
      }
      rc = trReplace(&tr, old, o->p + from, o->n - from);
    }
    i += g;
  }
  /* transform(): a change of 0 or less takes the next input character's
  ** span and then skips -change more; an insertion (1) the span of the
  ** input character before it */
  for (k = 0, at = 0; om && im && k < tr.n && rc == RELATTN_OK; k++) {
    uint32_t cp;
    size_t l;
    if (tr.t[k].change > 0 || at >= n) {
      size_t prev = at > 0 ? lastChar(p, at) : 0;
      rc = alSpan(om, im, prev, at > 0 ? at - prev : 1, tr.t[k].len);
      continue;
    }
    l = (size_t)relattn_utf8_decode(p + at, n - at, &cp);
    if (l == 0) l = 1;
    rc = alSpan(om, im, at, l, tr.t[k].len);
    at += l;
    for (int32_t d = tr.t[k].change; d < 0 && at < n; d++) {
      l = (size_t)relattn_utf8_decode(p + at, n - at, &cp);
      at += l ? l : 1;
    }
  }
  free(tr.t);
  return rc;
}

/* Replace with a string: each leftmost match, not overlapping. */
static int replaceAll(const uint8_t *p, size_t n, const uint8_t *a, size_t an,
                      const uint8_t *b, size_t bn, relattn_bytebuf *o,
                      const uint32_t *im, relattn_bytebuf *om) {
  size_t i = 0;
  int rc = RELATTN_OK;
  while (i < n && rc == RELATTN_OK) {
    if (an > 0 && n - i >= an && memcmp(p + i, a, an) == 0) {
      rc = relattn_bytebuf_add(o, b, bn);
      if (rc == RELATTN_OK && im)
        rc = alReplace(om, im + 2 * i, p + i, an, b, bn, 1);
      i += an;
    } else {
      rc = relattn_bytebuf_add(o, p + i, 1);
      if (rc == RELATTN_OK) rc = alCopy(om, im, i, 1);
      i++;
    }
  }
  return rc;
}

/* Replace with the regex "c{m,}": each run of m or more of a's character */
static int replaceRun(const uint8_t *p, size_t n, const uint8_t *a, size_t an,
                      int m, const uint8_t *b, size_t bn, relattn_bytebuf *o,
                      const uint32_t *im, relattn_bytebuf *om) {
  size_t i = 0;
  int rc = RELATTN_OK;
  while (i < n && rc == RELATTN_OK) {
    size_t j = i;
    int count = 0;
    while (an > 0 && n - j >= an && memcmp(p + j, a, an) == 0) j += an, count++;
    if (count > 0 && count >= m) {
      rc = relattn_bytebuf_add(o, b, bn);
      if (rc == RELATTN_OK && im)
        rc = alReplace(om, im + 2 * i, p + i, j - i, b, bn, 1);
      i = j;
    } else if (count > 0) {
      rc = relattn_bytebuf_add(o, p + i, j - i);
      if (rc == RELATTN_OK) rc = alCopy(om, im, i, j - i);
      i = j;
    } else {
      rc = relattn_bytebuf_add(o, p + i, 1);
      if (rc == RELATTN_OK) rc = alCopy(om, im, i, 1);
      i++;
    }
  }
  return rc;
}

/* Bytes of Rust whitespace at the start / end of p[0..n) */
static size_t rustLead(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    int l = relattn_utf8_decode(p + i, n - i, &cp);
    if (l == 0 || !rustSpace(cp)) break;
    i += (size_t)l;
  }
  return i;
}

static size_t rustTrail(const uint8_t *p, size_t n) {
  size_t end = n, j;
  while (end > 0) {
    uint32_t cp;
    int l;
    for (j = end - 1; j > 0 && end - j < 4 && (p[j] & 0xC0) == 0x80; j--) {
    }
    l = relattn_utf8_decode(p + j, end - j, &cp);
    if (l == 0 || (size_t)l != end - j || !rustSpace(cp)) break;
    end = j;
  }
  return n - end;
}

/* Lowercase: char::to_lowercase of each character */
static int lowerAll(const uint8_t *p, size_t n, relattn_bytebuf *o,
                    const uint32_t *im, relattn_bytebuf *om) {
  size_t i = 0;
  int rc = RELATTN_OK;
  while (i < n && rc == RELATTN_OK) {
    uint32_t cp;
    int l = relattn_utf8_decode(p + i, n - i, &cp), m, k;
    const uint32_t *lo;
    if (l == 0) l = 1, cp = 0xFFFD;
    lo = relattn_ulower(cp, &m);
    if (!lo) {
      rc = relattn_bytebuf_add(o, p + i, (size_t)l);
      if (rc == RELATTN_OK) rc = alCopy(om, im, i, (size_t)l);
    } else {
      for (k = 0; k < m && rc == RELATTN_OK; k++) {
        uint8_t u[4];
        int ul = relattn_utf8_encode(lo[k], u);
        rc = relattn_bytebuf_add(o, u, (size_t)ul);
        if (rc == RELATTN_OK) rc = alSpan(om, im, i, (size_t)l, (size_t)ul);
      }
    }
    i += (size_t)l;
  }
  return rc;
}

/* NFKC / NFC (the library's unicode-normalization crate; here Python's
** tables): the UTF-8 of p[0..n) as code points, normalized, back */
static int nfkcAll(const uint8_t *p, size_t n, int compat,
                   relattn_bytebuf *o, const uint32_t *im,
                   relattn_bytebuf *om) {
  uint32_t *cp = malloc((n ? n : 1) * sizeof *cp), *r = NULL;
  size_t m = 0, i, rn = 0;
  int rc = RELATTN_OK;
  if (!cp) return RELATTN_ERR_NOMEM;
  for (i = 0; i < n;) {
    int l = relattn_utf8_decode(p + i, n - i, &cp[m]);
    if (l == 0) l = 1, cp[m] = 0xFFFD;
    m++;
    i += (size_t)l;
  }
  if (relattn_unfkc(cp, m, compat, &r, &rn)) rc = RELATTN_ERR_NOMEM;
  for (i = 0; i < rn && rc == RELATTN_OK; i++) {
    uint8_t u[4];
    int ul = relattn_utf8_encode(r[i], u);
    rc = relattn_bytebuf_add(o, u, (size_t)ul);
    /* (offsets: the whole input's span; the converters write no NFKC) */
    if (rc == RELATTN_OK) rc = alSpan(om, im, 0, n, (size_t)ul);
  }
  free(cp);
  free(r);
  return rc;
}

/* The normalizers in order on p[0..n): the result in *a (b is scratch).
** *front stays 1 while the result's first character comes from p's first
** (a NormalizedString slice's original offset then stays that of p: what
** Metaspace's prepend_scheme first looks at); a step that removes what is
** at the front makes it 0. */
static int hfNormalize(const spm *s, const uint8_t *p, size_t n,
                       relattn_bytebuf *a, relattn_bytebuf *b, int *front,
                       const uint32_t *pm, relattn_bytebuf *am,
                       relattn_bytebuf *bm) {
  int k, rc = RELATTN_OK;
  a->n = 0;
  if ((rc = relattn_bytebuf_add(a, p, n)) != RELATTN_OK) return rc;
  if (am) {
    am->n = 0;
    if ((rc = alCopy(am, pm, 0, n)) != RELATTN_OK) return rc;
  }
  for (k = 0; k < s->n_norm && rc == RELATTN_OK && a->n > 0; k++) {
    const struct hfstep *st = &s->norm[k]; /* (nothing stays nothing) */
    const uint32_t *im = am ? (const uint32_t *)am->p : NULL;
    relattn_bytebuf t;
    b->n = 0;
    if (bm) bm->n = 0;
    switch (st->kind) {
      case HN_PRECOMPILED: {
        /* the first character replaced by nothing */
        const uint8_t *r;
        size_t rn;
        uint32_t cp;
        int l = a->n ? relattn_utf8_decode(a->p, a->n, &cp) : 0;
        if (l > 0 && mapFirst(s, a->p, (size_t)l, &r, &rn) && rn == 0)
          *front = 0;
        rc = hfPrecompiled(s, a->p, a->n, b, im, bm);
        break;
      }
      case HN_REPLACE:
        if (st->bn == 0 && st->an > 0 && a->n >= st->an &&
            memcmp(a->p, st->a, st->an) == 0)
          *front = 0;
        rc = replaceAll(a->p, a->n, st->a, st->an, st->b, st->bn, b, im, bm);
        break;
      case HN_REPLACE_RUN:
        rc = replaceRun(a->p, a->n, st->a, st->an, st->x, st->b, st->bn, b,
                        im, bm);
        break;
      case HN_STRIP: {
        size_t lead = st->x ? rustLead(a->p, a->n) : 0;
        size_t trail = st->y ? rustTrail(a->p + lead, a->n - lead) : 0;
        if (lead) *front = 0;
        rc = relattn_bytebuf_add(b, a->p + lead, a->n - lead - trail);
        if (rc == RELATTN_OK) rc = alCopy(bm, im, lead, a->n - lead - trail);
        break;
      }
      case HN_LOWERCASE: rc = lowerAll(a->p, a->n, b, im, bm); break;
      case HN_NFKC: rc = nfkcAll(a->p, a->n, 1, b, im, bm); break;
      case HN_NFC: rc = nfkcAll(a->p, a->n, 0, b, im, bm); break;
      default:
        rc = relattn_bytebuf_add(b, a->p, a->n);
        if (rc == RELATTN_OK) rc = alCopy(bm, im, 0, a->n);
    }
    t = *a, *a = *b, *b = t;
    if (am) t = *am, *am = *bm, *bm = t;
  }
  if (rc == RELATTN_OK && a->n == 0 && !a->p)
    rc = relattn_bytebuf_add(a, "", 0);
  return rc;
}

/* Words: byte ranges of one buffer, and whether each starts at the
** original text's first byte (Metaspace's prepend_scheme first). */
typedef struct hfwords {
  relattn_bytebuf text;
  relattn_bytebuf al;     /* with offsets: text's alignments (alSpan) */
  size_t *off, *len;
  uint8_t *first;
  size_t n, cap;
} hfwords;

static int wordAdd(hfwords *w, const uint8_t *p, size_t n, int first,
                   const uint32_t *m) {
  int rc;
  if (w->n == w->cap) {
    size_t cap = w->cap ? 2 * w->cap : 16;
    size_t *o = realloc(w->off, cap * sizeof *o);
    if (!o) return RELATTN_ERR_NOMEM;
    w->off = o;
    o = realloc(w->len, cap * sizeof *o);
    if (!o) return RELATTN_ERR_NOMEM;
    w->len = o;
    {
      uint8_t *f = realloc(w->first, cap);
      if (!f) return RELATTN_ERR_NOMEM;
      w->first = f;
    }
    w->cap = cap;
  }
  w->off[w->n] = w->text.n;
  w->len[w->n] = n;
  w->first[w->n] = (uint8_t)first;
  if ((rc = relattn_bytebuf_add(&w->text, p, n)) != RELATTN_OK) return rc;
  if ((rc = alCopy(m ? &w->al : NULL, m, 0, n)) != RELATTN_OK) return rc;
  w->n++;
  return RELATTN_OK;
}

static void wordsFree(hfwords *w) {
  free(w->text.p);
  free(w->al.p);
  free(w->off);
  free(w->len);
  free(w->first);
  memset(w, 0, sizeof *w);
}

/* One pre-tokenizer over the words of in, into out. */
static int hfPreStep(const struct hfstep *st, const hfwords *in,
                     hfwords *out, int al) {
  size_t k;
  int rc = RELATTN_OK;
  relattn_bytebuf tmp = {0}, tm = {0};
  for (k = 0; k < in->n && rc == RELATTN_OK; k++) {
    const uint8_t *p = in->text.p + in->off[k];
    const uint32_t *pm =
        al ? (const uint32_t *)in->al.p + 2 * in->off[k] : NULL;
    size_t n = in->len[k], i = 0;
    if (st->kind == HP_WHITESPACE_SPLIT) {
      while (i < n && rc == RELATTN_OK) {
        size_t lead = rustLead(p + i, n - i), j;
        int first = in->first[k] && i == 0 && lead == 0;
        i += lead;
        for (j = i; j < n;) {
          uint32_t cp;
          int l = relattn_utf8_decode(p + j, n - j, &cp);
          if (l == 0) l = 1;
          else if (rustSpace(cp)) break;
          j += (size_t)l;
        }
        if (j > i) rc = wordAdd(out, p + i, j - i, first, pm ? pm + 2 * i : NULL);
        i = j;
      }
    } else { /* HP_METASPACE */
      const uint8_t *r = st->a;
      size_t rn = st->an, start;
      const uint32_t *mm;
      tmp.n = 0, tm.n = 0;
      /* (a space at the start is the replacement once replaced); the
      ** prepended one takes the first character's span (prepend) */
      if ((st->x == HF_ALWAYS || (st->x == HF_FIRST && in->first[k])) &&
          !(n >= rn && memcmp(p, r, rn) == 0) && !(n > 0 && p[0] == ' ')) {
        rc = relattn_bytebuf_add(&tmp, r, rn);
        if (pm && n > 0) {
          uint32_t cp;
          int l = relattn_utf8_decode(p, n, &cp);
          rc = alSpan(&tm, pm, 0, l ? (size_t)l : 1, rn);
        }
      }
      for (i = 0; i < n && rc == RELATTN_OK; i++) {
        rc = p[i] == ' ' ? relattn_bytebuf_add(&tmp, r, rn)
                         : relattn_bytebuf_add(&tmp, p + i, 1);
        if (rc == RELATTN_OK && pm)
          rc = alSpan(&tm, pm, i, 1, p[i] == ' ' ? rn : 1);
      }
      if (rc != RELATTN_OK) break;
      mm = pm ? (const uint32_t *)tm.p : NULL;
      if (!st->y) {
        if (tmp.n) rc = wordAdd(out, tmp.p, tmp.n, in->first[k], mm);
        continue;
      }
      /* split, each replacement merged with what follows it */
      for (start = 0, i = 0; i <= tmp.n && rc == RELATTN_OK; i++) {
        if (i == tmp.n || (i > start && tmp.n - i >= rn &&
                           memcmp(tmp.p + i, r, rn) == 0)) {
          if (i > start)
            rc = wordAdd(out, tmp.p + start, i - start,
                         in->first[k] && start == 0,
                         mm ? mm + 2 * start : NULL);
          start = i;
        }
      }
    }
  }
  free(tmp.p);
  free(tm.p);
  return rc;
}

/* The Viterbi of encode_optimized over one word, then the pieces' ids. */
typedef struct dbest {
  double score;
  int32_t id;
  int32_t start; /* -1: not reached */
} dbest;

static int hfUnigram(const spm *s, const uint8_t *t, size_t n,
                     const uint32_t *tm, relattn_idbuf *out) {
  dbest *b;
  size_t start, end, nb, k;
  int32_t *path;
  const double unk_score = s->min_dscore - 10.0;
  int rc = RELATTN_OK;
  if (n > 0x7ffffffe) return RELATTN_ERR_TOOBIG;
  b = malloc((n + 1) * sizeof *b);
  if (!b) return RELATTN_ERR_NOMEM;
  for (end = 0; end <= n; end++) b[end].start = -1, b[end].id = -1;
  b[0].score = 0;
  for (start = 0; start < n;) {
    const double here = b[start].score;
    size_t mblen = oneCharLen(t[start]), key = start;
    int32_t node = 0;
    int single = 0;
    if (mblen > n - start) mblen = n - start;
    while (key < n) {
      int32_t id;
      node = child(s, node, t[key++]);
      if (node < 0) break;
      id = s->node_id[node];
      if (id >= 0) {
        dbest *tg = &b[key];
        double cand = s->dscore[id] + here;
        if (tg->start < 0 || cand > tg->score)
          tg->score = cand, tg->start = (int32_t)start, tg->id = id;
        if (key - start == mblen) single = 1;
      }
    }
    if (!single) {
      dbest *tg = &b[start + mblen];
      double cand = unk_score + here;
      if (tg->start < 0 || cand > tg->score)
        tg->score = cand, tg->start = (int32_t)start, tg->id = s->unk;
    }
    start += mblen;
  }
  for (nb = 0, end = n; end > 0; end = (size_t)b[end].start) nb++;
  path = malloc((nb ? nb : 1) * sizeof *path);
  if (!path) {
    free(b);
    return RELATTN_ERR_NOMEM;
  }
  for (end = n, start = nb; end > 0; end = (size_t)b[end].start)
    path[--start] = (int32_t)end;
  for (k = 0; k < nb && rc == RELATTN_OK;) {
    size_t e = (size_t)path[k], s0 = (size_t)b[e].start;
    int32_t id = b[e].id;
    if (id == s->unk) { /* a run of unknowns is one token */
      while (k + 1 < nb && b[path[k + 1]].id == s->unk) e = (size_t)path[++k];
      id = trieFind(s, t + s0, e - s0);
      if (id < 0 && s->byte_fallback) {
        size_t j;
        for (j = s0; j < e && s->bytes[t[j]] >= 0; j++) {
        }
        if (j == e) {
          for (j = s0; j < e && rc == RELATTN_OK; j++) {
            if (tm) out->s0 = tm[2 * j], out->s1 = tm[2 * j + 1];
            rc = relattn_idbuf_push(out, s->bytes[t[j]]);
          }
          k++;
          continue;
        }
      }
      if (id < 0) id = s->unk;
    }
    if (tm) out->s0 = tm[2 * s0], out->s1 = tm[2 * (e - 1) + 1];
    rc = relattn_idbuf_push(out, id);
    k++;
  }
  free(path);
  free(b);
  return rc;
}

/* One part of the text between added tokens: normalized, split into
** words, each word's pieces. first: the part starts the text. */
static int hfPart(const spm *s, const uint8_t *p, size_t n, int first,
                  const uint32_t *pm, relattn_idbuf *out) {
  relattn_bytebuf a = {0}, b = {0}, am = {0}, bm = {0};
  hfwords w[2];
  int rc, k, cur = 0, al = pm != NULL;
  size_t i;
  memset(w, 0, sizeof w);
  rc = hfNormalize(s, p, n, &a, &b, &first, pm, al ? &am : NULL,
                   al ? &bm : NULL);
  if (rc == RELATTN_OK && a.n > 0)
    rc = wordAdd(&w[0], a.p, a.n, first, al ? (const uint32_t *)am.p : NULL);
  for (k = 0; k < s->n_pre && rc == RELATTN_OK && w[cur].n > 0; k++) {
    hfwords *to = &w[1 - cur];
    to->n = 0, to->text.n = 0, to->al.n = 0;
    rc = hfPreStep(&s->pre[k], &w[cur], to, al);
    cur = 1 - cur;
  }
  for (i = 0; i < w[cur].n && rc == RELATTN_OK; i++)
    rc = hfUnigram(s, w[cur].text.p + w[cur].off[i], w[cur].len[i],
                   al ? (const uint32_t *)w[cur].al.p + 2 * w[cur].off[i]
                      : NULL,
                   out);
  free(a.p);
  free(b.p);
  free(am.p);
  free(bm.p);
  wordsFree(&w[0]);
  wordsFree(&w[1]);
  return rc;
}

/* The longest added token at p (n > 0 bytes left), or NULL. */
static const struct hfadded *addedAt(const spm *s, const uint8_t *p,
                                     size_t n) {
  const struct hfadded *best = NULL;
  int k;
  for (k = 0; k < s->n_added; k++) {
    const struct hfadded *a = &s->added[k];
    if (a->n <= n && (!best || a->n > best->n) && memcmp(a->text, p, a->n) == 0)
      best = a;
  }
  return best;
}

static int hfEncode(const relattn_tokenizer *t, const uint8_t *text, size_t n,
                    relattn_idbuf *out) {
  const spm *s = (const spm *)t;
  relattn_bytebuf u = {0}, um = {0};
  size_t done = 0, at = 0;
  int rc = validUtf8(text, n, &u, out->spans_on ? &um : NULL);
  const uint32_t *m = (const uint32_t *)um.p;
  while (rc == RELATTN_OK && done < u.n) {
    const struct hfadded *a = NULL;
    size_t start, stop;
    for (at = done; at < u.n; at++)
      if ((a = addedAt(s, u.p + at, u.n - at)) != NULL) break;
    start = at, stop = a ? at + a->n : u.n;
    if (a && a->lstrip) start -= rustTrail(u.p + done, at - done);
    if (a && a->rstrip) stop += rustLead(u.p + stop, u.n - stop);
    if (start > done)
      rc = hfPart(s, u.p + done, start - done, done == 0,
                  m ? m + 2 * done : NULL, out);
    if (rc == RELATTN_OK && a) {
      if (m) out->s0 = m[2 * at], out->s1 = m[2 * (at + a->n - 1) + 1];
      rc = relattn_idbuf_push(out, a->id);
    }
    done = stop;
  }
  free(u.p);
  free(um.p);
  return rc;
}

/* ---- decode -------------------------------------------------------------- */

/* A list of token strings, as the decoders pass it along. */
typedef struct hftoks {
  relattn_bytebuf text;
  size_t *off, *len;
  size_t n, cap;
} hftoks;

static int tokAdd(hftoks *l, const uint8_t *p, size_t n) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 16, *o;
    o = realloc(l->off, cap * sizeof *o);
    if (!o) return RELATTN_ERR_NOMEM;
    l->off = o;
    o = realloc(l->len, cap * sizeof *o);
    if (!o) return RELATTN_ERR_NOMEM;
    l->len = o;
    l->cap = cap;
  }
  l->off[l->n] = l->text.n;
  l->len[l->n] = n;
  l->n++;
  return relattn_bytebuf_add(&l->text, p, n);
}

/* Token k's bytes (the buffer is NULL while every token is empty). */
static const uint8_t *tokAt(const hftoks *l, size_t k) {
  return l->text.p ? l->text.p + l->off[k] : (const uint8_t *)"";
}

static void toksFree(hftoks *l) {
  free(l->text.p);
  free(l->off);
  free(l->len);
  memset(l, 0, sizeof *l);
}

/* "<0xNN>" (either case of hex digit): its byte, else -1 */
static int byteToken(const uint8_t *p, size_t n) {
  int v = 0, d;
  if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
  for (d = 3; d < 5; d++) {
    int c = p[d];
    v = v * 16 + (c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : -1000);
  }
  return v < 0 ? -1 : v;
}

static int utf8Valid(const uint8_t *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint32_t cp;
    int l = relattn_utf8_decode(p + i, n - i, &cp);
    if (l == 0) return 0;
    i += (size_t)l;
  }
  return 1;
}

static int hfDecodeStep(const struct hfstep *st, const hftoks *in,
                        hftoks *out) {
  size_t k, i;
  int rc = RELATTN_OK;
  relattn_bytebuf tmp = {0};
  if (st->kind == HD_FUSE) {
    rc = tokAdd(out, in->text.p ? in->text.p : (const uint8_t *)"",
                in->text.n);
    return rc;
  }
  for (k = 0; k < in->n && rc == RELATTN_OK; k++) {
    const uint8_t *p = tokAt(in, k);
    size_t n = in->len[k];
    tmp.n = 0;
    switch (st->kind) {
      case HD_METASPACE:
        for (i = 0; i < n && rc == RELATTN_OK;) {
          if (n - i >= st->an && memcmp(p + i, st->a, st->an) == 0) {
            if (!(k == 0 && st->x != HF_NEVER))
              rc = relattn_bytebuf_add(&tmp, " ", 1);
            i += st->an;
          } else {
            rc = relattn_bytebuf_add(&tmp, p + i, 1);
            i++;
          }
        }
        break;
      case HD_REPLACE:
        rc = replaceAll(p, n, st->a, st->an, st->b, st->bn, &tmp, NULL, NULL);
        break;
      case HD_BYTE_FALLBACK: {
        size_t j = k;
        if (byteToken(p, n) < 0) {
          rc = relattn_bytebuf_add(&tmp, p, n);
          break;
        }
        while (j < in->n && rc == RELATTN_OK &&
               byteToken(tokAt(in, j), in->len[j]) >= 0) {
          uint8_t v = (uint8_t)byteToken(tokAt(in, j), in->len[j]);
          rc = relattn_bytebuf_add(&tmp, &v, 1);
          j++;
        }
        if (rc == RELATTN_OK && !utf8Valid(tmp.p, tmp.n)) {
          size_t m = tmp.n;
          for (i = 0; i < m && rc == RELATTN_OK; i++)
            rc = tokAdd(out, fffd3, 3);
          k = j - 1;
          continue;
        }
        k = j - 1;
        break;
      }
      case HD_STRIP: {
        /* whole characters: up to x of st->a's at the start, y at the end */
        size_t lo = 0, hi = n;
        int c;
        for (c = 0; c < st->x && hi - lo >= st->an &&
                    memcmp(p + lo, st->a, st->an) == 0; c++)
          lo += st->an;
        for (c = 0; c < st->y && hi - lo >= st->an &&
                    memcmp(p + hi - st->an, st->a, st->an) == 0; c++)
          hi -= st->an;
        rc = relattn_bytebuf_add(&tmp, p + lo, hi - lo);
        break;
      }
      default: rc = relattn_bytebuf_add(&tmp, p, n);
    }
    if (rc == RELATTN_OK) rc = tokAdd(out, tmp.p ? tmp.p : (const uint8_t *)"",
                                      tmp.n);
  }
  free(tmp.p);
  return rc;
}

static const struct hfadded *addedOf(const spm *s, int32_t id) {
  int k;
  for (k = 0; k < s->n_added; k++)
    if (s->added[k].id == id) return &s->added[k];
  return NULL;
}

static int hfDecode(const relattn_tokenizer *t, const int32_t *ids, size_t n,
                    size_t at, relattn_bytebuf *out, const char *what,
                    char *err, size_t errlen) {
  const spm *s = (const spm *)t;
  hftoks l[2];
  size_t i;
  int rc = RELATTN_OK, k, cur = 0;
  memset(l, 0, sizeof l);
  for (i = 0; i < n && rc == RELATTN_OK; i++) {
    const struct hfadded *a = addedOf(s, ids[i]);
    if (a) {
      if (!a->special) rc = tokAdd(&l[0], a->text, a->n);
      continue;
    }
    if (ids[i] < 0 || ids[i] >= s->n) {
      toksFree(&l[0]);
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: token %d at position %zu is not in the "
                            "tokenizer's vocabulary (%d ids)",
                            what, (int)ids[i], at + i, s->base.n_ids);
    }
    rc = tokAdd(&l[0], s->file + s->off[ids[i]], s->len[ids[i]]);
  }
  for (k = 0; k < s->n_dec && rc == RELATTN_OK; k++) {
    hftoks *to = &l[1 - cur];
    to->n = 0, to->text.n = 0;
    rc = hfDecodeStep(&s->dec[k], &l[cur], to);
    cur = 1 - cur;
  }
  /* the decoder's strings joined; with no decoder, by spaces */
  for (i = 0; i < l[cur].n && rc == RELATTN_OK; i++) {
    if (i > 0 && s->n_dec == 0) rc = relattn_bytebuf_add(out, " ", 1);
    if (rc == RELATTN_OK)
      rc = relattn_bytebuf_add(out, tokAt(&l[cur], i), l[cur].len[i]);
  }
  toksFree(&l[0]);
  toksFree(&l[1]);
  return rc;
}

static int32_t hfPieceId(const relattn_tokenizer *t, const uint8_t *p,
                         size_t n) {
  const spm *s = (const spm *)t;
  int k;
  for (k = 0; k < s->n_added; k++)
    if (s->added[k].n == n && memcmp(s->added[k].text, p, n) == 0)
      return s->added[k].id;
  return trieFind(s, p, n);
}

static const uint8_t *hfIdText(const relattn_tokenizer *t, int32_t id,
                               size_t *n) {
  const spm *s = (const spm *)t;
  const struct hfadded *a = addedOf(s, id);
  if (a) {
    *n = a->n;
    return a->text;
  }
  return spmIdText(t, id, n);
}

/* ---- decode (SentencePiece) ------------------------------------------------------ */

static int spmDecode(const relattn_tokenizer *t, const int32_t *ids, size_t n,
                     size_t at, relattn_bytebuf *out, const char *what,
                     char *err, size_t errlen) {
  static const uint8_t ws[3] = {0xE2, 0x96, 0x81};
  static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
  const spm *s = (const spm *)t;
  const size_t begin = out->n; /* the text starts here */
  size_t i = 0, k;
  int rc = RELATTN_OK;
  /* The leading U+2581 dropped, as SentencePieceProcessor::Decode does
  ** (sentencepiece_processor.cc, v0.1.97: is_bos_ws, bos_ws_seen): bos
  ** holds until a piece (not a byte piece) finds text written, or finds
  ** that the piece before it dropped one; while it holds, a piece starting
  ** with U+2581 drops it, with add_dummy_prefix or remove_extra_whitespaces.
  ** With remove_extra_whitespaces no piece counts as having dropped one,
  ** so each drops its U+2581 until there is text: the pieces U+2581,
  ** U+2581, U+2581 "the" decode to "the", not "  the". */
  int bos = 1, seen = 0;
  while (i < n && rc == RELATTN_OK) {
    int32_t id = ids[i];
    if (id < 0 || id >= s->n)
      return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                            "%s: token %d at position %zu is not in the "
                            "tokenizer's vocabulary (%d pieces)",
                            what, (int)id, at + i, s->n);
    if (s->type[id] == P_BYTE) {
      /* a run of byte pieces: its UTF-8 characters, each invalid byte
      ** U+FFFD */
      relattn_bytebuf run = {0};
      size_t at = 0;
      for (; rc == RELATTN_OK && i < n && ids[i] >= 0 && ids[i] < s->n &&
             s->type[ids[i]] == P_BYTE; i++) {
        const uint8_t *p = s->file + s->off[ids[i]];
        uint8_t v = 0;
        for (k = 3; k < 5; k++)
          v = (uint8_t)(v * 16 + (p[k] <= '9' ? p[k] - '0' : p[k] - 'A' + 10));
        rc = relattn_bytebuf_add(&run, &v, 1);
      }
      while (rc == RELATTN_OK && at < run.n) {
        uint32_t cp;
        int l = relattn_utf8_decode(run.p + at, run.n - at, &cp);
        if (l == 0) rc = relattn_bytebuf_add(out, fffd, 3), at++;
        else rc = relattn_bytebuf_add(out, run.p + at, (size_t)l), at += (size_t)l;
      }
      free(run.p);
      continue;
    }
    if (seen || out->n > begin) bos = 0;
    seen = 0;
    if (s->type[id] == P_CONTROL) {
      i++;
      continue;
    }
    if (s->type[id] == P_UNKNOWN) {
      rc = relattn_bytebuf_add(out, s->unk_surface, s->unk_surface_n);
      i++;
      continue;
    }
    {
      const uint8_t *p = s->file + s->off[id];
      size_t len = s->len[id];
      if (bos && (s->dummy_prefix || s->extra_ws) && len >= 3 &&
          memcmp(p, ws, 3) == 0) {
        p += 3, len -= 3;
        seen = !s->extra_ws;
      }
      for (k = 0; k < len && rc == RELATTN_OK;) {
        if (len - k >= 3 && memcmp(p + k, ws, 3) == 0) {
          rc = relattn_bytebuf_add(out, " ", 1);
          k += 3;
        } else {
          rc = relattn_bytebuf_add(out, p + k, 1);
          k++;
        }
      }
    }
    i++;
  }
  return rc;
}

/* ---- the file ----------------------------------------------------------------- */

static void spmDestroy(relattn_tokenizer *t) {
  spm *s = (spm *)t;
  free(s->file);
  free(s->off);
  free(s->len);
  free(s->score);
  free(s->type);
  free(s->node_id);
  free(s->edges);
  free(s->l1);
  free(s->reserved);
  free(s->units);
  free(s->dscore);
  free(s->norm);
  free(s->pre);
  free(s->dec);
  free(s->added);
  free(s);
}


/* The pipeline of HF_FIELD: fields 1, 2, 3 a normalizer, pre-tokenizer,
** decoder step each (a message: 1 kind, 2 a, 3 b, 4 x, 5 y), 4 the scores
** (little-endian doubles, one per piece), 5 an added token (1 id, 2 text,
** 3 flags: 1 special, 2 lstrip, 4 rstrip), 6 the unknown piece's id. */
static int hfRead(spm *s, const uint8_t *d, size_t len, const uint8_t **cmap,
                  size_t *cmap_n, const char *what, char *err,
                  size_t errlen) {
  pb r, q;
  pbfield f, g;
  int cap = 0, rc, k;
  const uint8_t *scores = NULL;
  size_t scores_n = 0;
  s->hf = 1;
  s->unk = -1;
  r.p = d, r.end = d + len;
  while ((rc = pbNext(&r, &f)) == 1) cap++;
  if (rc < 0) goto bad;
  s->norm = calloc((size_t)cap + 1, sizeof *s->norm);
  s->pre = calloc((size_t)cap + 1, sizeof *s->pre);
  s->dec = calloc((size_t)cap + 1, sizeof *s->dec);
  s->added = calloc((size_t)cap + 1, sizeof *s->added);
  if (!s->norm || !s->pre || !s->dec || !s->added) return RELATTN_ERR_NOMEM;
  r.p = d, r.end = d + len;
  while (pbNext(&r, &f) == 1) {
    if (f.num >= 1 && f.num <= 3 && f.wire == 2) {
      struct hfstep *st = f.num == 1   ? &s->norm[s->n_norm++]
                          : f.num == 2 ? &s->pre[s->n_pre++]
                                       : &s->dec[s->n_dec++];
      q.p = f.data, q.end = f.data + f.len;
      while ((rc = pbNext(&q, &g)) == 1) {
        if (g.num == 1 && g.wire == 0) st->kind = (int)(g.v > 99 ? 99 : g.v);
        if (g.num == 2 && g.wire == 2) st->a = g.data, st->an = g.len;
        if (g.num == 3 && g.wire == 2) st->b = g.data, st->bn = g.len;
        if (g.num == 4 && g.wire == 0)
          st->x = (int)(g.v > 1000000 ? 1000000 : g.v);
        if (g.num == 5 && g.wire == 0)
          st->y = (int)(g.v > 1000000 ? 1000000 : g.v);
      }
      if (rc < 0) goto bad;
      if (f.num == 1 && st->kind == HN_PRECOMPILED)
        *cmap = st->a, *cmap_n = st->an;
      if ((f.num == 2 && st->kind == HP_METASPACE && st->an == 0) ||
          (f.num == 3 && (st->kind == HD_METASPACE || st->kind == HD_STRIP) &&
           st->an == 0))
        goto bad;
    } else if (f.num == 4 && f.wire == 2) {
      scores = f.data, scores_n = f.len;
    } else if (f.num == 5 && f.wire == 2) {
      struct hfadded *a = &s->added[s->n_added++];
      a->id = -1;
      q.p = f.data, q.end = f.data + f.len;
      while ((rc = pbNext(&q, &g)) == 1) {
        if (g.num == 1 && g.wire == 0 && g.v < 0x7fffffff) a->id = (int32_t)g.v;
        if (g.num == 2 && g.wire == 2) a->text = g.data, a->n = g.len;
        if (g.num == 3 && g.wire == 0) {
          a->special = (g.v & 1) != 0;
          a->lstrip = (g.v & 2) != 0;
          a->rstrip = (g.v & 4) != 0;
        }
      }
      if (rc < 0 || a->id < 0 || a->n == 0) goto bad;
    } else if (f.num == 6 && f.wire == 0) {
      s->unk = f.v < 0x7fffffff ? (int)f.v : -1;
    }
  }
  if (!scores || scores_n != (size_t)s->n * 8 || s->unk < 0 || s->unk >= s->n)
    goto bad;
  s->dscore = malloc((size_t)s->n * sizeof *s->dscore);
  if (!s->dscore) return RELATTN_ERR_NOMEM;
  s->min_dscore = 1.0 / 0.0;
  for (k = 0; k < s->n; k++) {
    uint64_t u = 0;
    int b;
    for (b = 7; b >= 0; b--) u = u << 8 | scores[8 * (size_t)k + (size_t)b];
    memcpy(&s->dscore[k], &u, 8);
    if (s->dscore[k] < s->min_dscore) s->min_dscore = s->dscore[k];
  }
  return RELATTN_OK;
bad:
  return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                        "%s: tokenizer.sentencepiece: its tokenizer.json "
                        "pipeline (field %d) is malformed", what, HF_FIELD);
}

#define BAD(...) \
  do { \
    rc = relattn_errorf(err, errlen, RELATTN_ERR_FORMAT, __VA_ARGS__); \
    goto fail; \
  } while (0)

int relattn_sentencepiece_init(relattn_tokenizer **out, const relattn_config *c,
                               const uint8_t *file, size_t n, const char *what,
                               char *err, size_t errlen) {
  spm *s;
  pb r, q;
  pbfield f, g;
  int rc, k, cap_pieces = 0, total = 0;
  size_t i, cap;
  const uint8_t *charsmap = NULL, *hf = NULL;
  size_t charsmap_n = 0, hf_n = 0;
  float fl;
  (void)c;
  *out = NULL;
  s = calloc(1, sizeof *s);
  if (!s) return RELATTN_ERR_NOMEM;
  s->file = malloc(n ? n : 1);
  if (!s->file) goto nomem;
  if (n) memcpy(s->file, file, n);
  s->model = M_UNIGRAM;
  s->dummy_prefix = s->extra_ws = s->escape_ws = 1;
  s->unk = -1;
  s->unk_surface = (const uint8_t *)" \xE2\x81\x87 ";
  s->unk_surface_n = 5;
  for (k = 0; k < 256; k++) s->bytes[k] = -1, s->root[k] = -1;
  /* first pass: count the pieces */
  r.p = s->file, r.end = s->file + n;
  while ((rc = pbNext(&r, &f)) == 1)
    if (f.num == 1 && f.wire == 2) cap_pieces++;
  if (rc < 0)
    BAD("%s: tokenizer.sentencepiece is not a SentencePiece model (malformed "
        "protobuf at byte %zu)", what, (size_t)(r.p - s->file));
  if (cap_pieces == 0)
    BAD("%s: tokenizer.sentencepiece has no pieces", what);
  s->off = malloc(cap_pieces * sizeof *s->off);
  s->len = malloc(cap_pieces * sizeof *s->len);
  s->score = malloc(cap_pieces * sizeof *s->score);
  s->type = malloc(cap_pieces);
  if (!s->off || !s->len || !s->score || !s->type) goto nomem;
  r.p = s->file, r.end = s->file + n;
  while (pbNext(&r, &f) == 1) {
    if (f.num == 1 && f.wire == 2) { /* SentencePiece */
      int id = s->n++;
      s->off[id] = 0, s->len[id] = 0, s->score[id] = 0, s->type[id] = P_NORMAL;
      q.p = f.data, q.end = f.data + f.len;
      while ((rc = pbNext(&q, &g)) == 1) {
        if (g.num == 1 && g.wire == 2) {
          s->off[id] = (uint32_t)(g.data - s->file);
          s->len[id] = (uint32_t)g.len;
        } else if (g.num == 2 && g.wire == 5) {
          uint32_t u = (uint32_t)g.v;
          memcpy(&fl, &u, 4);
          s->score[id] = fl;
        } else if (g.num == 3 && g.wire == 0) {
          if (g.v < P_NORMAL || g.v > P_BYTE)
            BAD("%s: tokenizer.sentencepiece: piece %d has an unknown type "
                "%llu", what, id, (unsigned long long)g.v);
          s->type[id] = (uint8_t)g.v;
        }
      }
      if (rc < 0)
        BAD("%s: tokenizer.sentencepiece is not a SentencePiece model "
            "(malformed piece %d)", what, id);
      if (s->len[id] == 0)
        BAD("%s: tokenizer.sentencepiece: piece %d is empty", what, id);
      total += (int)s->len[id];
    } else if (f.num == HF_FIELD && f.wire == 2) {
      hf = f.data, hf_n = f.len;
    } else if ((f.num == 2 || f.num == 3) && f.wire == 2) {
      /* TrainerSpec, NormalizerSpec */
      q.p = f.data, q.end = f.data + f.len;
      while ((rc = pbNext(&q, &g)) == 1) {
        if (f.num == 2 && g.wire == 0) {
          if (g.num == 3) s->model = (int)(g.v > 99 ? 99 : g.v);
          if (g.num == 35) s->byte_fallback = g.v != 0;
          if (g.num == 24 && g.v)
            BAD("%s: tokenizer.sentencepiece: treat_whitespace_as_suffix is "
                "not supported", what);
        } else if (f.num == 2 && g.num == 44 && g.wire == 2) {
          s->unk_surface = g.data, s->unk_surface_n = g.len;
        } else if (f.num == 3 && g.wire == 0) {
          if (g.num == 3) s->dummy_prefix = g.v != 0;
          if (g.num == 4) s->extra_ws = g.v != 0;
          if (g.num == 5) s->escape_ws = g.v != 0;
        } else if (f.num == 3 && g.num == 2 && g.wire == 2) {
          charsmap = g.data, charsmap_n = g.len;
        }
      }
      if (rc < 0)
        BAD("%s: tokenizer.sentencepiece is not a SentencePiece model "
            "(malformed %s)", what,
            f.num == 2 ? "trainer_spec" : "normalizer_spec");
    }
  }
  if (s->model != M_UNIGRAM && s->model != M_BPE)
    BAD("%s: tokenizer.sentencepiece: model_type %d is not supported (only "
        "unigram and bpe)", what, s->model);

  /* the trie and the reserved pieces */
  for (cap = 16; cap < 2 * (size_t)total + 2; cap *= 2) {
  }
  s->node_id = malloc(((size_t)total + 257) * sizeof *s->node_id);
  s->edges = calloc(cap, sizeof *s->edges);
  s->l1 = malloc(256 * 256 * sizeof *s->l1);
  s->edge_mask = cap - 1;
  for (cap = 16; cap < 2 * (size_t)s->n; cap *= 2) {
  }
  s->reserved = malloc(cap * sizeof *s->reserved);
  s->reserved_mask = cap - 1;
  if (!s->node_id || !s->edges || !s->l1 || !s->reserved) goto nomem;
  for (i = 0; i < cap; i++) s->reserved[i] = -1;
  for (i = 0; i < 256 * 256; i++) s->l1[i] = -1;
  for (i = 0; i < 257; i++) s->node_id[i] = -1;
  s->n_nodes = 257;
  s->min_score = FLT_MAX;
  s->max_score = FLT_MIN;
  if (hf) {
    /* Hugging Face's Unigram: every piece in the trie (its token_to_ids),
    ** byte_fallback's pieces found by their text */
    charsmap = NULL, charsmap_n = 0;
    if ((rc = hfRead(s, hf, hf_n, &charsmap, &charsmap_n, what, err,
                     errlen)) != RELATTN_OK)
      goto fail;
    for (k = 0; k < s->n; k++)
      if (!trieAdd(s, k))
        BAD("%s: tokenizer.sentencepiece: piece %d is defined twice", what, k);
    if (s->byte_fallback)
      for (k = 0; k < 256; k++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", k);
        s->bytes[k] = trieFind(s, (const uint8_t *)name, 6);
      }
  }
  for (k = 0; !hf && k < s->n; k++) {
    int t = s->type[k];
    if (t == P_NORMAL) {
      if (s->score[k] < s->min_score) s->min_score = s->score[k];
      if (s->score[k] > s->max_score) s->max_score = s->score[k];
    }
    if (t == P_NORMAL || t == P_USER || t == P_UNUSED) {
      if (!trieAdd(s, k))
        BAD("%s: tokenizer.sentencepiece: piece %d is defined twice", what, k);
      if (t == P_USER) s->has_user = 1;
      continue;
    }
    if (reservedFind(s, s->file + s->off[k], s->len[k]) >= 0)
      BAD("%s: tokenizer.sentencepiece: piece %d is defined twice", what, k);
    for (i = hashBytes(s->file + s->off[k], s->len[k]) & s->reserved_mask;
         s->reserved[i] >= 0; i = (i + 1) & s->reserved_mask) {
    }
    s->reserved[i] = k;
    if (t == P_UNKNOWN) {
      if (s->unk >= 0)
        BAD("%s: tokenizer.sentencepiece has two unknown pieces", what);
      s->unk = k;
    }
    if (t == P_BYTE) {
      const uint8_t *p = s->file + s->off[k];
      int v = -1, d;
      if (!s->byte_fallback)
        BAD("%s: tokenizer.sentencepiece has byte pieces but no "
            "byte_fallback", what);
      if (s->len[k] == 6 && memcmp(p, "<0x", 3) == 0 && p[5] == '>') {
        v = 0;
        for (d = 3; d < 5 && v >= 0; d++)
          v = p[d] >= '0' && p[d] <= '9' ? v * 16 + (p[d] - '0')
              : p[d] >= 'A' && p[d] <= 'F' ? v * 16 + (p[d] - 'A' + 10) : -1;
      }
      if (v < 0)
        BAD("%s: tokenizer.sentencepiece: byte piece %d is not <0x00> to "
            "<0xFF>", what, k);
      s->bytes[v] = k;
    }
  }
  if (s->min_score == FLT_MAX) s->min_score = 0;
  if (s->max_score == FLT_MIN) s->max_score = 0;
  if (hf) {
    /* no check of the spm kinds of piece: the pipeline decides */
  } else if (s->unk < 0)
    BAD("%s: tokenizer.sentencepiece has no unknown piece", what);
  if (s->byte_fallback && !hf)
    for (k = 0; k < 256; k++)
      if (s->bytes[k] < 0)
        BAD("%s: tokenizer.sentencepiece has byte_fallback but no piece "
            "<0x%02X>", what, k);

  /* the precompiled character map: uint32 trie size, trie, replacements */
  if (charsmap_n > 0) {
    uint32_t tsize;
    if (charsmap_n <= 4) BAD("%s: tokenizer.sentencepiece: the normalizer's "
                             "character map is broken", what);
    tsize = (uint32_t)charsmap[0] | (uint32_t)charsmap[1] << 8 |
            (uint32_t)charsmap[2] << 16 | (uint32_t)charsmap[3] << 24;
    if ((size_t)tsize >= charsmap_n - 4 || tsize < 4 || tsize % 4)
      BAD("%s: tokenizer.sentencepiece: the normalizer's character map is "
          "broken", what);
    s->n_units = tsize / 4;
    s->units = malloc(tsize);
    if (!s->units) goto nomem;
    for (i = 0; i < s->n_units; i++) {
      const uint8_t *u = charsmap + 4 + 4 * i;
      s->units[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 |
                    (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
    }
    s->pool = charsmap + 4 + tsize;
    s->pool_n = charsmap_n - 4 - tsize;
  }
  s->base.n_ids = s->n;
  s->base.encode = spmEncode;
  s->base.decode = spmDecode;
  s->base.destroy = spmDestroy;
  s->base.piece_id = spmPieceId;
  s->base.id_text = spmIdText;
  if (hf) {
    for (k = 0; k < s->n_added; k++) {
      const struct hfadded *a = &s->added[k];
      if (a->id < s->n && (s->len[a->id] != a->n ||
                           memcmp(s->file + s->off[a->id], a->text, a->n)))
        BAD("%s: tokenizer.sentencepiece: added token %d is not the piece "
            "of its id", what, (int)a->id);
      if (a->id >= s->base.n_ids) s->base.n_ids = a->id + 1;
    }
    s->base.encode = hfEncode;
    s->base.decode = hfDecode;
    s->base.piece_id = hfPieceId;
    s->base.id_text = hfIdText;
  }
  *out = &s->base;
  return RELATTN_OK;
nomem:
  spmDestroy(&s->base);
  return RELATTN_ERR_NOMEM;
fail:
  spmDestroy(&s->base);
  return rc;
}

/* ---- transformers' converter: an spm.model as its tokenizer.json ------------- */

/* Protobuf writing into a bytebuf; each returns the buffer's status. */
static int pbwVar(relattn_bytebuf *o, uint64_t v) {
  uint8_t b[10];
  size_t k = 0;
  do {
    b[k] = (uint8_t)(v & 0x7f);
    v >>= 7;
    if (v) b[k] |= 0x80;
    k++;
  } while (v);
  return relattn_bytebuf_add(o, b, k);
}

static int pbwInt(relattn_bytebuf *o, int num, uint64_t v) {
  int rc = pbwVar(o, (uint64_t)num << 3);
  return rc == RELATTN_OK ? pbwVar(o, v) : rc;
}

static int pbwBytes(relattn_bytebuf *o, int num, const void *p, size_t n) {
  int rc = pbwVar(o, (uint64_t)num << 3 | 2);
  if (rc == RELATTN_OK) rc = pbwVar(o, n);
  if (rc == RELATTN_OK && n) rc = relattn_bytebuf_add(o, p, n);
  return rc;
}

/* A pipeline step (hfRead's message) as field num of o. */
static int pbwStep(relattn_bytebuf *o, int num, int kind, const void *a,
                   size_t an, const char *b, int x, int y) {
  relattn_bytebuf m = {0};
  int rc = pbwInt(&m, 1, (uint64_t)kind);
  if (rc == RELATTN_OK && a) rc = pbwBytes(&m, 2, a, an);
  if (rc == RELATTN_OK && b) rc = pbwBytes(&m, 3, b, strlen(b));
  if (rc == RELATTN_OK && x) rc = pbwInt(&m, 4, (uint64_t)x);
  if (rc == RELATTN_OK && y) rc = pbwInt(&m, 5, (uint64_t)y);
  if (rc == RELATTN_OK) rc = pbwBytes(o, num, m.p, m.n);
  free(m.p);
  return rc;
}

static int addedById(const void *a, const void *b) {
  const relattn_spm_added *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

#define SPACE_MARK "\xE2\x96\x81" /* U+2581, Metaspace's replacement */

int relattn_sentencepiece_convert(const uint8_t *file, size_t n,
                                  const relattn_spm_convert *c, uint8_t **out,
                                  size_t *out_n, const char *what, char *err,
                                  size_t errlen) {
  pb r, q;
  pbfield f, g;
  relattn_bytebuf o = {0}, hf = {0}, sc = {0};
  relattn_spm_added *added = NULL;
  const uint8_t *charsmap = NULL;
  size_t charsmap_n = 0;
  uint64_t model_type = 1, unk = 0;
  int n_pieces = 0, n_added = 0, byte_fallback = 0, rc = RELATTN_OK, k, i;
  *out = NULL, *out_n = 0;
  /* the pieces' count, the trainer's and normalizer's settings */
  r.p = file, r.end = file + n;
  while ((rc = pbNext(&r, &f)) == 1) {
    if (f.num == 1 && f.wire == 2) n_pieces++;
    if (f.num == HF_FIELD)
      return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                            "%s: the SentencePiece model already carries a "
                            "tokenizer.json pipeline (field %d)", what,
                            HF_FIELD);
    if ((f.num == 2 || f.num == 3) && f.wire == 2) {
      q.p = f.data, q.end = f.data + f.len;
      while (pbNext(&q, &g) == 1) {
        if (f.num == 2 && g.wire == 0 && g.num == 3) model_type = g.v;
        if (f.num == 2 && g.wire == 0 && g.num == 40) unk = g.v;
        if (f.num == 2 && g.wire == 0 && g.num == 35) byte_fallback = g.v != 0;
        if (f.num == 3 && g.wire == 2 && g.num == 2)
          charsmap = g.data, charsmap_n = g.len;
      }
    }
  }
  if (rc < 0 || n_pieces == 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "%s: not a SentencePiece model", what);
  if (model_type != 1)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: a SentencePiece model of model_type %llu is "
                          "not supported (only unigram, which the converter "
                          "makes a Unigram)", what,
                          (unsigned long long)model_type);
  if (unk >= (uint64_t)n_pieces)
    return relattn_errorf(err, errlen, RELATTN_ERR_FORMAT,
                          "%s: the SentencePiece model's unk_id %llu is not "
                          "one of its %d pieces", what,
                          (unsigned long long)unk, n_pieces);
  if (c->n_extra < 0 || c->n_extra > 1000000 || c->n_added < 0)
    return relattn_errorf(err, errlen, RELATTN_ERR_ARG,
                          "%s: bad conversion plan", what);
  added = malloc(((size_t)n_pieces + (size_t)c->n_added + 1) * sizeof *added);
  if (!added) return RELATTN_ERR_NOMEM;

  /* the model as it is, then the converter's pieces after it (T5's
  ** <extra_id_N>, the last first, score 0) */
  rc = relattn_bytebuf_add(&o, file, n);
  for (k = c->n_extra - 1; k >= 0 && rc == RELATTN_OK; k--) {
    char piece[32];
    relattn_bytebuf m = {0};
    uint8_t zero[4] = {0, 0, 0, 0};
    snprintf(piece, sizeof piece, "<extra_id_%d>", k);
    rc = pbwBytes(&m, 1, piece, strlen(piece));
    if (rc == RELATTN_OK) rc = pbwVar(&m, 2 << 3 | 5);
    if (rc == RELATTN_OK) rc = relattn_bytebuf_add(&m, zero, 4);
    if (rc == RELATTN_OK) rc = pbwBytes(&o, 1, m.p, m.n);
    free(m.p);
  }
  /* the converters leave byte_fallback off (handle_byte_fallback): a later
  ** trainer_spec overrides the field, as protobuf merges messages */
  if (byte_fallback && rc == RELATTN_OK) {
    relattn_bytebuf m = {0};
    rc = pbwInt(&m, 35, 0);
    if (rc == RELATTN_OK) rc = pbwBytes(&o, 2, m.p, m.n);
    free(m.p);
  }

  /* normalizers: DebertaV2Converter's Lowercase (do_lower_case), Strip,
  ** Precompiled, Replace(" {2,}", " "); SpmConverter's (T5) Precompiled,
  ** Strip(right), Replace(" {2,}", "▁"). No charsmap: no Precompiled. */
  if (rc == RELATTN_OK && !c->t5 && c->lower)
    rc = pbwStep(&hf, 1, HN_LOWERCASE, NULL, 0, NULL, 0, 0);
  if (rc == RELATTN_OK && !c->t5)
    rc = pbwStep(&hf, 1, HN_STRIP, NULL, 0, NULL, 1, 1);
  if (rc == RELATTN_OK && charsmap_n)
    rc = pbwStep(&hf, 1, HN_PRECOMPILED, charsmap, charsmap_n, NULL, 0, 0);
  if (rc == RELATTN_OK && c->t5)
    rc = pbwStep(&hf, 1, HN_STRIP, NULL, 0, NULL, 0, 1);
  if (rc == RELATTN_OK)
    rc = pbwStep(&hf, 1, HN_REPLACE_RUN, " ", 1, c->t5 ? SPACE_MARK : " ", 2,
                 0);
  /* Metaspace, pre-tokenizer (split) and decoder */
  if (rc == RELATTN_OK)
    rc = pbwStep(&hf, 2, HP_METASPACE, SPACE_MARK, 3, NULL, c->scheme, 1);
  if (rc == RELATTN_OK)
    rc = pbwStep(&hf, 3, HD_METASPACE, SPACE_MARK, 3, NULL, c->scheme, 0);

  /* the scores in double (Python's float of each float32), the added
  ** tokens: control pieces (special) and user-defined ones (not), then
  ** the tokenizer's, which replace one of the same id */
  r.p = file, r.end = file + n;
  i = 0;
  while (rc == RELATTN_OK && pbNext(&r, &f) == 1) {
    float fl = 0;
    double d;
    uint8_t le[8];
    uint64_t u, type = 1;
    const uint8_t *text = NULL;
    size_t tn = 0;
    int b;
    if (!(f.num == 1 && f.wire == 2)) continue;
    q.p = f.data, q.end = f.data + f.len;
    while (pbNext(&q, &g) == 1) {
      if (g.num == 1 && g.wire == 2) text = g.data, tn = g.len;
      if (g.num == 2 && g.wire == 5) {
        uint32_t u32 = (uint32_t)g.v;
        memcpy(&fl, &u32, 4);
      }
      if (g.num == 3 && g.wire == 0) type = g.v;
    }
    d = fl;
    memcpy(&u, &d, 8);
    for (b = 0; b < 8; b++) le[b] = (uint8_t)(u >> (8 * b));
    rc = relattn_bytebuf_add(&sc, le, 8);
    if ((type == 3 || type == 4) && text && tn) {
      added[n_added].id = i;
      added[n_added].text = (const char *)text;
      added[n_added].n = tn;
      added[n_added].flags = type == 3 ? RELATTN_ADDED_SPECIAL : 0;
      n_added++;
    }
    i++;
  }
  for (k = 0; k < c->n_extra && rc == RELATTN_OK; k++) {
    uint8_t z[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    rc = relattn_bytebuf_add(&sc, z, 8);
  }
  for (k = 0; k < c->n_added; k++) {
    for (i = 0; i < n_added && added[i].id != c->added[k].id; i++) {
    }
    added[i] = c->added[k];
    if (i == n_added) n_added++;
  }
  qsort(added, (size_t)n_added, sizeof *added, addedById);
  if (rc == RELATTN_OK) rc = pbwBytes(&hf, 4, sc.p, sc.n);
  for (k = 0; k < n_added && rc == RELATTN_OK; k++) {
    relattn_bytebuf m = {0};
    rc = pbwInt(&m, 1, (uint64_t)added[k].id);
    if (rc == RELATTN_OK) rc = pbwBytes(&m, 2, added[k].text, added[k].n);
    if (rc == RELATTN_OK) rc = pbwInt(&m, 3, (uint64_t)added[k].flags);
    if (rc == RELATTN_OK) rc = pbwBytes(&hf, 5, m.p, m.n);
    free(m.p);
  }
  if (rc == RELATTN_OK) rc = pbwInt(&hf, 6, unk);
  if (rc == RELATTN_OK) rc = pbwBytes(&o, HF_FIELD, hf.p, hf.n);
  free(hf.p);
  free(sc.p);
  free(added);
  if (rc != RELATTN_OK) {
    free(o.p);
    return rc;
  }
  *out = o.p, *out_n = o.n;
  return RELATTN_OK;
}

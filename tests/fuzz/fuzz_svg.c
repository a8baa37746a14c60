/*
** fuzz_svg.c: the pictures on hostile tokens and rows.
**
** Byte 0 picks the SQL (mod 6), byte 1 the layer and head, byte 2 the clip
** (profile); the rest is the tokens (TEXT, or a BLOB of int32 ids when bit 4
** of byte 0 is set) or, for the profile, the series labels. Every picture
** must be clean: valid UTF-8 with no control character but \n, every '<'
** closed by a '>' (text and attributes carry no raw '<' or '>'), ending in
** "</svg>\n", and under 4 MB.
*/
#include "fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  fuzz_db();
  return 0;
}

static const char *const SQL[] = {
    "SELECT relattn_svg_attention('tiny', ?1, ?2, ?3)",
    "SELECT relattn_svg_attention('enc', ?1, ?2, ?3)",
    "SELECT relattn_svg_surprise('tiny', ?1)",
    "SELECT relattn_svg_surprise('enc', ?1)",
    /* the labels are the input, cut into pieces */
    "SELECT relattn_svg_profile(w.distance, w.weight, "
    "substr(?1, 1 + w.head * 3, 3 + w.layer), ?4) "
    "FROM relattn_attention_weights('enc', ?1) AS w",
    "SELECT relattn_svg_profile(CAST(key AS INTEGER) * ?2 - 40, ?3 * 0.01, "
    "substr(?1, key % 70, 2)) FROM json_each(json_array(?1, ?1, ?1, ?1, ?1, "
    "?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, "
    "?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, "
    "?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, "
    "?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1, ?1))",
};

static void check_clean(const unsigned char *s, size_t n) {
  size_t i = 0, lt = 0, gt = 0;
  FUZZ_CHECK(n < ((size_t)4 << 20), "picture of %zu bytes", n);
  FUZZ_CHECK(n > 7 && memcmp(s + n - 7, "</svg>\n", 7) == 0, "no </svg> end");
  while (i < n) {
    unsigned c = s[i];
    int len, k;
    if (c < 0x80) {
      FUZZ_CHECK((c >= 0x20 || c == '\n') && c != 0x7F,
                 "control byte 0x%02X at %zu", c, i);
      lt += c == '<';
      gt += c == '>';
      FUZZ_CHECK(gt <= lt && lt <= gt + 1, "unbalanced '<' '>' at %zu", i);
      i++;
      continue;
    }
    len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c < 0xF0 ? 3
          : c >= 0xC2 && c < 0xE0 ? 2 : 0;
    FUZZ_CHECK(len && i + (size_t)len <= n, "bad UTF-8 lead 0x%02X at %zu", c,
               i);
    for (k = 1; k < len; k++)
      FUZZ_CHECK((s[i + k] & 0xC0) == 0x80, "bad UTF-8 at %zu", i + k);
    FUZZ_CHECK(!(c == 0xC2 && s[i + 1] < 0xA0), "C1 control at %zu", i);
    FUZZ_CHECK(!(c == 0xE0 && s[i + 1] < 0xA0), "overlong at %zu", i);
    FUZZ_CHECK(!(c == 0xED && s[i + 1] > 0x9F), "surrogate at %zu", i);
    FUZZ_CHECK(!(c == 0xF0 && s[i + 1] < 0x90), "overlong at %zu", i);
    FUZZ_CHECK(!(c == 0xF4 && s[i + 1] > 0x8F), "past U+10FFFF at %zu", i);
    FUZZ_CHECK(!(c == 0xE2 && s[i + 1] == 0x80 && s[i + 2] >= 0xAA &&
                 s[i + 2] <= 0xAE),
               "bidi override at %zu", i);
    i += (size_t)len;
  }
  FUZZ_CHECK(lt == gt, "%zu '<' but %zu '>'", lt, gt);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sqlite3 *db = fuzz_db();
  fuzz_in in = {data, size};
  unsigned op = fuzz_u8(&in), which = op % 6, lh = fuzz_u8(&in);
  unsigned clip = fuzz_u8(&in);
  sqlite3_stmt *st;
  int rc;

  fuzz_begin(db);
  if (sqlite3_prepare_v2(db, SQL[which], -1, &st, 0) != SQLITE_OK) {
    fuzz_end(db);
    return 0;
  }
  if (op >> 4 & 1)
    sqlite3_bind_blob(st, 1, in.p, (int)in.n, SQLITE_STATIC);
  else
    sqlite3_bind_text(st, 1, (const char *)in.p, (int)in.n, SQLITE_STATIC);
  /* layer and head: mostly in range, sometimes not */
  sqlite3_bind_int(st, 2, (int)(lh & 7) - 1);
  sqlite3_bind_int(st, 3, (int)(lh >> 4 & 3));
  if (which == 4) sqlite3_bind_int(st, 4, (int)clip - 8);
  while ((rc = sqlite3_step(st)) == SQLITE_ROW)
    if (sqlite3_column_type(st, 0) == SQLITE_TEXT)
      check_clean(sqlite3_column_text(st, 0),
                  (size_t)sqlite3_column_bytes(st, 0));
  sqlite3_finalize(st);
  fuzz_end(db);
  return 0;
}

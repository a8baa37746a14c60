#!/usr/bin/python3
"""Writes src/unicode_data.c: the Unicode properties the wordpiece tokenizer
needs, taken from Python's unicodedata (so they match what the Python
reference tokenizers see on this machine). Run: /usr/bin/python3 src/unicode_gen.py

  flags   per code point: BERT's control (category C*, not \\t \\n \\r),
          BERT's whitespace (space, \\t, \\n, \\r, Zs), Python's str.isspace
          (what str.split splits on), BERT's punctuation (P* and the ASCII
          symbols), Mn (dropped by strip_accents), and cased / case-ignorable
          (str.lower()'s final sigma rule), and grapheme extend (a mark
          or joiner that stays in the cluster of the character before it)
  flags8  the same flags as Hugging Face's Rust tokenizers library sees
          them: its categories (the unicode_categories crate) are those of
          Unicode 8.0, so a code point assigned later is none of control,
          punctuation or Mn there (perl's Unicode::UCD gives each code
          point's age), and a few changed category since
  lower   str.lower() of each code point that changes (one to three)
  nfd     unicodedata.normalize('NFD') of each code point that changes,
          Hangul syllables included
  nfkd    unicodedata.normalize('NFKD') likewise, Hangul syllables left
          out (they compose back; src/unicode.c's NFKC composes jamo)
  ccc     the canonical combining class of each code point, as ranges
  compose the canonical compositions NFC makes of a pair (a starter and
          what follows it), Hangul left out: a, b, their composite
  in11    the code points assigned by Unicode 11.0: the NFC and NFKC of
          Hugging Face's tokenizers library (its unicode-normalization
          crate) know no later one (found by comparing its answers on
          every code point NFKC changes: tests/sql/test_tokenizer_json_unigram.py)
"""
import bisect
import sys
import unicodedata

MAX = 0x110000


# Unicode 8.0's categories where a later version changed them, among the
# code points whose flags differ (found by comparing the library's answers
# on every P*, Mn and C* code point: tests/sql/test_tokenizer_json.py)
CATEGORY_8 = {0x1885: "Lo", 0x1886: "Lo", 0xA9BD: "Mc", 0x111C9: "Po"}


def assigned_in_8(version="8.0"):
    """The code points assigned in Unicode 8.0 (or version) or before, as a
    sorted inversion list (perl's Unicode::UCD: Python's unicodedata has no
    age)."""
    import os
    import subprocess
    # perl is not ours: without the sanitizers the test suite may preload
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS")}
    out = subprocess.run(["perl", "-MUnicode::UCD=prop_invlist", "-e",
                          'print join(",", prop_invlist("In=%s"))' % version],
                         capture_output=True, text=True, check=True, env=env).stdout
    return [int(x) for x in out.split(",")]


def flags(cp, cat=None):
    ch = chr(cp)
    cat = cat or unicodedata.category(ch)
    f = 0
    if cat.startswith("C") and ch not in "\t\n\r":
        f |= 1
    if ch in " \t\n\r" or cat == "Zs":
        f |= 2
    if ch.isspace():
        f |= 4
    if (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
            or cat.startswith("P")):
        f |= 8
    if cat == "Mn":
        f |= 16
    # what follows a character in its grapheme cluster (UAX #29's Extend,
    # SpacingMark and ZWJ), as near as unicodedata gives it: the marks, the
    # joiners, the halfwidth sound marks, the emoji modifiers and the tags
    if (cat[0] == "M" or cp in (0x200C, 0x200D) or 0xFF9E <= cp <= 0xFF9F
            or 0x1F3FB <= cp <= 0x1F3FF or 0xE0020 <= cp <= 0xE007F):
        f |= 128
    # Cased and Case_Ignorable, as str.lower() sees them when it picks the
    # final sigma (read off its answers: unicodedata has no such property)
    if cp != 0x3A3 and not 0xD800 <= cp < 0xE000:
        if ("\u0391" + ch + "\u03a3").lower()[-1] == "\u03c2" and \
                ("\u0391\u03a3" + ch).lower()[1] == "\u03c2":
            f |= 64
        elif (ch + "\u03a3").lower()[-1] == "\u03c2":
            f |= 32
    elif cp == 0x3A3:
        f |= 32
    return f


def flags8(cp, in8):
    """flags() with the Unicode 8.0 category: Cn when assigned later. The
    library's control (is_other) leaves Cn out; its whitespace is Rust's
    char::is_whitespace (\\t \\n \\r and White_Space, which str.isspace
    gives here), before the pre-tokenizer's split on it."""
    import bisect
    ch = chr(cp)
    if cp in CATEGORY_8:
        cat = CATEGORY_8[cp]
    elif bisect.bisect_right(in8, cp) % 2:
        cat = unicodedata.category(ch)
    else:
        cat = "Cn"
    f = flags(cp, "Zz" if cat == "Cn" else cat)  # Cn: not control there
    f &= ~(2 | 128)
    if ch in " \t\n\r" or ch.isspace():
        f |= 2
    return f


def ranges(fn=flags):
    out, start, cur = [], 0, fn(0)
    for cp in range(1, MAX):
        f = fn(cp)
        if f != cur:
            out.append((start, cur))
            start, cur = cp, f
    out.append((start, cur))
    return out


def mapping(fn):
    rows, pool = [], []
    for cp in range(MAX):
        if 0xD800 <= cp < 0xE000 or 0xAC00 <= cp < 0xAC00 + 11172:
            continue  # surrogates; Hangul syllables (decomposed by rule)
        s = fn(chr(cp))
        if s != chr(cp):
            rows.append((cp, len(pool), len(s)))
            pool.extend(ord(c) for c in s)
    return rows, pool


def compositions():
    """(a, b, c) for each primary composite c: a canonical decomposition
    into two code points that NFC composes back (composition exclusions
    and singletons are not)."""
    out = []
    for cp in range(MAX):
        if 0xD800 <= cp < 0xE000 or 0xAC00 <= cp < 0xAC00 + 11172:
            continue
        d = unicodedata.decomposition(chr(cp))
        if not d or d.startswith("<"):
            continue
        parts = [int(x, 16) for x in d.split()]
        if len(parts) == 2 and unicodedata.normalize("NFC", chr(parts[0]) + chr(parts[1])) == chr(cp):
            out.append((parts[0], parts[1], cp))
    return sorted(out)


def main(path):
    r = ranges()
    # Hangul syllables decompose by rule (Unicode 3.12), as unicode.c does
    for cp in range(0xAC00, 0xAC00 + 11172):
        s = cp - 0xAC00
        want = [0x1100 + s // 588, 0x1161 + (s % 588) // 28]
        if s % 28:
            want.append(0x11A7 + s % 28)
        assert [ord(c) for c in unicodedata.normalize("NFD", chr(cp))] == want
        assert chr(cp).lower() == chr(cp)
    lo, lo_pool = mapping(str.lower)
    nfd, nfd_pool = mapping(lambda c: unicodedata.normalize("NFD", c))
    nfkd, nfkd_pool = mapping(lambda c: unicodedata.normalize("NFKD", c))
    ccc = ranges(lambda cp: unicodedata.combining(chr(cp)))
    w = []
    w.append("/*\n** unicode_data.c: generated by src/unicode_gen.py from Python's "
             "unicodedata\n** (Unicode %s). Do not edit: run the script.\n*/\n"
             % unicodedata.unidata_version)
    w.append('#include "unicode.h"\n\n')
    w.append("const char relattn_unicode_version[] = \"%s\";\n\n"
             % unicodedata.unidata_version)
    w.append("const relattn_uflag_range relattn_uflags[] = {\n")
    for start, f in r:
        w.append("    {0x%X, %d},\n" % (start, f))
    w.append("};\nconst int relattn_n_uflags = %d;\n\n" % len(r))
    in8 = assigned_in_8()
    r8 = ranges(lambda cp: flags8(cp, in8))
    w.append("/* as Hugging Face's tokenizers library sees them (Unicode 8.0) */\n")
    w.append("const relattn_uflag_range relattn_uflags8[] = {\n")
    for start, f in r8:
        w.append("    {0x%X, %d},\n" % (start, f))
    w.append("};\nconst int relattn_n_uflags8 = %d;\n\n" % len(r8))
    in11 = assigned_in_8("11.0")
    r11 = ranges(lambda cp: bisect.bisect_right(in11, cp) % 2)
    w.append("/* assigned by Unicode 11.0 */\n")
    w.append("const relattn_uflag_range relattn_uin11[] = {\n")
    for start, f in r11:
        w.append("    {0x%X, %d},\n" % (start, f))
    w.append("};\nconst int relattn_n_uin11 = %d;\n\n" % len(r11))
    w.append("/* canonical combining classes */\n")
    w.append("const relattn_uflag_range relattn_uccc_ranges[] = {\n")
    for start, f in ccc:
        w.append("    {0x%X, %d},\n" % (start, f))
    w.append("};\nconst int relattn_n_uccc = %d;\n\n" % len(ccc))
    comp = compositions()
    w.append("/* canonical compositions: a, b, composite (sorted by a, b) */\n")
    w.append("const uint32_t relattn_ucompose_pairs[][3] = {\n")
    for a, b, c in comp:
        w.append("    {0x%X, 0x%X, 0x%X},\n" % (a, b, c))
    w.append("};\nconst int relattn_n_ucompose = %d;\n\n" % len(comp))
    for name, rows, pool in (("lower", lo, lo_pool), ("nfd", nfd, nfd_pool),
                             ("nfkd", nfkd, nfkd_pool)):
        w.append("const relattn_umap relattn_%s[] = {\n" % name)
        for cp, off, n in rows:
            w.append("    {0x%X, %d, %d},\n" % (cp, off, n))
        w.append("};\nconst int relattn_n_%s = %d;\n" % (name, len(rows)))
        w.append("const uint32_t relattn_%s_pool[] = {\n" % name)
        for i in range(0, len(pool), 10):
            w.append("    " + ", ".join("0x%X" % c for c in pool[i:i + 10]) + ",\n")
        w.append("};\n\n")
    text = "".join(w)
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "src/unicode_data.c")

"""A multilingual corpus built from text on this machine, for the tokenizer
tests: lines of man pages (every language installed), licences and package
documentation, then generated lines in several scripts (Latin with accents,
Cyrillic, Greek, CJK, Hangul, Arabic, emoji), lines with control characters,
and lines of invalid UTF-8 (bytes, stored as TEXT by the tests).

lines(n) returns n byte strings, deterministic for one machine; at least
`generated` of them are generated, so the scripts are there on a machine
without man pages.
"""
import glob
import gzip
import os
import random

SOURCES = ["/usr/share/man/*/man1/*.gz", "/usr/share/man/man1/*.gz",
           "/usr/share/common-licenses/*", "/usr/share/doc/*/copyright",
           "/usr/share/doc/*/README*"]

SCRIPTS = {
    "latin": "abcdefghijklmnopqrstuvwxyzàáâãäåæçèéêëìíîïñòóôõöøùúûüýÿœšžßĀāĂăĄąĆćČčĎďĐđĒēĘęĚěĞğİıŁłŃńŇňŐőŘřŚśŞşŠšŢţŤťŮůŰűŹźŻżŽž",
    "latin_upper": "ABCDEFGHIJKLMNOPQRSTUVWXYZÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜÝŒŠŽİ",
    "cyrillic": "абвгдеёжзийклмнопрстуфхцчшщъыьэюяАБВГДЕЁЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЫЬЭЮЯіїєґ",
    "greek": "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώϊϋΐΰςΑΒΓΔΕΖΗΘΙΚΛΜΝΞΟΠΡΣΤΥΦΧΨΩΆΈΉΊΌΎΏ",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领深",
    "hangul": "가나다라마바사아자차카타파하한국어대학교서울사람시간일년",
    "kana": "あいうえおかきくけこさしすせそたちつてとなにぬねのはひふへほまみむめもやゆよらりるれろわをんアイウエオカキクケコサシスセソタチツテト",
    "arabic": "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "emoji": "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩😘🎉🎈👍👎👋🙏💡🔥🌍🚀⭐❤️✨🇫🇷🇯🇵👨‍👩‍👧",
    "symbols": "—–―‘’“”„•…‰′″‹›«»€£¥©®™°±×÷¼½¾¹²³µ¶§¦¬ªº¿¡ﬁﬂ①②③ⅠⅡⅢ",
}
CONTROL = "\x00\x01\x07\x08\x0b\x0c\x1b\x7f\x85\u200b\u200d\u2028\u2029\ufeff\u00a0\u3000\t\r"


def machine_lines(limit):
    """Lines of text files on this machine, in a fixed order."""
    out = []
    for pattern in SOURCES:
        for path in sorted(glob.glob(pattern)):
            try:
                if path.endswith(".gz"):
                    with gzip.open(path, "rb") as f:
                        data = f.read(20000)
                else:
                    if os.path.getsize(path) > 200000:
                        continue
                    with open(path, "rb") as f:
                        data = f.read(20000)
            except (OSError, EOFError):
                continue
            for line in data.split(b"\n")[:40]:
                line = line.strip(b"\r")
                if line.strip():
                    out.append(line)
            if len(out) >= limit:
                return out[:limit]
    return out


def generated_lines(n, seed=7):
    rng = random.Random(seed)
    names = sorted(SCRIPTS)
    out = []
    for i in range(n):
        words = []
        for _ in range(rng.randint(1, 12)):
            s = SCRIPTS[rng.choice(names)]
            w = "".join(rng.choice(s) for _ in range(rng.randint(1, 9)))
            if rng.random() < 0.1:
                w += rng.choice(",.;:!?()[]\"'-")
            if rng.random() < 0.05:
                w = w[:1] + rng.choice(CONTROL) + w[1:]
            if rng.random() < 0.02:
                w = w * 30  # long words ([UNK] past 100 characters)
            if rng.random() < 0.01:
                # BERT's special tokens written in the text
                w += rng.choice(["[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]",
                                 "[cls]", "[MASK", " [SEP] "])
            words.append(w)
        sep = rng.choice([" ", " ", " ", "  ", "\t", " \u00a0", "\u3000"])
        line = sep.join(words)
        if rng.random() < 0.05:
            line = "  " + line + "   "
        data = line.encode("utf-8")
        if i % 50 == 0:
            # invalid UTF-8: a lone continuation byte, a cut sequence, an
            # overlong form, a surrogate, a byte never used
            bad = rng.choice([b"\x80", b"\xc3", b"\xe2\x82", b"\xc0\xaf",
                              b"\xed\xa0\x80", b"\xff", b"\xf8\x88\x80\x80\x80"])
            k = rng.randint(0, len(data))
            while k < len(data) and (data[k] & 0xC0) == 0x80:
                k += 1
            data = data[:k] + bad + data[k:]
        out.append(data)
    return out


def lines(n=10000, generated=3000):
    m = machine_lines(n - generated)
    return m + generated_lines(n - len(m))


if __name__ == "__main__":
    ls = lines()
    print(len(ls), sum(len(x) for x in ls), "bytes")

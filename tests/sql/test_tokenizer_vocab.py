"""A Hugging Face BERT checkpoint imported with its vocab.txt gives the
ids its users get: AutoTokenizer returns the fast tokenizer, which runs
the tokenizer.json transformers' BertConverter builds from that vocab.txt
and tokenizer_config.json in Hugging Face's Rust `tokenizers` library
(the npm package `tokenizers` of tests/node is the reference, as in
test_tokenizer_json.py). The import stores tokenizer.rules "tokenizers";
on the corpus and hostile strings of test_tokenizer_json.py the ids equal
the library's, and the lines where BertTokenizer's Python rules would
differ show it (the rules key set back to "transformers")."""
import json

import pytest

import test_tokenizer_json as tj
from conftest import connect  # noqa: E402

checkpoints, corpus = tj.checkpoints, tj.corpus


@pytest.mark.parametrize("case", tj.CASES)
def test_vocab_txt_ids_equal_the_librarys(tmp_path, rng, case):
    reason = tj.node_ready()
    if reason:
        pytest.skip(reason)
    lines = corpus.lines(1500, generated=500)
    extra = tj.HOSTILE + tj.category_lines()
    texts = [b.decode("utf-8", "replace") for b in lines] + extra
    raw = lines + [t.encode("utf-8") for t in extra]
    vocab = tj.corpus_vocab(texts)
    opts = tj.CASES[case]
    ck = checkpoints.bert(tmp_path / "bert", rng, "BertModel", "relative_key", vocab=vocab)
    tok_config = {"do_lower_case": opts["lower"], "strip_accents": opts["strip"],
                  "tokenize_chinese_chars": opts["chinese"]}
    db = connect()
    assert db.execute("SELECT relattn_import('m', ?, ?, ?, ?)",
                      (tj.weights(ck), json.dumps(ck.config), vocab,
                       json.dumps(tok_config))).fetchone()[0] > 0
    cfg = json.loads(db.execute("SELECT config FROM relattn_model").fetchone()[0])
    tok = cfg["tokenizer"]
    assert (tok["type"], tok["rules"], tok["do_lower_case"]) == (
        "wordpiece", "tokenizers", opts["lower"])
    doc = checkpoints.bert_tokenizer_json(vocab, **opts)
    want = tj.library_ids(tmp_path, doc, texts)

    def ids(b):
        got = json.loads(db.execute(
            "SELECT relattn_tokens_json(relattn_tokenize('m', CAST(? AS TEXT)))",
            (b,)).fetchone()[0])
        return [tok["bos"]] + got + [tok["append"]]
    differ = [t for t, b, w in zip(texts, raw, want) if ids(b) != w]
    assert differ == [], differ[:5]

    # the Python rules part from the library's on some of these lines, so
    # the comparison above sees which rules ran
    cfg["tokenizer"]["rules"] = "transformers"
    db.execute("UPDATE relattn_model SET config = ?", (json.dumps(cfg),))
    slow = [t for t, b, w in zip(texts, raw, want) if ids(b) != w]
    print(f"{case}: 0 of {len(texts)} lines differ; {len(slow)} would under "
          "BertTokenizer's rules")
    assert slow
    db.close()

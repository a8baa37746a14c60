"""Sharded checkpoints: model.safetensors.index.json as safetensors_blob and
the shards after tokenizer_config_json (docs/reference.md, relattn_import).
A checkpoint split as save_pretrained splits it (checkpoints.shards)
imports to the same tensors, byte for byte, as the file it was split from:
the same sha256 and the same outputs, whatever the order of the shards. A
missing shard or tensor, a tensor outside the index, one in two shards and
the wrong arguments are refused by name, and nothing is stored."""
import json
import os
import sqlite3
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import checkpoints  # noqa: E402
import safetensors_py  # noqa: E402

CASES = {
    "bert": lambda root, rng: checkpoints.bert(root, rng, "BertForSequenceClassification"),
    "deberta": lambda root, rng: checkpoints.deberta(root, rng, "DebertaV2ForMaskedLM"),
    # T5's bias table is rewritten (transposed) on import: data of a shard
    "t5": lambda root, rng: checkpoints.t5(root, rng, "T5ForConditionalGeneration",
                                           ffn="gated-gelu"),
}


def import_files(db, name, ck, weights, shard_blobs=()):
    return db.execute(
        "SELECT relattn_import(?, ?, ?, ?, ?%s)" % (", ?" * len(shard_blobs)),
        (name, weights, ck.path("config").read_text(), ck.read("tokenizer"),
         ck.path("tokenizer_config").read_text(), *shard_blobs)).fetchone()[0]


def refused(db, ck, message, weights, shard_blobs=()):
    with pytest.raises(sqlite3.OperationalError) as e:
        import_files(db, "m", ck, weights, shard_blobs)
    assert str(e.value) == message
    assert db.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                      "'relattn_model'").fetchone()[0] == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_three_shards_import_as_the_whole_file(db, rng, tmp_path, case):
    ck = CASES[case](tmp_path, rng)
    whole = ck.read("weights")
    index, parts, _ = checkpoints.shards(whole, 3)
    n = import_files(db, "one", ck, whole)
    assert import_files(db, "three", ck, index, parts) == n
    # in any order: each shard says what it holds
    assert import_files(db, "three_rev", ck, index.encode(), parts[::-1]) == n
    sha = db.execute("SELECT name, sha256 FROM relattn_model ORDER BY name").fetchall()
    assert [s for _, s in sha] == [sha[0][1]] * 3 and sha[0][1] is not None
    text = checkpoints.sample_text(rng, 12)
    got = [db.execute("SELECT relattn_embed(?, ?)", (m, text)).fetchone()[0]
           for m in ("one", "three", "three_rev")]
    assert got[0] == got[1] == got[2]


@pytest.fixture
def bert(tmp_path, rng):
    return CASES["bert"](tmp_path, rng)


def first_of(index, shard_file):
    """The first tensor of weight_map (its written order) in that file."""
    return next(k for k, v in json.loads(index)["weight_map"].items() if v == shard_file)


def test_missing_shard_or_tensor(db, bert):
    index, parts, where = checkpoints.shards(bert.read("weights"), 3)
    f2 = "model-00002-of-00003.safetensors"
    refused(db, bert, f"relattn_import: shard '{f2}' of the index is missing "
            f"(it holds tensor '{first_of(index, f2)}')", index, [parts[0], parts[2]])
    # a shard without one of its tensors
    tensors, meta = safetensors_py.read(parts[1])
    gone = sorted(tensors)[-1]
    del tensors[gone]
    refused(db, bert, f"relattn_import: tensor '{gone}' is missing: the index puts "
            f"it in '{f2}', whose shard lacks it",
            index, [parts[0], safetensors_py.write(tensors, meta), parts[2]])
    # a tensor of a shard the index does not list
    idx = json.loads(index)
    name = sorted(n for n, k in where.items() if k == 3)[0]
    del idx["weight_map"][name]
    refused(db, bert, f"relattn_import: tensor '{name}' of shard 3 is not in the "
            "index's weight_map", json.dumps(idx), parts)
    # one shard given twice
    refused(db, bert, f"relattn_import: tensor '{first_of(index, f2)}' is in "
            "shards 2 and 3", index, [parts[0], parts[1], parts[1], parts[2]])


def test_shard_argument_refusals(db, bert):
    whole = bert.read("weights")
    index, parts, _ = checkpoints.shards(whole, 3)
    refused(db, bert, "relattn_import: safetensors_blob is a safetensors index; "
            "pass its shards' files after tokenizer_config_json", index)
    refused(db, bert, "relattn_import: shards (argument 6 and on) go with a "
            "safetensors index as safetensors_blob", whole, parts)
    refused(db, bert, "relattn_import: shard 2 (argument 7) is NULL (file not "
            "found?)", index, [parts[0], None, parts[2]])
    refused(db, bert, "relattn_import: shard 3 (argument 8) must be a BLOB",
            index, [parts[0], parts[1], "text"])
    refused(db, bert, "relattn_import: shard 1 has 3 bytes, too short for a "
            "safetensors file (an 8-byte header length comes first)",
            index, [b"abc", parts[1], parts[2]])
    refused(db, bert, "relattn_import: the safetensors index is not valid JSON",
            "{not json", parts)
    refused(db, bert, "relattn_import: the safetensors index has no weight_map "
            "object", '{"metadata": {}}', parts)
    refused(db, bert, "relattn_import: the safetensors index's weight_map gives "
            "tensor 'x' no file name", '{"weight_map": {"x": 1}}', parts)
    with pytest.raises(sqlite3.OperationalError) as e:
        db.execute("SELECT relattn_import('m')")
    assert str(e.value) == ("relattn_import: takes model, safetensors_blob, then "
                            "optionally config_json, tokenizer_blob, "
                            "tokenizer_config_json, and a safetensors index's shards "
                            "or a sentence-transformers directory's (name, file) pairs")


def test_native_model_in_shards(db, rng):
    """A native checkpoint (its config in __metadata__) split the same way:
    the config is read from the shard that has it."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "sql"))
    import reference_model as ref
    cfg = ref.random_config(rng, arch="encoder")
    params = ref.random_params(rng, cfg)
    tensors = {k: np.asarray(v, np.float32) for k, v in params.items()}
    whole = safetensors_py.write(tensors, metadata={"relattn.config": json.dumps(cfg)})
    db.execute("SELECT relattn_import('one', ?)", (whole,))
    index, parts, _ = checkpoints.shards(whole, 3)
    parts[0] = safetensors_py.write(safetensors_py.read(parts[0])[0],
                                    metadata={"relattn.config": json.dumps(cfg)})
    db.execute("SELECT relattn_import('three', ?, NULL, NULL, NULL, ?, ?, ?)",
               (index, *parts))
    a, b = (r[0] for r in db.execute("SELECT sha256 FROM relattn_model ORDER BY name"))
    assert a == b and a is not None

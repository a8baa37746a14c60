"""`make model` reproduces the bundled model as its card says: the settings
models/train.py runs with by default (make model passes none) are the ones
the bundled run recorded in models/tiny.train.json, and the card quotes its
step count. Read from the sources, without running PyTorch."""
import ast
import json
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def train_defaults():
    tree = ast.parse((ROOT / "models" / "train.py").read_text())
    out = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
                and node.args and isinstance(node.args[0], ast.Constant)):
            for kw in node.keywords:
                if kw.arg == "default":
                    out[node.args[0].value.lstrip("-").replace("-", "_")] = ast.literal_eval(kw.value)
    return out


def test_make_model_runs_the_recorded_settings():
    run = json.loads((ROOT / "models" / "tiny.train.json").read_text())
    d = train_defaults()
    for key in ("steps", "seq_len", "batch_tokens", "lr", "warmup", "threads"):
        assert d[key] == run[key], key
    assert [h["step"] for h in run["history"]] == list(range(d["eval_every"], d["steps"] + 1, d["eval_every"]))
    r = subprocess.run(["make", "-n", "-o", "deps-model", "model"], cwd=ROOT, capture_output=True, text=True)
    cmd = [l for l in r.stdout.splitlines() if "models/train.py" in l]
    assert len(cmd) == 1 and cmd[0].split()[-1] == "models/train.py", r.stdout  # no overrides


def test_the_card_quotes_the_run():
    card = (ROOT / "models" / "README.md").read_text()
    run = json.loads((ROOT / "models" / "tiny.train.json").read_text())
    steps = re.search(r"^\| steps \| ([\d,]+):", card, re.M).group(1)
    assert int(steps.replace(",", "")) == run["steps"] == train_defaults()["steps"]
    assert f"{run['train_minutes']} minutes" in card

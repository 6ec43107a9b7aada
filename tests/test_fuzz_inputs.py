"""Property-based fuzz of the two readers a user's files reach most: the ARPA reader and the run.json
loader. Whatever the bytes, they either give a model that is a model (finite, log10 p <= 0, no
probability above 1) or raise NnlmError -- never another exception."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.ngram.arpa import MAX_BACKOFF, MIN_LOG10, read_arpa

GOOD = """\\data\\
ngram 1=5
ngram 2=3

\\1-grams:
-0.5\t<unk>\t-0.1
-0.6\ta\t-0.2
-0.7\tb\t-0.3
-99\t<s>\t0
-99\t</s>

\\2-grams:
-0.2\ta b
-0.3\tb a
-0.4\t<s> a

\\end\\
"""
VOCAB = Vocabulary(("<unk>", "a", "b"))
ODD_TOKENS = ["nan", "-nan", "inf", "-inf", "-1e999", "-1e308", "1e308", "0", "-0", "1", "100", "-100", "١", "٠.٥",
              "1_0", "0x1", "", "-", ".", "e5", "-.5", "+-1", "\\data\\", "\\end\\", "\\2-grams:", "ngram 1=3",
              "a", "b", "<s>", "zebra", "\x00", "\ufeff", "\t", "-0.3\ta b"]
PIECE = st.one_of(st.sampled_from(ODD_TOKENS), st.text(max_size=6), st.floats().map(repr))


@st.composite
def damaged_arpa(draw) -> bytes:
    """GOOD with a few fields replaced, lines dropped or duplicated, and maybe a cut or raw bytes."""
    lines = [line.split("\t") for line in GOOD.split("\n")]
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["field", "drop", "dup", "insert"]))
        if action == "field":
            lines[i][draw(st.integers(0, len(lines[i]) - 1))] = draw(PIECE)
        elif action == "drop":
            del lines[i]
        elif action == "dup":
            lines.insert(i, list(lines[i]))
        else:
            lines.insert(i, [draw(PIECE) for _ in range(draw(st.integers(1, 3)))])
        if not lines:
            lines = [[""]]
    data = "\n".join("\t".join(parts) for parts in lines).encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    if draw(st.integers(0, 9)) == 0:
        data += draw(st.binary(max_size=20))
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=damaged_arpa(), with_vocab=st.booleans())
def test_arpa_reader_gives_a_model_or_one_line(tmp_path, data, with_vocab):
    path = tmp_path / "m.arpa"
    path.write_bytes(data)
    try:
        model = read_arpa(path, VOCAB if with_vocab else None)
    except NnlmError as exc:
        assert "\n" not in str(exc)
        return
    for probs, backoffs in zip(model.tables.log10_prob, model.tables.log10_backoff, strict=True):
        assert np.all((probs >= MIN_LOG10) & (probs <= 0.0))
        assert np.all(np.abs(backoffs) <= MAX_BACKOFF)
    assert float(np.sum(10.0 ** model.tables.log10_prob[0])) <= 1.0 + 1e-3
    k = model.context_size
    contexts = np.zeros((len(model.vocab), k), dtype=np.int64) + np.arange(len(model.vocab))[:, None]
    dist = model.distribution(contexts)
    assert np.all(np.isfinite(dist)) and float(dist.max()) <= 1.0 + 1e-3


# ---- run.json -------------------------------------------------------------------------------

FIELDS = ["format", "corpus", "min_count", "max_vocab", "vocab_from", "preset", "recipe", "batch_size", "seed",
          "patience", "model", "vocab_fingerprint", "pad_token", "order", "hidden", "features", "direct", "lr", "bf16",
          "loss", "samples", "corpus_name", "some_future_field"]
VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=6)
MODEL_KEYS = ["vocab_size", "order", "hidden", "features", "direct"]


@pytest.fixture(scope="module")
def run_template(neural_run):
    return json.loads((neural_run[0] / "run.json").read_text())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.dictionaries(st.sampled_from(FIELDS), VALUE, min_size=1, max_size=3),
       model_edits=st.dictionaries(st.sampled_from(MODEL_KEYS), VALUE, max_size=2),
       drop=st.lists(st.sampled_from(FIELDS), max_size=2))
def test_run_json_loader_accepts_a_valid_config_or_says_which_field(tmp_path, neural_run, run_template, edits,
                                                                    model_edits, drop):
    from nnlm.neural.run.checkpoint import read_run

    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    shutil.copy(neural_run[0] / "vocab.json", run_dir / "vocab.json")
    data = json.loads(json.dumps(run_template)) | edits
    if isinstance(data.get("model"), dict):
        data["model"] |= model_edits
    for key in drop:
        data.pop(key, None)
    (run_dir / "run.json").write_text(json.dumps(data))
    try:
        run, vocab, config = read_run(run_dir)
    except NnlmError as exc:
        assert "\n" not in str(exc)
        return
    assert config.vocab_size == len(vocab) and config.order >= 2 and config.features >= 1 and config.hidden >= 0
    assert isinstance(run["batch_size"], int) and run["batch_size"] >= 1
    assert run["min_count"] is None or (isinstance(run["min_count"], int) and run["min_count"] >= 1)

"""`nnlm reproduce` end to end on a small synthetic corpus, and its bad-input paths."""
import json

import pytest

from nnlm.errors import NnlmError
from nnlm.reproduce import NGRAM_ROWS, parse_models, reproduce


def test_parse_models():
    assert parse_models(None, full=False) == ["mlp1", "mlp3"]
    assert parse_models(None, full=True) == ["mlp1", "mlp3", "mlp5", "mlp7", "mlp9"]
    assert parse_models("mlp2, mlp1,MLP8", full=False) == ["mlp1", "mlp7"]  # a mix row asks for its net
    for bad in ("mlp11", "gpt2", ","):
        with pytest.raises(NnlmError):
            parse_models(bad, full=False)


def test_reproduce_small_corpus_then_resume(random_corpus, tmp_path):
    corpus_dir = str(tmp_path / "rand")
    out = tmp_path / "report"
    logs: list[str] = []
    readme = reproduce(corpus_dir, out, 0.3, "mlp7", False, "nnlm reproduce (test)", log=logs.append,
                       progress=False, threads=1)
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert {r.id for r in NGRAM_ROWS} <= set(rows)
    assert {"mlp7", "mlp8", "mlp7-em"} <= set(rows)
    assert rows["class500-3"]["note"].startswith("skipped")  # 500 classes > |V| of this corpus
    for row_id in ("interpolated", "kn5", "mlp7", "mlp8", "mlp7-em"):
        assert all(p > 1 for p in rows[row_id]["perplexity"].values() if p is not None)
    # EM weights fit on valid cannot do worse there than the fixed 0.5
    assert rows["mlp7-em"]["perplexity"]["valid"] <= rows["mlp8"]["perplexity"]["valid"] + 1e-9
    text = readme.read_text()
    assert "| MLP7 | 3 | 50 | 30 | yes |" in text and "deleted interpolation trigram" in text
    assert (out / "curves.png").stat().st_size > 0 and (out / "perplexities.png").stat().st_size > 0
    assert any("budget left" in line for line in logs)

    # a second call skips the n-gram rows it has (the interpolated trigram is rebuilt: it is the mixing partner)
    logs.clear()
    reproduce(corpus_dir, out, 0.2, "mlp7", False, "nnlm reproduce (test)", log=logs.append, progress=False,
              threads=1)
    assert not any(line.strip().startswith("valid") and "kn" in line for line in logs)
    again = json.loads((out / "results.json").read_text())["rows"]
    assert again["kn5"] == rows["kn5"]


def test_out_holding_other_files_is_refused(random_corpus, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(NnlmError, match="not an nnlm reproduction"):
        reproduce(str(tmp_path / "rand"), out, 0.1, "mlp7", False, "x", log=lambda s: None, progress=False)


def test_bad_budget(random_corpus, tmp_path):
    with pytest.raises(NnlmError, match="budget"):
        reproduce(str(tmp_path / "rand"), tmp_path / "r", -1, None, False, "x", log=lambda s: None)

"""The LSTM reference as a row of `nnlm reproduce --beyond` (nnlm.reproduce.beyond_reference), on the small
synthetic corpus with a small recipe: it is planned and trained in the section, shown in its table and plot with its
ratio to KN5 but never as the best single net, kept by a second call, continued when the budget cut it, left out
on request; bad values of its option are refused in one line."""
import json

import pytest
from helpers import assert_one_line_error, run_nnlm

from nnlm.errors import NnlmError
from nnlm.reproduce import ReproduceRequest, reproduce
from nnlm.reproduce.beyond_rows import LSTM_REFERENCE, MixRow, NetRow, check_rows, with_reference
from nnlm.reproduce.lstm_reference import LstmRecipe

SMALL = LstmRecipe(size=16, layers=1, dropout=0.0, batch=4, bptt=10, lr=5.0, epochs=2)
ROWS = (NetRow("mlp7-seed0", "MLP7, seed 0", "mlp7", twin="mlp7"),
        MixRow("ngrams", "KN3 + KN5, EM", ("kn3", "kn5"), "em"))
KEY = "beyond:lstm-reference"


@pytest.fixture
def section(random_corpus, tmp_path, monkeypatch):
    """A call of the section with ROWS and the reference (its recipe SMALL): call(place, minutes, recipe) ->
    (results.json's rows, the log)."""
    import nnlm.reproduce.beyond as beyond
    import nnlm.reproduce.beyond_reference as reference

    monkeypatch.setattr(beyond, "BEYOND_ROWS", ROWS)
    out = tmp_path / "report"

    def call(place: str = "first", minutes: float = 0.2, recipe: LstmRecipe = SMALL) -> tuple[dict, list[str]]:
        monkeypatch.setattr(reference, "RECIPE", recipe)
        logs: list[str] = []
        reproduce(ReproduceRequest(str(tmp_path / "rand"), out, 0.2, "mlp7", False, "x", progress=False, threads=1,
                                   beyond=True, beyond_minutes=minutes, beyond_reference=place), log=logs.append)
        return json.loads((out / "results.json").read_text())["rows"], logs

    call.out = out
    return call


def test_reference_row_in_the_report_then_kept_then_left_out(section):
    rows, _ = section("first")
    ref = rows[KEY]
    assert ref["status"] == "done" and ref["epochs"] == 2 and ref["finished"], ref.get("note")
    assert ref["reference"] == "lstm" and ref["plan"]["status"] == "full" and ref["options"]["recipe"]["size"] == 16
    kn5 = rows["kn5"]["perplexity"]["test"]
    text = (section.out / "README.md").read_text()
    ratio = f"{ref['perplexity']['test'] / kn5:.3f}"
    line = next(x for x in text.splitlines() if x.startswith("| lstm-reference |"))
    assert f"| {ref['perplexity']['test']:,.1f} | {ratio} |" in line and "benchmarks/lstm_reference.py" in line
    assert "**The LSTM reference**" in text and f"= **{ratio} x KN5**" in text
    assert "planned first, before the nets" in text
    assert "Best single net by validation: mlp7-seed0" in text  # the reference is never counted as a net
    assert (section.out / "beyond.png").stat().st_size > 0 and "(beyond.png)" in text

    again, logs = section("first")  # done: kept, not trained again
    assert any(x.startswith("[beyond 1/3] LSTM reference") and x.endswith("done already") for x in logs)
    assert again[KEY] == ref

    left_out, logs = section("none")  # left out: not planned, not in the report (results.json keeps it)
    assert not any("LSTM reference" in x for x in logs) and left_out[KEY] == ref
    assert "lstm-reference" not in (section.out / "README.md").read_text()


def test_the_reference_beside_the_nets_has_the_sections_budget(section):
    """`beside`: a second process trains it for the section's budget while the nets train; the parent puts its
    row; the report says how it was budgeted."""
    rows, logs = section("beside", 0.3)
    ref = rows[KEY]
    assert ref["status"] == "done" and ref["epochs"] == 2 and ref["plan"]["beside"], ref.get("note")
    assert 0 < ref["plan"]["work_minutes"] <= 0.3 and rows["beyond:mlp7-seed0"]["perplexity"]["test"] > 0
    assert any("beside the nets, in a process of its own" in x for x in logs)
    assert sum("valid" in x and x.endswith("[lstm-reference]") for x in logs) == 2  # its two validations
    assert "it trained beside them, in a process of its own" in (section.out / "README.md").read_text()
    _, logs = section("beside", 0.3)
    assert any(x.startswith("[beyond 1/3] LSTM reference") and x.endswith("done already") for x in logs)


def test_a_cut_reference_is_continued(section):
    """Wanting more epochs than the budget holds, the row is shortened; the next call continues its run."""
    from dataclasses import replace

    endless = replace(SMALL, epochs=100_000)
    first, _ = section("last", 0.05, endless)
    cut = first[KEY]
    assert cut["status"] == "shortened" and cut["plan"]["status"] == "shortened" and cut["epochs"] >= 2, cut["note"]
    second, logs = section("last", 0.05, endless)
    assert any(f"continuing its run in {cut['run'].split('/')[-1]} from {cut['epochs']:.2f} epochs" in x for x in logs)
    assert second[KEY]["run"] == cut["run"] and second[KEY]["epochs"] > cut["epochs"]
    assert second[KEY]["seconds"] > cut["seconds"]  # its time counts both calls


def test_reference_places_and_checks(tmp_path):
    nets = (NetRow("a", "a", "mlp1"), NetRow("b", "b", "mlp1", seed=1))
    rows = (*nets, MixRow("m", "m", ("a", "b"), "equal"))
    assert with_reference(rows, "first") == (LSTM_REFERENCE, *rows)
    assert with_reference(rows, "last") == (*nets, LSTM_REFERENCE, rows[2])
    assert with_reference(with_reference(rows, "last"), "none") == rows
    with pytest.raises(NnlmError, match="a reference is not an nnlm net"):
        check_rows((*nets, LSTM_REFERENCE, MixRow("m", "m", ("a", "lstm-reference"), "em")))
    with pytest.raises(NnlmError, match="--beyond-reference must be one of beside, first, last, none"):
        ReproduceRequest("brown", tmp_path / "r", beyond=True, beyond_reference="middle")
    proc = run_nnlm("reproduce", "--beyond", "--beyond-reference", "middle", "--out", tmp_path / "r2")
    assert_one_line_error(proc, "--beyond-reference")
    assert not (tmp_path / "r2").exists()

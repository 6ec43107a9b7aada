"""`nnlm reproduce --table apnews`: Table 2's rows end to end on a tiny corpus, resumed by a second call."""
import json
import re
from pathlib import Path

import pytest

from nnlm.cli import main
from nnlm.errors import NnlmError
from nnlm.reproduce.tables import get_table

TABLE2_ROWS = {"interpolated", "kn3", "kn4", "kn5", "apnews", "apnews-mix", "apnews-em", "apnews-kn5-em"}


def test_table2_rows_carry_the_papers_figures():
    paper = get_table("apnews")
    rows = {row.id: row for row in paper.rows(paper.parse_nets(None, False))}
    assert set(rows) == TABLE2_ROWS
    assert rows["apnews-mix"].paper[1:] == (104, 109) and rows["kn5"].paper[1:] == (112, 117)
    assert rows["interpolated"].paper[1:] == (126, 132) and rows["kn3"].paper[1:] == (121, 127)
    assert (rows["apnews"].n, rows["apnews"].h, rows["apnews"].m, rows["apnews"].direct) == (6, 60, 100, True)
    assert paper.best_ngram_test == 117


def test_table_and_models_are_checked():
    with pytest.raises(NnlmError, match="unknown table"):
        get_table("wsj")
    with pytest.raises(NnlmError, match="trains one net"):
        get_table("apnews").parse_nets("mlp1", False)


def test_table2_net_floor_is_a_tenth_of_an_epoch():
    """An AP-News-sized epoch is 17 Brown epochs: Table 2's net earns a row from 0.1 epoch, Table 1's from 0.5."""
    from nnlm.reproduce.planner import Rates, net_need

    rates, sizes = Rates(train=10_000.0, score=1_000.0), (14_000_000, 50_000, 50_000)
    brown, apnews = (net_need("apnews", rates, *sizes, floor_epochs=get_table(t).net_floor_epochs)
                     for t in ("brown", "apnews"))
    valid = 1.15 * 50_000 / 1_000.0
    assert apnews.floor == pytest.approx(0.1 * 1.15 * 1_400.0 + valid)
    assert brown.floor == pytest.approx(0.5 * 1.15 * 1_400.0 + valid) and apnews.tiers[1:] == brown.tiers[1:]


def built_ngram_rows(log: str) -> list[str]:
    """An n-gram row's log line when it is built: "valid V  test T  (S s)"."""
    return [line for line in log.splitlines() if re.fullmatch(r"\s+valid \S+  test \S+  \(\d+\.\d s\)", line)]


def test_apnews_table_end_to_end_then_resume(random_corpus, tmp_path, capsys):
    corpus_dir = str(tmp_path / "rand")
    out = tmp_path / "ap"
    args = ["reproduce", "--table", "apnews", "--corpus", corpus_dir, "--out", str(out), "--budget-minutes", "0.3",
            "--threads", "1", "--no-progress"]
    assert main(args) == 0
    assert len(built_ngram_rows(capsys.readouterr().out)) == 4
    data = json.loads((out / "results.json").read_text())
    rows = data["rows"]
    assert set(rows) == TABLE2_ROWS and data["call"]["table"] == "apnews"
    for row_id in TABLE2_ROWS:
        assert all(p > 1 for p in rows[row_id]["perplexity"].values() if p is not None), row_id
    assert rows["apnews-em"]["perplexity"]["valid"] <= rows["apnews-mix"]["perplexity"]["valid"] + 1e-9
    # EM per bucket with KN5 (fitted on valid): no worse on valid than either of its two components alone
    kn5_em = rows["apnews-kn5-em"]["perplexity"]["valid"]
    assert kn5_em != rows["apnews-em"]["perplexity"]["valid"]  # mixed with KN5's scores, not the trigram's
    assert kn5_em <= min(rows["apnews"]["perplexity"]["valid"], rows["kn5"]["perplexity"]["valid"]) * (1 + 1e-3)
    assert data["call"]["vocabulary"] == {"size": data["corpus_info"]["vocab"], "min_count": 2, "max_vocab": None}
    assert json.loads((out / rows["apnews"]["run"] / "run.json").read_text())["loss"] == "sampled"
    text = (out / "README.md").read_text()
    assert text.startswith("# Table 2 of Bengio et al. (2003) (AP News), reproduced on rand")
    assert "paper: Kneser-Ney back-off n = 5, 117;" in text and "13,994,528" in text
    assert "| MLP + trigram, 0.5 | 6 | 60 | 100 | yes | 0.5 |  | 104 | 109 |" in text
    assert "class-based" not in text  # Table 2 has no class rows
    assert "| MLP + KN5, EM weights by context frequency | 6 | 60 | 100 | yes | EM |" in text
    assert f"Vocabulary (every row): |V| = {data['corpus_info']['vocab']:,} tokens" in text and "not capped" in text
    kn5_line = next(line for line in text.splitlines() if line.startswith("| Kneser-Ney back-off | 5 |"))
    assert "| 112 | 117 |" in kn5_line and "| 1.000 |" in kn5_line  # the paper's ratio: KN5 is its own best
    assert (out / "curves.png").stat().st_size > 0 and (out / "perplexities.png").stat().st_size > 0

    # a second call reuses every finished row: no n-gram row but the mixing partner is built again
    assert main(args) == 0
    log = capsys.readouterr().out
    assert "[4/8] Kneser-Ney back-off (n=5)" in log and not built_ngram_rows(log)
    again = json.loads((out / "results.json").read_text())["rows"]
    assert all(again[i] == rows[i] for i in ("kn3", "kn4", "kn5", "interpolated"))
    if rows["apnews"]["status"] == "done":  # a net that finished is not trained again
        assert again["apnews"] == rows["apnews"]
    else:  # a net the budget cut continues its own run
        assert again["apnews"]["run"] == rows["apnews"]["run"] and again["apnews"]["epochs"] >= rows["apnews"]["epochs"]


def test_a_net_planned_with_low_rates_is_continued_with_its_own(random_corpus, tmp_path, capsys, monkeypatch):
    """The rates measured on a slice can be far too low (one process where Hogwild workers train; the
    plain scoring path where the per-position tables score): the 14M-token run stopped at the 5 epochs
    they allowed with 34 of 60 minutes unused. A run that stops at the plan's epoch limit with budget
    left is planned again with the rates of its own epochs and continued."""
    from nnlm.reproduce import rates
    from nnlm.reproduce.planner import Rates

    slow = Rates(train=len(random_corpus.train) / 4.0, score=len(random_corpus.valid) / 0.5)  # an epoch "takes" 4.5 s
    monkeypatch.setattr(rates, "measure", lambda *a, **k: slow)
    out = tmp_path / "ap"
    assert main(["reproduce", "--table", "apnews", "--corpus", str(tmp_path / "rand"), "--out", str(out),
                 "--budget-minutes", "0.5", "--threads", "1", "--no-progress"]) == 0
    log = capsys.readouterr().out
    first = int(re.search(r"reached (\d+) epochs?", log).group(1))
    assert "planned again with the rates they measured" in log
    row = json.loads((out / "results.json").read_text())["rows"]["apnews"]
    assert row["epochs"] > first and row["plan"]["rates"]["train_tokens_per_s"] > 2 * slow.train
    assert row["plan"]["first"]["rates"]["train_tokens_per_s"] == round(slow.train)  # the first plan, kept
    assert "first" not in row["plan"]["first"]
    text = (out / "README.md").read_text()
    if row["status"] == "shortened":  # the plan did not cut it: it had the epochs a net is planned for
        assert "**Trained the ~10 epochs planned, not early-stopped**: MLP (AP News net)" in text
        assert "Shortened for lack of budget" not in text


def table_with_scoring_rates(tmp_path, monkeypatch, score_of, extra=("--max-vocab", "40")) -> Path:
    """Table 2 on the random corpus (a 0.3-minute budget) with the planner's rates injected, no timing:
    training at 50k examples/s, scoring at `score_of(shape)` tokens/s; the report's directory."""
    from nnlm.reproduce import rates
    from nnlm.reproduce.planner import Rates

    monkeypatch.setattr(rates, "measure", lambda net, corpus, device, threads, loss, samples, shape=None:
                        Rates(train=50_000.0, score=score_of(shape), path="plain"))
    out = tmp_path / "ap"
    assert main(["reproduce", "--table", "apnews", "--corpus", str(tmp_path / "rand"), "--out", str(out),
                 "--budget-minutes", "0.3", "--threads", "1", "--no-progress", *extra]) == 0
    return out


def test_a_net_that_cannot_fit_trains_with_the_class_output(random_corpus, tmp_path, monkeypatch, capsys):
    """Rates injected (no timing): only the class-factored output layer's exact scoring fits the budget, so
    that is the net the table trains (the full softmax's loss, frequency classes), and the report says so."""
    from nnlm.neural.net.model_config import ModelConfig
    from nnlm.neural.net.output_clustering import default_class_count
    from nnlm.reproduce.apnews import CLASS_OUTPUT

    out = table_with_scoring_rates(tmp_path, monkeypatch, lambda shape: 1e6 if shape == CLASS_OUTPUT else 1e-3)
    data = json.loads((out / "results.json").read_text())
    net = data["rows"]["apnews"]
    assert net["shape"] == CLASS_OUTPUT and net["options"]["shape"] == CLASS_OUTPUT
    run = json.loads((out / net["run"] / "run.json").read_text())
    k = default_class_count(40)
    assert (run["loss"], run["output_layer"], run["model"]["output_classes"], run["model"]["direct"]) == \
        ("full", "classes", k, True)
    assert "trained with the class-factored output layer (frequency classes" in net["note"]
    config = ModelConfig(vocab_size=40, order=6, hidden=60, features=100, direct=True, output_classes=k)
    assert net["parameters"] == config.parameter_count()
    assert "| MLP (AP News net) (class-factored output) | 6 | 60 | 100 | yes |" in (out / "README.md").read_text()


def test_a_net_that_fits_only_without_direct_connections_trains_so(random_corpus, tmp_path, monkeypatch, capsys):
    """Rates injected: only the net without direct connections fits; the table trains it, and says so."""
    out = table_with_scoring_rates(tmp_path, monkeypatch, lambda shape: 1e6 if shape == {"direct": False} else 1e-3)
    data = json.loads((out / "results.json").read_text())
    net = data["rows"]["apnews"]
    assert net["shape"] == {"direct": False} and net["options"]["shape"] == {"direct": False}
    assert json.loads((out / net["run"] / "run.json").read_text())["model"]["direct"] is False
    assert "trained with no direct connections, planned by measurement (see Plan)" in net["note"]
    choice = net["shape_choice"]
    assert choice["chosen"] == "with no direct connections" and [t["status"] for t in choice["trials"]] == \
        ["skipped", "skipped", net["plan"]["status"]]
    assert data["call"]["vocabulary"] == {"size": 40, "min_count": 2, "max_vocab": 40}
    assert data["corpus_info"]["vocab"] == 40 and net["parameters"] == 40 * (100 + 1 + 60) + 60 * 501
    text = (out / "README.md").read_text()
    assert "| MLP (AP News net) (no direct connections) | 6 | 60 | 100 | no |" in text
    assert "capped at the 40 most frequent words (`--max-vocab 40`)" in text


def test_a_wider_net_without_direct_connections_is_chosen_when_it_holds_two_epochs(random_corpus, tmp_path,
                                                                                   monkeypatch, capsys):
    """Rates injected: the preset's scoring does not fit, the first lighter shape (h = 120, no direct
    connections) holds two epochs, so it trains, is not compared with the shapes after it, and the report's
    Plan section names it with the measured rates, its planned and actual times and the peak memory."""
    from nnlm.reproduce.apnews import WIDE_NO_DIRECT

    out = table_with_scoring_rates(tmp_path, monkeypatch, lambda shape: 1e-3 if not shape else 1e6)
    data = json.loads((out / "results.json").read_text())
    net = data["rows"]["apnews"]
    assert net["shape"] == WIDE_NO_DIRECT and len(net["shape_choice"]["trials"]) == 2
    run = json.loads((out / net["run"] / "run.json").read_text())
    assert (run["model"]["hidden"], run["model"]["direct"]) == (120, False)
    text = (out / "README.md").read_text()
    assert "| MLP (AP News net) (no direct connections) | 6 | 120 | 100 | no |" in text
    assert "## Plan" in text and "**with no direct connections, hidden = 120** -- chose" in text
    assert "| scoring test |" in text and "Peak memory (resident set" in text
    assert data["call"]["peak_memory_mib"]["process"] > 0


def test_a_later_call_plans_building_the_kn5_partner_again():
    """The KN5 EM row needs the KN5 model; a call that did not build it (an earlier call did) reserves the
    seconds its row took for building it again, before the net's training."""
    from types import SimpleNamespace

    from nnlm.reproduce.net_rows import partner_needs
    from nnlm.reproduce.planner import Need

    job = SimpleNamespace(nets=["apnews"], table=get_table("apnews"), ngrams={},
                          results=SimpleNamespace(rows={"kn5": {"status": "done", "seconds": 100.0}}))
    assert partner_needs(job, 0) == [Need("kn5-again", 1.15 * 100.0, (0.0,), unit="building")]
    job.ngrams["kn5"] = object()  # built in this call: nothing to reserve
    assert partner_needs(job, 0) == []


def test_a_net_no_shape_of_which_fits_is_skipped_saying_what_each_needed(random_corpus, tmp_path, monkeypatch,
                                                                         capsys):
    """Rates injected: neither the preset nor the net without direct connections fits; the row is skipped
    with both needs in its reason, its mixes are skipped, and no KN5 is built again for them."""
    from nnlm.reproduce import net_rows

    monkeypatch.setattr(net_rows, "partner", lambda *a: pytest.fail("a partner built for a skipped net"))
    out = table_with_scoring_rates(tmp_path, monkeypatch, lambda shape: 1e-3, extra=())
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows["apnews"]["status"] == "skipped" and rows["apnews"]["shape"] == {}
    note = rows["apnews"]["note"]
    assert "(and with no direct connections, hidden = 120 it needs at least" in note
    assert "; with no direct connections it needs at least" in note
    assert "with the class-factored output layer (frequency classes, the full softmax's loss) it needs at least" in note
    assert all(rows[r]["status"] == "skipped" for r in ("apnews-mix", "apnews-em", "apnews-kn5-em"))


def test_the_class_output_shape_is_timed_on_its_own_path(random_corpus):
    """The planner times the class-factored net itself (its training step with the full softmax's loss, its
    own exact scoring), not the preset's |V|-wide product."""
    from nnlm.reproduce import rates
    from nnlm.reproduce.apnews import CLASS_OUTPUT

    measured = rates.measure("apnews", random_corpus, "cpu", 1, "sampled", None, CLASS_OUTPUT)
    assert measured.train > 0 and measured.score > 0 and measured.path == "plain"


def test_apnews_table_on_one_text_file_with_heldout(random_corpus, tmp_path, capsys):
    """--heldout sets a text file's valid and test parts for every row: the n-grams' corpus and the net's run
    (which records it, so `nnlm eval` on the run finds the same parts)."""
    text = tmp_path / "all.txt"
    text.write_text("".join((tmp_path / "rand" / f"{s}.txt").read_text() for s in ("train", "valid", "test")))
    out = tmp_path / "ap"
    assert main(["reproduce", "--table", "apnews", "--corpus", str(text), "--heldout", "300", "--out", str(out),
                 "--budget-minutes", "0.2", "--threads", "1", "--no-progress"]) == 0
    data = json.loads((out / "results.json").read_text())
    sizes = data["corpus_info"]
    assert 300 <= sizes["valid"] < 400 and 300 <= sizes["test"] < 400, sizes
    assert data["call"]["vocabulary"]["heldout"] == 300
    run = json.loads((out / data["rows"]["apnews"]["run"] / "run.json").read_text())
    assert run["heldout"] == 300 and run["corpus"] == str(text)
    with pytest.raises(SystemExit):
        main(["reproduce", "--table", "apnews", "--corpus", str(text), "--heldout", "0", "--out", str(out)])
    assert "--heldout" in capsys.readouterr().err

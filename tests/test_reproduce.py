"""`nnlm reproduce` end to end on a small synthetic corpus, and its bad-input paths."""
import json

import pytest

from nnlm.cli import main
from nnlm.errors import NnlmError
from nnlm.reproduce import NGRAM_ROWS, ReproduceRequest, parse_models, reproduce


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
    readme = reproduce(ReproduceRequest(corpus_dir, out, 0.3, "mlp7", False, "nnlm reproduce (test)", progress=False,
                                        threads=1), log=logs.append)
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
    # the nets train with the sampled softmax by default (scored exactly), and the report says so
    assert json.loads((out / rows["mlp7"]["run"] / "run.json").read_text())["loss"] == "sampled"
    assert "`--loss sampled`" in text
    # the net's train split is scored last, if the budget has time left for it; the report says which
    assert (rows["mlp7"]["perplexity"]["train"] is None) == ("Train perplexity not scored" in text) \
        == bool(rows["mlp7"].get("train_pending"))
    assert (out / "curves.png").stat().st_size > 0 and (out / "perplexities.png").stat().st_size > 0
    assert any("budget left" in line for line in logs)

    # a second call skips the n-gram rows it has (the interpolated trigram is rebuilt: it is the mixing partner)
    logs.clear()
    reproduce(ReproduceRequest(corpus_dir, out, 0.2, "mlp7", False, "nnlm reproduce (test)", progress=False,
                               threads=1), log=logs.append)
    assert not any(line.strip().startswith("valid") and "kn" in line for line in logs)
    again = json.loads((out / "results.json").read_text())["rows"]
    assert again["kn5"] == rows["kn5"]


def test_out_holding_other_files_is_refused(random_corpus, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("precious")
    with pytest.raises(NnlmError, match="not an nnlm reproduction"):
        reproduce(ReproduceRequest(str(tmp_path / "rand"), out, 0.1, "mlp7", False, "x",
                                   progress=False), log=lambda s: None)


def test_bad_budget(random_corpus, tmp_path):
    with pytest.raises(NnlmError, match="budget"):
        reproduce(ReproduceRequest(str(tmp_path / "rand"), tmp_path / "r", -1, None, False, "x"), log=lambda s: None)


def small_class_rows(monkeypatch):
    """Table rows with class counts the 62-word synthetic corpus can hold: c = 8 at n = 3, 4, 5 (one
    clustering for the three), and c = 4."""
    import nnlm.reproduce.ngram_rows as rp
    import nnlm.reproduce.table as table

    rows = (NGRAM_ROWS[0], NGRAM_ROWS[1],
            *(table.NgramRow(f"class8-{n}", "class-based back-off, c = 8", n, (None, None, None), kind="class",
                             classes=8) for n in (3, 4, 5)),
            table.NgramRow("class4-3", "class-based back-off, c = 4", 3, (None, None, None), kind="class", classes=4))
    monkeypatch.setattr(table, "NGRAM_ROWS", rows)
    monkeypatch.setattr(table, "NGRAM_BUILD_ORDER", tuple(r.id for r in rows))
    monkeypatch.setattr(table, "NGRAM_AFTER_NETS", ())
    return rp


def test_ngram_rows_under_the_budget_one_clustering_per_c_and_resume(random_corpus, tmp_path, monkeypatch):
    from nnlm.lm import perplexity
    from nnlm.ngram.build import build_ngram

    rp = small_class_rows(monkeypatch)
    corpus_dir, out = str(tmp_path / "rand"), tmp_path / "report"
    calls: list[tuple[int, bool]] = []
    cut_c: set[int] = set()
    real = rp.exchange_clusters

    def counting(train, v, c, **options):
        calls.append((c, options.get("resume_from") is not None))
        if c in cut_c:
            options["deadline"] = 0.0  # the budget ran out as this clustering started
        return real(train, v, c, **options)

    monkeypatch.setattr(rp, "exchange_clusters", counting)

    def call() -> dict:  # 6 s; the n-gram rows (well under a second) could take 90% of it
        reproduce(ReproduceRequest(corpus_dir, out, 0.1, "mlp7", False, "x", progress=False,
                                   threads=1), log=lambda s: None)
        return json.loads((out / "results.json").read_text())["rows"]

    # 1. no share of the budget for n-grams: all but the mixing partner are skipped, and the report says so
    monkeypatch.setattr(rp, "NGRAM_SHARE", 0.0)
    rows = call()
    assert rows["interpolated"]["perplexity"] and not calls
    for row_id in ("kn3", "class8-3", "class8-4", "class8-5", "class4-3"):
        assert rows[row_id]["cut"] and rows[row_id]["note"].startswith("skipped for lack of budget")
    text = (out / "README.md").read_text()
    assert "**Skipped for lack of budget**: Kneser-Ney back-off (n = 3), class-based back-off, c = 8 (n = 3)" in text

    # 2. budget again; the c = 8 clustering is cut at its start: its three rows are shortened, clustered once
    monkeypatch.setattr(rp, "NGRAM_SHARE", 0.9)
    cut_c.add(8)
    rows = call()
    assert calls == [(8, False), (4, False)]
    assert rows["kn3"]["perplexity"]["test"] > 1 and not rows["kn3"]["cut"]
    for n in (3, 4, 5):
        assert rows[f"class8-{n}"]["cut"] and rows[f"class8-{n}"]["note"].startswith("shortened")
    assert not rows["class4-3"]["cut"]
    assert (out / "clusters" / "c8.npz").exists() and (out / "clusters" / "c4.npz").exists()
    assert "**Shortened for lack of budget**: " in (out / "README.md").read_text()

    # 3. a third call continues the cut clustering only (c = 4 is complete and its row done), once for three rows
    cut_c.clear()
    calls.clear()
    rows = call()
    assert calls == [(8, True)]
    assert not any(rows[f"class8-{n}"]["cut"] for n in (3, 4, 5))
    assert rows["class8-4"]["note"] == "the classes of class8-3, reused"
    # cut before its first pass, the continued clustering is the uncut one: the same model as a fresh build
    fresh = build_ngram("class", random_corpus, 3, classes=8, progress=False)
    assert rows["class8-3"]["perplexity"]["test"] == pytest.approx(perplexity(fresh, random_corpus, "test"), rel=1e-12)


def test_full_run_is_resumable_across_sessions(random_corpus, tmp_path, monkeypatch):
    """--full: a session that dies during training leaves a run that the next call continues (not restarts);
    a call after it finished trains nothing. The report names the commit of each call that built rows."""
    corpus_dir, out = str(tmp_path / "rand"), tmp_path / "report"
    monkeypatch.setattr("nnlm.reproduce.results.commit", lambda: "aaaaaaa")

    from conftest import SessionEnded, dies_in_epoch_2

    with pytest.raises(SessionEnded):
        reproduce(ReproduceRequest(corpus_dir, out, None, "mlp7", True, "x", progress=False,
                                   threads=1), log=dies_in_epoch_2)
    assert "mlp7" not in json.loads((out / "results.json").read_text())["rows"]

    logs: list[str] = []
    monkeypatch.setattr("nnlm.reproduce.results.commit", lambda: "bbbbbbb")  # the code changed between the sessions
    reproduce(ReproduceRequest(corpus_dir, out, None, "mlp7", True, "x", progress=False, threads=1), log=logs.append)
    epochs = [line.split("epoch ")[1].split(":")[0] for line in logs if line.strip().startswith("epoch ")]
    assert epochs[0] == "2"  # continued after the checkpoint of epoch 1
    assert any("early stopping" in line for line in logs)
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows["mlp7"]["finished"] and {"mlp8", "mlp7-em"} <= set(rows)
    assert rows["mlp7"]["perplexity"]["train"] > 1  # no budget: every split scored with the net
    metrics = (out / rows["mlp7"]["run"] / "metrics.jsonl").read_text().splitlines()
    history = [json.loads(line)["epoch"] for line in metrics]
    assert history == list(range(1, len(history) + 1))
    report = (out / "README.md").read_text()
    assert "Budget: none (`--full`)" in report
    assert rows["kn5"]["commit"] == "aaaaaaa" and rows["mlp7"]["commit"] == "bbbbbbb"
    commits = next(line for line in report.splitlines() if line.startswith("Commit"))
    assert commits.startswith("Commits (rows built by calls at different commits")
    assert "`bbbbbbb` (mlp7, mlp8, mlp7-em); `aaaaaaa` (interpolated, kn3, " in commits

    logs.clear()
    reproduce(ReproduceRequest(corpus_dir, out, None, "mlp7", True, "x", progress=False, threads=1), log=logs.append)
    assert not any(line.strip().startswith("epoch ") for line in logs)
    assert any("done already" in line for line in logs)
    assert json.loads((out / "results.json").read_text())["rows"] == rows


def test_a_net_the_budget_leaves_nothing_is_skipped_and_trained_by_the_next_call(random_corpus, tmp_path, monkeypatch):
    import nnlm.reproduce.ngram_rows as ngram_rows
    import nnlm.reproduce.planner as planner

    corpus_dir, out = str(tmp_path / "rand"), tmp_path / "report"
    monkeypatch.setattr(ngram_rows, "NGRAM_SHARE", 0.0)
    monkeypatch.setattr(planner, "SAFETY", 1e9)  # its scoring would take more than the budget
    reproduce(ReproduceRequest(corpus_dir, out, 0.05, "mlp7", False, "x", progress=False,
                               threads=1), log=lambda s: None)
    rows = json.loads((out / "results.json").read_text())["rows"]
    for row_id in ("mlp7", "mlp8", "mlp7-em"):
        assert rows[row_id]["cut"] and rows[row_id]["note"].startswith("skipped for lack of budget: it needs at least")
        assert rows[row_id]["parameters"] > 0  # known from the architecture
    assert "min left of" in rows["mlp7"]["note"] and rows["mlp7"]["plan"]["status"] == "skipped"
    readme = (out / "README.md").read_text()
    assert "MLP7 (n = 3), MLP8 (MLP7 + trigram, 0.5) (n = 3)" in readme
    mlp7_line = next(line for line in readme.splitlines() if line.startswith("| MLP7 |"))
    assert "| skipped | skipped for lack of budget: it needs at least" in mlp7_line

    # the report is a function of results.json alone: --report-only writes the same README
    (out / "README.md").unlink()
    (out / "curves.png").unlink()
    assert main(["reproduce", "--out", str(out), "--report-only"]) == 0
    assert (out / "README.md").read_text() == readme and (out / "curves.png").stat().st_size > 0

    monkeypatch.setattr(planner, "SAFETY", 1.15)
    reproduce(ReproduceRequest(corpus_dir, out, 0.1, "mlp7", False, "x", progress=False, threads=1), log=lambda s: None)
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows["mlp7"]["perplexity"]["test"] > 1 and rows["mlp8"]["perplexity"]["test"] > 1


def test_hogwild_nets_are_trained_by_asynchronous_workers_and_the_report_says_so(random_corpus, tmp_path):
    corpus_dir, out = str(tmp_path / "rand"), tmp_path / "report"
    logs: list[str] = []
    readme = reproduce(ReproduceRequest(corpus_dir, out, None, "mlp7", True, "x", progress=False, threads=1,
                                        hogwild=2), log=logs.append)
    assert any("--parallel hogwild with 2 worker processes" in line for line in logs)
    rows = json.loads((out / "results.json").read_text())["rows"]
    state = json.loads((out / rows["mlp7"]["run"] / "state.json").read_text())
    assert state["parallel"] == {"mode": "hogwild", "world_size": 2} and state["finished"]
    assert all(p > 1 for p in rows["mlp7"]["perplexity"].values())
    assert "2 asynchronous Hogwild workers" in readme.read_text()
    with pytest.raises(NnlmError, match="--hogwild must be at least 1"):
        reproduce(ReproduceRequest(corpus_dir, tmp_path / "r2", 0.1, "mlp7", False, "x", hogwild=0), log=lambda s: None)


def test_a_row_built_under_other_options_is_rebuilt_not_relabelled(random_corpus, tmp_path):
    """--full --loss sampled, then --loss full: the second call trains its own net (another run directory)
    instead of reporting the finished sampled net as trained with the exact softmax (the second call
    has a small budget, to keep the test short: what it trains is a shortened exact-softmax net)."""
    corpus_dir, out = str(tmp_path / "rand"), tmp_path / "report"
    reproduce(ReproduceRequest(corpus_dir, out, None, "mlp7", True, "x", progress=False, threads=1,
                               loss="sampled"), log=lambda s: None)
    sampled = json.loads((out / "results.json").read_text())["rows"]
    assert sampled["mlp7"]["options"]["loss"] == "sampled" and sampled["mlp7"]["finished"]
    logs: list[str] = []
    readme = reproduce(ReproduceRequest(corpus_dir, out, 0.15, "mlp7", False, "x", progress=False, threads=1,
                                        loss="full"), log=logs.append).read_text()
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert not any("done already" in line for line in logs)
    assert rows["mlp7"]["run"] != sampled["mlp7"]["run"]
    assert json.loads((out / rows["mlp7"]["run"] / "run.json").read_text())["loss"] == "full"
    for row_id in ("mlp7", "mlp8", "mlp7-em"):
        assert rows[row_id]["options"]["loss"] == "full" and rows[row_id]["options"]["recipe"]["name"] == "adaptive"
    assert "trained with the exact softmax" in readme and "--loss sampled" not in readme
    assert rows["kn5"] == sampled["kn5"]  # n-gram rows do not depend on the nets' options


def test_the_results_key_covers_hogwild_samples_and_recipe_values():
    from nnlm.reproduce.results import net_options, requested_options

    base = requested_options("sampled", None, None, 62, "cpu")
    assert base["samples"] == 62 and base["recipe"]["name"] == "sampled"
    assert requested_options("sampled", None, 2, 62, "cpu") != base
    assert requested_options("sampled", 16, None, 62, "cpu") != base
    # a run.json that records its recipe's values (a recipe changed since) keys with them
    run = {"loss": "sampled", "samples": 62, "recipe": "sampled", "bf16": base["recipe"]["bf16"]}
    assert net_options(run, None) == base
    assert net_options(run | {"weight_decay": 0.1}, None)["recipe"]["weight_decay"] == 0.1


def test_the_report_names_each_nets_own_options(tmp_path):
    """Nets trained under different options (rows kept from calls with other options) get one line each."""
    from nnlm.reproduce import report_only
    from nnlm.reproduce.results import FORMAT, requested_options

    rows = {"mlp1": {"perplexity": {"train": None, "valid": 300.0, "test": 290.0}, "parameters": 10, "seconds": 5.0,
                     "status": "done", "note": "", "cut": False,
                     "options": requested_options("sampled", None, None, 100, "cpu"), "run": "runs/mlp1-0a1b2c3d"},
            "mlp3": {"perplexity": {"train": None, "valid": 320.0, "test": 310.0}, "parameters": 9, "seconds": 5.0,
                     "status": "done", "note": "", "cut": False,
                     "options": requested_options("full", None, 2, 100, "cpu"), "run": "runs/mlp3-4e5f6a7b"},
            "mlp4": {"perplexity": {}, "parameters": 9, "seconds": 0.0, "status": "skipped", "cut": True,
                     "note": "skipped for lack of budget: it needs at least 9.0 min (8.2 min of scoring, 0.8 min "
                             "of training), 3.1 min left of 12.0 min after the rows before it"}}
    (tmp_path / "results.json").write_text(json.dumps({
        "format": FORMAT, "corpus": {"corpus": "mine", "vocab": "x"}, "rows": rows,
        "corpus_info": {"name": "mine", "train": 1000, "valid": 100, "test": 100, "vocab": 100},
        "call": {"command": "nnlm reproduce --out r", "budget_minutes": 12.0, "nets": ["mlp1", "mlp3"],
                 "commit": "abc"}}))
    text = report_only(tmp_path).read_text()
    assert "Nets, each with its own options:" in text
    assert "- MLP1: `nnlm train`'s sampled recipe" in text and "`--loss sampled`" in text
    assert "- MLP3: `nnlm train`'s adaptive recipe" in text and "by 2 asynchronous Hogwild workers" in text
    assert "**Skipped for lack of budget**: MLP4 (MLP3 + trigram, 0.5) (n = 5)" in text
    assert "Their run directories" in text and "`runs/mlp1-0a1b2c3d`, `runs/mlp3-4e5f6a7b`" in text
    assert "| skipped | skipped for lack of budget: it needs at least 9.0 min" in text
    assert "reproduced on mine" in text
    assert (tmp_path / "curves.png").stat().st_size > 0 and (tmp_path / "perplexities.png").stat().st_size > 0


def test_report_only_without_results_is_one_line_error(tmp_path, capsys):
    assert main(["reproduce", "--out", str(tmp_path / "none"), "--report-only"]) == 2
    assert "holds no results.json" in capsys.readouterr().err


def test_the_late_class_rows_are_clustered_in_a_second_process_with_the_classes_of_one(
        random_corpus, tmp_path, monkeypatch):
    """The class counts after the nets are clustered by the child process from the start of the call; the
    rows read the classes it saved (the parent clusters none of them), and they are the classes the
    parent would have found itself."""
    import nnlm.reproduce.table as table
    from nnlm.data.corpus import load_corpus
    from nnlm.wordclasses.exchange import exchange_clusters, load_word_classes

    rp = small_class_rows(monkeypatch)
    monkeypatch.setattr(table, "NGRAM_BUILD_ORDER", tuple(i for i in table.NGRAM_BUILD_ORDER
                                                          if i not in ("class4-3", "class8-3", "class8-4", "class8-5")))
    monkeypatch.setattr(table, "NGRAM_AFTER_NETS", ("class4-3", "class8-3"))
    clustered: list[int] = []
    real_cluster = rp.exchange_clusters
    monkeypatch.setattr(rp, "exchange_clusters", lambda train, v, c, **o: clustered.append(c) or real_cluster(
        train, v, c, **o))
    lines: list[str] = []
    out = tmp_path / "report"
    reproduce(ReproduceRequest(str(tmp_path / "rand"), out, None, "mlp7", True, "x", progress=False,
                               threads=1), log=lines.append)
    assert "clustering c = 4, 8 in a second process meanwhile" in lines
    assert clustered == []  # the parent clustered nothing
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert rows["class4-3"]["status"] == rows["class8-3"]["status"] == "done"
    corpus = load_corpus(str(tmp_path / "rand"))
    for c in (4, 8):
        saved, seconds = load_word_classes(out / "clusters" / f"c{c}.npz")
        assert saved.complete and seconds > 0
        assert (saved.classes == exchange_clusters(corpus.train, len(corpus.vocab), c, progress=False).classes).all()


def test_a_class_row_left_no_clustering_time_is_skipped_not_built_from_unclustered_classes(
        random_corpus, tmp_path, monkeypatch):
    """Classes after no exchange pass are the initial assignment (far worse than any real row): a late
    class row granted no clustering time is skipped with the planner's figures, and nothing is clustered
    (here without the second process, which would have clustered it meanwhile: the next test)."""
    import dataclasses

    import nnlm.reproduce.planner as planner
    import nnlm.reproduce.table as table

    rp = small_class_rows(monkeypatch)
    monkeypatch.setattr(rp, "start_background_clusterings", lambda job: None)
    monkeypatch.setattr(table, "NGRAM_BUILD_ORDER", tuple(i for i in table.NGRAM_BUILD_ORDER if i != "class4-3"))
    monkeypatch.setattr(table, "NGRAM_AFTER_NETS", ("class4-3",))
    clustered: list[int] = []
    real_cluster, real_plan = rp.exchange_clusters, planner.plan
    monkeypatch.setattr(rp, "exchange_clusters", lambda train, v, c, **o: clustered.append(c) or real_cluster(
        train, v, c, **o))

    def no_time_for_class4(left, needs):
        return [dataclasses.replace(g, status="shortened", work=0.0,
                                    reason="shortened for lack of budget: 0.0 min of the ~1.0 min of clustering")
                if g.id == "class4-3" else g for g in real_plan(left, needs)]

    monkeypatch.setattr(planner, "plan", no_time_for_class4)
    out = tmp_path / "report"
    reproduce(ReproduceRequest(str(tmp_path / "rand"), out, 0.1, "mlp7", False, "x", progress=False,
                               threads=1), log=lambda s: None)
    row = json.loads((out / "results.json").read_text())["rows"]["class4-3"]
    assert row["status"] == "skipped" and not row["perplexity"] and 4 not in clustered
    assert row["note"].startswith("skipped for lack of budget: no time left to cluster it (0.0 min of the ~1.0 min")
    assert "**Skipped for lack of budget**: " in (out / "README.md").read_text()


def test_the_perplexity_bars_include_the_em_mixes():
    """The EM mixes (no paper figure, often a table's best row) get their bar; the paper's place stays empty."""
    from nnlm.reproduce.plots import bar_rows
    from nnlm.reproduce.table import table_rows

    rows = {"mlp1": {"perplexity": {"test": 280.0}, "status": "done"},
            "mlp1-em": {"perplexity": {"test": 250.0}, "status": "done"}}
    shown = {row.id: (paper, ours, mark) for row, paper, ours, mark in bar_rows(rows, table_rows(["mlp1"]), 300.0,
                                                                                 320.0)}
    assert shown["mlp1-em"] == (None, pytest.approx(250 / 300), "done")
    assert shown["mlp1"] == (pytest.approx(268 / 320), pytest.approx(280 / 300), "done")
    assert shown["kn5"] == (pytest.approx(321 / 320), None, "not run")

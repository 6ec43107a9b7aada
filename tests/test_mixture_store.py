"""A mixture saved by `nnlm mix --save` is a model: nnlm.load reads it back (after a move too) with the same numbers,
and score, score_lines, the stateful API, rescore and serve take it like any model; bad saves are refused."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers import api_call as call
from test_use_neural import cli, one_line_error  # noqa: F401  (fixtures)

from nnlm.lm import split_log_probs
from nnlm.loading import load
from nnlm.mixture import Mixture, mix_on_corpus
from nnlm.mixture_store import save_mixture
from nnlm.ngram.build import build_ngram
from nnlm.ngram.context_buckets import ContextBuckets
from nnlm.use import score_lines


@pytest.fixture(scope="module")
def saved_cli_mixture(neural_run, tmp_path_factory):
    """`nnlm mix RUN kn:3 --save DIR` on the run's corpus: (DIR, corpus dir, the command's JSON)."""
    from nnlm.cli.main import main

    run_dir, corpus_dir = neural_run
    out = tmp_path_factory.mktemp("mixsave") / "mix"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["mix", str(run_dir), "kn:3", "--corpus", str(corpus_dir), "--save", str(out), "--json"]) == 0
    return out, corpus_dir, json.loads(buffer.getvalue())


def test_bucketed_mixture_round_trips_after_a_move(random_corpus, tmp_path):
    parts = [build_ngram("kn", random_corpus, 3), build_ngram("addone", random_corpus, 2)]
    fitted = mix_on_corpus(parts, random_corpus, "em-buckets")
    assert isinstance(fitted.model.bucketer, ContextBuckets)
    save_mixture(fitted.model, tmp_path / "m")
    shutil.move(tmp_path / "m", tmp_path / "moved")  # self-contained: nothing points outside it
    loaded = load(tmp_path / "moved")
    assert isinstance(loaded, Mixture) and loaded.weights.shape == fitted.model.weights.shape
    np.testing.assert_array_equal(loaded.weights, fitted.model.weights)
    np.testing.assert_allclose(split_log_probs(loaded, random_corpus, "test"), fitted.split_log_probs["test"],
                               rtol=0, atol=1e-12)


def test_saved_mixture_scores_like_the_mix_command_said(saved_cli_mixture, cli):  # noqa: F811
    out, corpus_dir, mixed = saved_cli_mixture
    assert sorted(p.name for p in out.iterdir()) == ["mixture.json", "part0", "part1", "vocab.json"]
    assert sorted(p.name for p in (out / "part0").iterdir()) == ["model.safetensors", "run.json", "vocab.json"]
    code, text, err = cli("score", out, "--split", "test", "--json")  # its corpus from mixture.json
    assert code == 0, err
    assert np.isclose(json.loads(text)["perplexity"], mixed["perplexity"]["test"], rtol=1e-9)


def test_saved_mixture_through_score_lines_and_the_stateful_api(saved_cli_mixture):
    out, _, _ = saved_cli_mixture
    model = load(out)
    text = ["w1 w2 w3 w4 w1", "w5 w2 never-seen w1"]
    scores, bad = score_lines(model, text)
    assert not bad and len(scores) == 2
    ids = model.vocab.encode(["w1", "w2", "w3", "w4", "w1", "w5"]).astype(np.int64)
    state = model.begin_state(batch=1)
    stepped = []
    for w in ids:
        lp, state = model.advance(state, np.array([w]))
        stepped.append(lp[0])
    from nnlm.lm import stream_log_probs

    np.testing.assert_allclose(stepped, stream_log_probs(model, ids), rtol=0, atol=1e-6)  # the net steps in fp32
    first = np.r_[ids[:5], model.vocab.id("<p>")]  # the first line, closed by <p>, from the start of a text
    assert np.isclose(scores[0].log10_prob, stream_log_probs(model, first).sum() / np.log(10), atol=1e-6)


def test_saved_mixture_rescores_and_serves(saved_cli_mixture, tmp_path, cli):  # noqa: F811
    from nnlm.rescore.synthetic import write_srilm_set
    from nnlm.serve.api import served_models
    from nnlm.serve.server import ModelServer

    out, corpus_dir, _ = saved_cli_mixture
    sentences = [line.split() for line in (corpus_dir / "test.txt").read_text().splitlines()
                 if len(line.split()) >= 5][:10]
    refs = write_srilm_set(sentences, tmp_path / "nbest", n=4, seed=1)
    code, text, err = cli("rescore", tmp_path / "nbest", "--lm", out, "--format", "srilm", "--out", tmp_path / "o",
                          "--refs", refs, "--json")
    assert code == 0, err
    assert json.loads(text)["hypotheses"] == 40
    srv = ModelServer(served_models([str(out)], timeout=20)).start()
    try:
        status, r = call(srv, "/api/score", {"model": out.name, "text": "w1 w2 w3"})
    finally:
        srv.stop()
    from nnlm.lm import LOG10_E
    from nnlm.use import score_words

    assert status == 200
    np.testing.assert_allclose([w["log10"] for w in r["words"]], score_words(load(out), "w1 w2 w3") * LOG10_E)


def test_save_over_an_input_or_a_foreign_directory_is_refused(neural_run, tmp_path, cli):  # noqa: F811
    run_dir, corpus_dir = neural_run
    before = sorted(p.name for p in run_dir.iterdir())
    one_line_error(cli("mix", run_dir, "kn:2", "--corpus", corpus_dir, "--save", run_dir), "is the input")
    one_line_error(cli("mix", run_dir, "kn:2", "--corpus", corpus_dir, "--save", run_dir / "inside"), "lies inside")
    assert sorted(p.name for p in run_dir.iterdir()) == before
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    one_line_error(cli("mix", "kn:3", "kn:2", "--corpus", corpus_dir, "--save", tmp_path / "mine"), "not a model")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["parts"][0].update(dir="../part0"), "name like part0"),
    (lambda m: m.update(weights=[[0.5]]), "'weights' must be a table"),
    (lambda m: m.update(format="other"), "not a saved nnlm mixture"),
])
def test_a_damaged_manifest_is_one_line(random_corpus, tmp_path, cli, edit, message):  # noqa: F811
    parts = [build_ngram("kn", random_corpus, 2), build_ngram("kn", random_corpus, 3)]
    save_mixture(Mixture(parts, [0.5, 0.5]), tmp_path / "m")
    manifest = json.loads((tmp_path / "m" / "mixture.json").read_text())
    edit(manifest)
    (tmp_path / "m" / "mixture.json").write_text(json.dumps(manifest))
    one_line_error(cli("score", tmp_path / "m", "--corpus", tmp_path / "rand", "--split", "test"), message)

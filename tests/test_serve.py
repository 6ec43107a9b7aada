"""`nnlm serve` in-process on an ephemeral loopback port: every endpoint's answer matches the library's,
bad requests get one clear JSON error, bodies are bounded, and concurrent clients share model calls."""
from __future__ import annotations

import threading
import urllib.request

import numpy as np
import pytest
from helpers import api_call as call
from helpers import held_model

from nnlm.lm import LOG10_E
from nnlm.loading import load
from nnlm.serve.api import served_models
from nnlm.serve.limits import Limits
from nnlm.serve.server import ModelServer
from nnlm.use import next_words, score_words


@pytest.fixture(scope="module")
def server(neural_run, tmp_path_factory):
    from nnlm.data import load_corpus
    from nnlm.ngram.build import build_ngram

    corpus = load_corpus(str(neural_run[1]), use_cache=False)
    kn = tmp_path_factory.mktemp("serve") / "kn3"
    build_ngram("kn", corpus, 3).save(kn)
    srv = ModelServer(served_models([str(neural_run[0]), str(kn)], timeout=20), limits=Limits(max_body=4096)).start()
    yield srv, {"run": neural_run[0], "kn3": kn}
    srv.stop()


def test_score_next_generate_match_the_library(server):
    srv, paths = server
    assert [m["name"] for m in call(srv, "/api/models")[1]["models"]] == ["run", "kn3"]
    text = "w1 w2 w3 never-seen\nw4 w5"
    for name, path in paths.items():
        model = load(path)
        status, r = call(srv, "/api/score", {"model": name, "text": text, "top": 3})
        assert status == 200
        assert np.allclose([w["log10"] for w in r["words"]], score_words(model, text) * LOG10_E)
        assert [w["word"] for w in r["words"]][-1] == "<p>" and r["words"][3]["known"] is False
        assert all(len(w["top"]) == 3 and w["top"][0][1] >= w["top"][2][1] for w in r["words"])
        status, r = call(srv, "/api/next", {"model": name, "history": "w1 w2", "k": 4})
        expected = next_words(model, "w1 w2", 4)
        assert [n["word"] for n in r["next"]] == [w for w, _ in expected]
        assert np.allclose([n["p"] for n in r["next"]], [p for _, p in expected])
    first = call(srv, "/api/generate", {"model": "kn3", "prompt": "w1", "tokens": 12, "seed": 5})[1]["tokens"]
    assert len(first) == 12 and first == call(srv, "/api/generate", {"model": "kn3", "prompt": "w1", "tokens": 12,
                                                                      "seed": 5})[1]["tokens"]


def test_features_for_neural_models_only(server):
    srv, _ = server
    r = call(srv, "/api/map", {"model": "run", "top": 20})[1]
    assert len(r["words"]) == len(r["x"]) == 20
    assert len(call(srv, "/api/neighbors", {"model": "run", "word": "w1", "k": 3})[1]["neighbors"]) == 3
    status, r = call(srv, "/api/neighbors", {"model": "kn3", "word": "w1"})
    assert status == 400 and "only neural models" in r["error"]


@pytest.mark.parametrize(("path", "body", "status", "fragment"), [
    ("/api/score", {"text": ""}, 400, "no words"),
    ("/api/score", {"text": "w1", "model": "nope"}, 400, "no model 'nope'"),
    ("/api/score", {"text": 3}, 400, "must be a str"),
    ("/api/next", {"k": 0}, 400, "between 1"),
    ("/api/score", b"{not json", 400, "not valid JSON"),
    ("/api/score", b"[1, 2]", 400, "JSON object"),
    ("/api/score", {"text": "w1 " * 3000}, 413, "more than the 4096"),
    ("/api/nothing", {}, 404, "no endpoint"),
])
def test_bad_requests_get_a_clear_json_error(server, path, body, status, fragment):
    got, r = call(server[0], path, body)
    assert got == status and fragment in r["error"]


def test_concurrent_clients_share_model_calls(server):
    srv, paths = server
    batcher = srv.models["run"].batcher
    before = batcher.batches
    answers: list[float] = []
    model = load(paths["run"])

    def client(i: int) -> None:
        answers.append(call(srv, "/api/score", {"model": "run", "text": f"w{i} w{i + 1} w2"})[1]["log10_prob"])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = sorted(float(score_words(model, f"w{i} w{i + 1} w2").sum() * LOG10_E) for i in range(24))
    assert np.allclose(sorted(answers), expected)
    assert batcher.batches - before <= 24  # never more calls than requests


def test_jobs_waiting_together_are_one_model_call(server):
    """While the model is busy with one job, the jobs that queue up are answered by a single next call."""
    from nnlm.serve.batcher import Batcher, Cancel

    model = load(server[1]["kn3"])
    release, calls = threading.Event(), []

    batcher = Batcher(held_model(model, release, calls))
    rng = np.random.default_rng(0)
    jobs = [(rng.integers(3, len(model.vocab), (n, 2)), rng.integers(3, len(model.vocab), n)) for n in (1, 4, 2, 7)]
    results = [None] * len(jobs)

    def client(i: int) -> None:
        results[i] = batcher.log_prob(*jobs[i], timeout=20, cancel=Cancel())

    first = threading.Thread(target=client, args=(0,))
    first.start()
    while not calls:
        threading.Event().wait(0.01)
    others = [threading.Thread(target=client, args=(i,)) for i in range(1, len(jobs))]
    for t in others:
        t.start()
    while batcher.jobs.qsize() < len(others):
        threading.Event().wait(0.01)
    release.set()
    for t in [first, *others]:
        t.join()
    batcher.close()
    assert calls == [1, 4 + 2 + 7] and batcher.batches == 2
    for (ctx, tgt), got in zip(jobs, results, strict=True):
        assert np.allclose(got, model.log_prob(ctx, tgt))


def test_the_page_and_its_files_are_served(server):
    srv, _ = server
    url = f"http://127.0.0.1:{srv.port}"
    for path in ("/", "/explore.js", "/explore.css"):
        with urllib.request.urlopen(url + path, timeout=20) as r:
            assert r.status == 200 and r.read()
    assert "http" not in urllib.request.urlopen(url + "/", timeout=20).read().decode().split("<body>")[1]


def test_without_the_http_stack_the_cli_says_how_to_install_it(server, monkeypatch, capsys):
    import sys

    from nnlm.cli import main

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now raises ImportError
    assert main(["serve", str(server[1]["kn3"]), "--port", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == ["nnlm: error: nnlm serve needs uvicorn and starlette: "
                                                    "pip install 'nnlm[serve]'"]

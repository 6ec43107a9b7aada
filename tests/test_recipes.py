"""Recipe fields: stored in run.json and kept by --resume, the plateau schedule, the scaled
regularisation, bad values (one line, exit 2); and the generated corpora with a known limit."""
from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from nnlm.cli import main
from nnlm.data import load_corpus
from nnlm.data.synthetic import ClassSource, known_class_perplexity, read_source, write_corpus
from nnlm.neural.run import train as tr
from nnlm.neural.run.recipes import RECIPES, REFERENCE_PARAMETERS_PER_TOKEN, run_recipe

TINY = {"preset": "mlp7", "hidden": 8, "features": 4, "batch_size": 16, "threads": 1}


@pytest.fixture
def gen_dir(tmp_path) -> Path:
    write_corpus(tmp_path / "gen", 3000, words=40, classes=5, seed=3)
    return tmp_path / "gen"


def train(out: Path, corpus: Path | None, resume: bool = False, **options) -> dict:
    requested = ({} if resume else {"corpus": str(corpus)} | TINY) | options
    return tr.train(out, requested, resume=resume, progress=False, log=lambda s: None)


def test_run_json_stores_every_recipe_field_scaled_to_the_net(gen_dir, tmp_path):
    train(tmp_path / "run", gen_dir, epochs=1)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    recipe = RECIPES["adaptive"]
    assert run["recipe"] == "adaptive"
    corpus = load_corpus(str(gen_dir), use_cache=False)
    ratio = run_params(run) / len(corpus.train) / REFERENCE_PARAMETERS_PER_TOKEN
    assert 0 < ratio < 1  # a tiny net: less regularisation than Brown MLP1's
    assert run["weight_decay"] == round(recipe.weight_decay * ratio, 6)
    assert run["dropout"] == round(recipe.dropout_x * ratio, 6)
    assert {k: run[k] for k in ("lr", "lr_schedule", "lr_factor", "min_improvement", "plateau_patience")} == {
        "lr": recipe.lr, "lr_schedule": "plateau", "lr_factor": recipe.lr_factor,
        "min_improvement": recipe.min_improvement, "plateau_patience": recipe.plateau_patience}

    train(tmp_path / "given", gen_dir, epochs=1, weight_decay=0.3, dropout=0.1, lr_schedule="epoch", lr_factor=0.9)
    given = json.loads((tmp_path / "given" / "run.json").read_text())
    assert [given[k] for k in ("weight_decay", "dropout", "lr_schedule", "lr_factor")] == [0.3, 0.1, "epoch", 0.9]
    assert run_recipe(given).dropout_h == 0.1


def test_sampled_weight_decay_is_the_same_an_epoch_on_texts_above_a_million_tokens(gen_dir, tmp_path, monkeypatch):
    """The sampled recipes' decay (measured on Brown, ~800k tokens) is x min(1, 1M / training tokens): unchanged
    on Brown and smaller texts, 0.2 x 1M / 10M = 0.02 on a 10M-token text; --weight-decay still wins."""
    from nnlm.neural.run import recipes

    assert recipes.decay_scale(RECIPES["sampled"], 800_000) == 1.0
    assert recipes.decay_scale(RECIPES["sampled"], 10_000_000) == pytest.approx(0.1)
    assert recipes.decay_scale(RECIPES["adaptive"], 10_000_000) == 1.0  # (scaled by parameters instead)
    assert recipes.recipe_values(RECIPES["sampled-large"], decay=0.1)["weight_decay"] == pytest.approx(0.02)
    sampled = {"loss": "sampled", "samples": 8, "epochs": 1}
    train(tmp_path / "small", gen_dir, **sampled)
    assert json.loads((tmp_path / "small" / "run.json").read_text())["weight_decay"] == 0.2
    monkeypatch.setattr(recipes, "DECAY_REFERENCE_TOKENS", 1000)  # the tiny text counts as a large one
    train(tmp_path / "large", gen_dir, **sampled)
    train_tokens = len(load_corpus(str(gen_dir), use_cache=False).train)
    assert json.loads((tmp_path / "large" / "run.json").read_text())["weight_decay"] == round(
        0.2 * 1000 / train_tokens, 6)
    train(tmp_path / "given", gen_dir, weight_decay=0.3, **sampled)
    assert json.loads((tmp_path / "given" / "run.json").read_text())["weight_decay"] == 0.3


def run_params(run: dict) -> int:
    from nnlm.neural.net.model_config import ModelConfig

    return ModelConfig.from_dict(run["model"]).parameter_count()


def test_resume_trains_with_the_stored_values_not_todays_defaults(gen_dir, tmp_path, monkeypatch):
    out = tmp_path / "run"
    train(out, gen_dir, epochs=1, lr_schedule="constant")
    monkeypatch.setitem(RECIPES, "adaptive", dataclasses.replace(RECIPES["adaptive"], lr=0.5))
    state = train(out, None, resume=True, epochs=2)
    assert [h["lr"] for h in state["history"]] == [0.002, 0.002]


def test_plateau_lowers_the_rate_only_when_validation_stalls(gen_dir, tmp_path, monkeypatch):
    scores = iter([30.0, 20.0, 19.99, 19.0, 18.0, 18.0, 18.0, 18.0])  # 19.99: below 20, but not 0.2% below
    monkeypatch.setattr(tr, "scored_validation", lambda lm, corpus: (next(scores), None))
    state = train(tmp_path / "run", gen_dir, epochs=10, lr=0.01, patience=3)
    lrs = [h["lr"] for h in state["history"]]
    assert lrs == [0.01, 0.01, 0.01, 0.005, 0.005, 0.005, 0.0025, 0.00125]  # then 3 stalls: stop
    assert state["best"]["valid_ppl"] == 18.0 and "0.2% better" in state["stop_reason"]


def score_in_turn(monkeypatch, scores: list[float]) -> None:
    """The per-epoch validation perplexities, given in turn (the schedule's decisions are then known)."""
    turn = iter(scores)
    monkeypatch.setattr(tr, "scored_validation", lambda lm, corpus: (next(turn), None))


def test_newbob_undoes_a_stalled_epoch_then_anneals_and_resumes_exactly(gen_dir, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    scores = [30.0, 20.0, 25.0, 19.0, 18.99, 18.0]  # epoch 3 worse: undone; 18.99: better, but not 0.2%
    options = {"epochs": 6, "lr": 0.01, "lr_schedule": "newbob", "patience": 3}
    score_in_turn(monkeypatch, scores)
    whole = train(tmp_path / "whole", gen_dir, **options)
    assert [h["lr"] for h in whole["history"]] == [0.01, 0.01, 0.01, 0.005, 0.0025, 0.00125]

    out = tmp_path / "stopped"
    score_in_turn(monkeypatch, scores[:3])
    state = train(out, gen_dir, **options | {"epochs": 3})
    saved = load_file(str(out / state["tensors"]))
    best = load_file(str(out / "model.safetensors"))  # epoch 2's: the weights epoch 4 starts from
    assert state["best"]["epoch"] == 2 and best.keys() == {k[len("model."):] for k in saved if k[:6] == "model."}
    assert all(torch.equal(saved["model." + k], v) for k, v in best.items())
    optimizer = load_file(str(out / "best-optimizer.safetensors"))
    assert all(torch.equal(saved[k], v) for k, v in optimizer.items())

    score_in_turn(monkeypatch, scores[3:])
    resumed = train(out, None, resume=True, epochs=6)
    assert resumed["history"] == [h | {"elapsed_seconds": r["elapsed_seconds"], "valid_seconds": r["valid_seconds"]}
                                  for h, r in zip(whole["history"], resumed["history"], strict=True)]
    a, b = (load_file(str(d / s["tensors"])) for d, s in ((tmp_path / "whole", whole), (out, resumed)))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("extra, message", [
    (["--recipe", "paper", "--lr-schedule", "plateau"], "--lr-schedule with recipe paper must be paper"),
    (["--recipe", "paper", "--dropout", "0.1"], "--dropout applies to the Adam recipes"),
    (["--lr-schedule", "newbob", "--parallel", "hogwild"], "newbob restores the best weights"),
])
def test_bad_recipe_values_are_one_line_and_exit_2(gen_dir, tmp_path, capsys, extra, message):
    out = tmp_path / "x"
    code = main(["train", "--corpus", str(gen_dir), "--out", str(out), "--no-progress", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize("extra, flag", [
    (["--dropout", "1.5"], "--dropout"), (["--lr", "-1"], "--lr"), (["--weight-decay", "nan"], "--weight-decay"),
    (["--lr-factor", "0"], "--lr-factor"), (["--plateau-patience", "0"], "--plateau-patience"),
    (["--min-improvement", "1"], "--min-improvement"),
])
def test_out_of_range_recipe_options_are_refused_at_parse_time(tmp_path, capsys, extra, flag):
    out = tmp_path / "x"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--corpus", "brown", "--out", str(out), "--no-progress", *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and flag in err and err.count("\n") == 1, err
    assert not out.exists()


@pytest.mark.parametrize("values, message", [
    ({"dropout": 1.5}, "--dropout must be a finite number in [0, 1)"),
    ({"lr": -1.0}, "--lr must be a finite number"),
    ({"weight_decay": float("nan")}, "--weight-decay must be a finite number"),
    ({"lr_factor": 0.0}, "--lr-factor must be a finite number in (0, 1]"),
    ({"plateau_patience": 0}, "--plateau-patience must be an integer >= 1"),
])
def test_recipe_values_from_elsewhere_are_checked_too(values, message):
    """The library checks what did not come through the CLI's parser (Python callers, nnlm tune)."""
    from nnlm.errors import NnlmError
    from nnlm.neural.run.config import RunOptions

    with pytest.raises(NnlmError, match=re.escape(message)):
        RunOptions(recipe="adaptive", **values).check()


def test_generated_corpus_limit_is_the_source_log_prob_of_the_written_test_text(gen_dir):
    info = read_source(gen_dir)
    source = ClassSource.random(info["words"], info["classes"], info["seed"], info["mean_length"],
                                info["concentration"])
    corpus = load_corpus(str(gen_dir), use_cache=False)
    stream = corpus.stream()
    words = corpus.vocab.decode(stream)
    assert corpus.split("test").size == info["tokens"]["test"] and "<unk>" not in words
    # the classes of the stream, read back from the text: <p> is the end class 0
    cls = np.array([0 if w == "<p>" else source.word_class[int(w[1:])] for w in words])
    prob = np.array([1.0 if w == "<p>" else source.word_prob[int(w[1:])] for w in words])
    prev1, prev2 = np.concatenate([[0], cls[:-1]]), np.concatenate([[0, 0], cls[:-2]])
    log_p = np.log(source.class_probs[prev2, prev1, cls] * prob)
    test = log_p[corpus.split_offset("test"):]
    assert math.isclose(info["test_perplexity"], float(np.exp(-test.mean())), rel_tol=1e-9)
    np.testing.assert_allclose(source.class_probs.sum(axis=2), 1.0)
    assert np.all(source.class_probs[:, 0, 0] == 0)  # no empty line


def test_generated_corpora_are_reproducible_and_beat_kneser_ney(tmp_path):
    a = write_corpus(tmp_path / "a", 4000, words=60, classes=6, seed=1)
    b = write_corpus(tmp_path / "b", 4000, words=60, classes=6, seed=1)
    assert a == b and (tmp_path / "a" / "test.txt").read_bytes() == (tmp_path / "b" / "test.txt").read_bytes()
    from nnlm.lm import perplexity
    from nnlm.ngram.kneser_ney import KneserNeyModel

    corpus = load_corpus(str(tmp_path / "a"), use_cache=False)
    kn = KneserNeyModel.fit(corpus.vocab, corpus.train, 3)
    assert a["test_perplexity"] < perplexity(kn, corpus, "test")


def test_known_class_estimate_counts_as_a_plain_loop_would_and_nears_the_limit(gen_dir, tmp_path):
    """The data-limit figure: the source's classes given, its numbers counted from train."""
    info = read_source(gen_dir)
    source = ClassSource.random(info["words"], info["classes"], info["seed"], info["mean_length"],
                                info["concentration"])
    k, alpha = info["classes"], info["concentration"]

    def sentences(split: str) -> list[list[int]]:  # a word's class, then 0 for the line's <p>
        lines = (gen_dir / f"{split}.txt").read_text().splitlines()
        return [[int(w[1:]) for w in line.split()] + [-1] for line in lines]

    counts: dict[tuple[int, int, int], int] = {}
    word_counts = np.zeros(info["words"])
    for sentence in sentences("train"):
        c2 = c1 = 0
        for w in sentence:
            c = 0 if w < 0 else int(source.word_class[w])
            counts[c2, c1, c] = counts.get((c2, c1, c), 0) + 1
            word_counts[w] += w >= 0
            c2, c1 = (c1, c) if c else (0, 0)
    class_total = np.bincount(source.word_class, weights=word_counts + 0.5)
    unseen = [sum(0.5 / class_total[x] for w in np.flatnonzero(word_counts == 0) if source.word_class[w] == x)
              for x in range(k + 1)]  # <unk>: the mass of a class's words never seen in train
    log_p = []
    for sentence in sentences("test"):
        c2 = c1 = 0
        for w in sentence:
            c = 0 if w < 0 else int(source.word_class[w])
            context = sum(counts.get((c2, c1, x), 0) for x in range(k + 1))
            p = [(counts.get((c2, c1, x), 0) + alpha) / (context + alpha * (k + 1)) for x in range(k + 1)]
            if w >= 0 and word_counts[w] == 0:
                log_p.append(math.log(sum(p[x] * unseen[x] for x in range(k + 1))))
            else:
                log_p.append(math.log(p[c] if w < 0 else p[c] * (word_counts[w] + 0.5) / class_total[c]))
            c2, c1 = (c1, c) if c else (0, 0)
    assert math.isclose(known_class_perplexity(gen_dir), math.exp(-sum(log_p) / len(log_p)), rel_tol=1e-9)

    big = write_corpus(tmp_path / "big", 20000, words=40, classes=5, seed=3)
    assert 1.0 < known_class_perplexity(tmp_path / "big") / big["test_perplexity"] < 1.01


def test_the_large_presets_train_with_their_own_recipe(random_corpus, tmp_path):
    from nnlm.neural.run.recipes import default_recipe

    assert default_recipe("sampled", "deep-context") == default_recipe("nce", "Wide-Context") == "sampled-large"
    assert default_recipe("sampled", "mlp1") == default_recipe("sampled") == "sampled"
    assert default_recipe("full", "deep-context") == "adaptive"
    large, sampled = RECIPES["sampled-large"], RECIPES["sampled"]
    assert large.lr_factor < sampled.lr_factor and dataclasses.replace(large, name="sampled", lr_factor=0.7) == sampled
    out = tmp_path / "deep"
    tr.train(out, {"corpus": str(tmp_path / "rand"), "preset": "deep-context", "loss": "sampled", "samples": 20,
                   "hidden": 8, "features": 4, "threads": 1, "epochs": 1}, progress=False, log=lambda s: None)
    run = json.loads((out / "run.json").read_text())
    assert run["recipe"] == "sampled-large" and run["lr_factor"] == large.lr_factor

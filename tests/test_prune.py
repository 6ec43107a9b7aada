"""Relative-entropy pruning (nnlm.ngram.prune, `nnlm prune`): distributions still sum to 1, the result is
prefix- and suffix-closed (the compiled engine takes it), KenLM reads the pruned ARPA file and scores it
as nnlm does, a tiny threshold changes nothing, the criterion against a direct computation, bad input refused."""
from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest
from helpers import assert_one_line_error, nnlm_cli, run_nnlm
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import contexts
from nnlm.loading import load
from nnlm.ngram.arpa import read_arpa, write_arpa
from nnlm.ngram.backoff import BackoffTables
from nnlm.ngram.build import save_ngram
from nnlm.ngram.kneser_ney import KneserNeyModel
from nnlm.ngram.prune import (
    check_threshold,
    cut,
    history_log10,
    own_history_log10,
    prune_model,
    prune_tables,
    removal_cost,
)
from nnlm.ngram.simple import AddOneBigram

VOCAB = 40  # ids 30..39 never occur in the stream: words only the unigram smoothing reaches


def stream(length: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = np.r_[np.arange(30, 0, -1), np.zeros(VOCAB - 30)]
    ids = rng.choice(VOCAB, size=length, p=p / p.sum())
    ids[1::3] = (ids[0::3][: len(ids[1::3])] + 1) % 30  # structure for the higher orders
    return ids


TRAIN, HELD_OUT = stream(8000, seed=1), stream(1500, seed=2)
WORDS = Vocabulary(("<unk>", "<p>", *(f"w{i}" for i in range(2, VOCAB))))
MODEL = KneserNeyModel.fit(WORDS, TRAIN, 4)


def kept_fraction(tables: BackoffTables) -> float:
    return sum(tables.sizes()) / sum(MODEL.tables.sizes())


@settings(max_examples=25, deadline=None)
@given(exponent=st.floats(-8.0, -2.0), seed=st.integers(0, 2**16))
def test_every_context_sums_to_one_after_pruning(exponent, seed):
    pruned = prune_tables(MODEL.tables, 10.0 ** exponent)
    rng = np.random.default_rng(seed)
    listed = [pruned.words(k)[rng.integers(0, pruned.sizes()[k - 1], 20)] for k in range(1, 4) if pruned.sizes()[k - 1]]
    rows = np.concatenate([np.concatenate([rng.integers(0, VOCAB, (20, 3 - k)), g], axis=1)
                           for k, g in enumerate(listed, start=1)] + [rng.integers(0, VOCAB, (20, 3))])
    dist = pruned.distribution(rows)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(dist > 0)


@pytest.mark.parametrize("threshold", [1e-6, 1e-5, 1e-4])
def test_pruned_tables_are_closed_and_the_engine_scores_them(threshold):
    pruned = prune_tables(MODEL.tables, threshold)
    assert 0.05 < kept_fraction(pruned) < 0.95 and pruned.sizes()[0] == VOCAB  # unigrams are never pruned
    for k in range(2, pruned.order + 1):
        grams = pruned.words(k)
        assert np.all(pruned.index(grams[:, :-1]) >= 0) and np.all(pruned.index(grams[:, 1:]) >= 0)
    engine = pruned.query_engine()
    assert engine is not None  # the build refuses tables that are not suffix-closed
    pos = np.arange(3, len(HELD_OUT))
    ctx = contexts(HELD_OUT, pos, 3, 0)
    np.testing.assert_allclose(engine.log10_prob(ctx, HELD_OUT[pos]),
                               pruned.reference_log10_prob_of(ctx, HELD_OUT[pos]), atol=1e-12)


def test_a_tiny_threshold_keeps_everything_bit_for_bit():
    same = prune_tables(MODEL.tables, 1e-300)
    for k in range(MODEL.order):
        np.testing.assert_array_equal(same.keys[k], MODEL.tables.keys[k])
        np.testing.assert_array_equal(same.log10_prob[k], MODEL.tables.log10_prob[k])
        np.testing.assert_array_equal(same.log10_backoff[k], MODEL.tables.log10_backoff[k])


def test_a_larger_threshold_removes_more_and_costs_more_perplexity():
    def held_out_log10(tables: BackoffTables) -> float:
        pos = np.arange(3, len(HELD_OUT))
        return float(tables.reference_log10_prob_of(contexts(HELD_OUT, pos, 3, 0), HELD_OUT[pos]).sum())

    sizes = [sum(prune_tables(MODEL.tables, t).sizes()) for t in (1e-7, 1e-5, 1e-3)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    assert held_out_log10(prune_tables(MODEL.tables, 1e-2)) < held_out_log10(MODEL.tables)


def test_the_criterion_matches_a_direct_computation():
    """exp(D) - 1 of a few 3-grams against removing each one alone and measuring the weighted relative entropy
    over the whole vocabulary: D = P(h) sum over v of P(v | h) ln(P(v | h) / P'(v | h))."""
    tables = cut(MODEL.tables, 3)
    cost = removal_cost(tables, 3, own_history_log10(tables, 3))
    grams = tables.words(3)
    for row in np.random.default_rng(0).choice(len(grams), 8, replace=False):
        h, w = grams[row, :2], grams[row, 2]
        before = tables.distribution(h[None, :])[0]
        lower = cut(tables, 2).distribution(h[None, 1:])[0]
        kept = grams[np.all(grams[:, :2] == h, axis=1), 2]
        kept = kept[kept != w]
        unlisted = np.setdiff1d(np.arange(VOCAB), kept)
        after = before.copy()  # P' without (h, w): the mass the kept words leave, spread as the lower order does
        after[unlisted] = lower[unlisted] * (1.0 - before[kept].sum()) / lower[unlisted].sum()
        p_h = 10.0 ** (tables.log10_prob[0][h[0]] + cut(tables, 2).reference_log10_prob_of(h[None, :1], h[1:])[0])
        divergence = p_h * float(np.sum(before * np.log(before / after)))
        assert math.expm1(divergence) == pytest.approx(cost[row], rel=1e-6, abs=1e-15)


def test_an_arpa_file_of_kneser_ney_prunes_like_the_model(tmp_path):
    """nnlm's Kneser-Ney is interpolated, written in back-off form: read back from ARPA, it prunes the same."""
    write_arpa(MODEL, tmp_path / "kn4.arpa")
    from_file = prune_model(read_arpa(tmp_path / "kn4.arpa", WORDS), 1e-5).model.tables
    direct = prune_tables(MODEL.tables, 1e-5)
    assert from_file.sizes() == direct.sizes()
    for k in range(MODEL.order):
        np.testing.assert_array_equal(from_file.keys[k], direct.keys[k])
        np.testing.assert_allclose(from_file.log10_backoff[k], direct.log10_backoff[k], atol=1e-8)


@pytest.mark.parametrize("threshold", [1e-6, 1e-4])
def test_kenlm_reads_the_pruned_arpa_file_and_scores_as_nnlm(tmp_path, threshold):
    kenlm = pytest.importorskip("kenlm")
    pruned = prune_model(MODEL, threshold).model
    write_arpa(pruned, tmp_path / "pruned.arpa")
    text = " ".join(WORDS.decode(HELD_OUT))
    theirs = np.array([score for score, _, _ in kenlm.Model(str(tmp_path / "pruned.arpa")).full_scores(
        text, bos=False, eos=False)])
    pos = np.arange(3, len(HELD_OUT))  # positions with a full context
    ours = pruned.log10_prob(contexts(HELD_OUT, pos, 3, 0), HELD_OUT[pos])
    np.testing.assert_allclose(theirs[3:], ours, atol=1e-4, rtol=0)


@pytest.mark.parametrize("bad", [0, -1e-8, math.nan, math.inf, "x"])
def test_bad_thresholds_are_refused(bad):
    with pytest.raises(NnlmError, match="threshold"):
        check_threshold(bad)
    with pytest.raises(NnlmError, match="threshold"):
        prune_model(MODEL, bad)


def test_only_backoff_models_are_pruned():
    with pytest.raises(NnlmError, match="back-off"):
        prune_model(AddOneBigram.fit(WORDS, TRAIN), 1e-6)


def test_a_history_model_gives_p_of_h():
    for k in (2, 3, 4):  # the model as its own history model: the chain of its listed entries
        np.testing.assert_allclose(history_log10(MODEL, MODEL.tables, k), own_history_log10(MODEL.tables, k),
                                   atol=1e-12)
    own = prune_model(MODEL, 1e-5)
    lower = prune_model(MODEL, 1e-5, history=KneserNeyModel.fit(WORDS, TRAIN, 2))
    assert lower.model.params["pruned"]["history"] and lower.after != own.after
    np.testing.assert_allclose(lower.model.distribution(np.array([[3, 4, 5], [7, 8, 9]])).sum(axis=1), 1.0)
    other = Vocabulary(("<unk>", "<p>", *(f"v{i}" for i in range(2, VOCAB))))
    with pytest.raises(NnlmError, match="vocabulary"):
        prune_model(MODEL, 1e-5, history=KneserNeyModel.fit(other, TRAIN, 2))
    with pytest.raises(NnlmError, match="back-off"):
        prune_model(MODEL, 1e-5, history=AddOneBigram.fit(WORDS, TRAIN))


# ---- the command ----------------------------------------------------------------------------------

def in_process(capsys, *args: object) -> subprocess.CompletedProcess:
    """`nnlm ARGS` through nnlm.cli.main in this process (helpers.nnlm_cli), as a finished process for
    assert_one_line_error: the refusals need no interpreter start each (~0.7 CPU s); the command's first
    test runs it in a real process."""
    code, out, err = nnlm_cli(capsys, *args)
    return subprocess.CompletedProcess(["nnlm", *map(str, args)], code, out, err)


@pytest.fixture
def saved(tmp_path):
    save_ngram(MODEL, tmp_path / "kn4")
    return tmp_path / "kn4"


def test_prune_command_saves_and_writes_arpa_that_load_alike(saved, tmp_path, capsys):
    out = run_nnlm("prune", saved, "--threshold", "1e-5", "--save", tmp_path / "small", "--arpa",
                   tmp_path / "small.arpa", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ngrams_before"] == MODEL.tables.sizes() and sum(result["ngrams_after"]) < sum(MODEL.tables.sizes())
    from_dir, from_arpa = load(tmp_path / "small"), load(tmp_path / "small.arpa")
    assert from_dir.tables.sizes() == from_arpa.tables.sizes() == result["ngrams_after"]
    pos = np.arange(3, len(HELD_OUT))
    ctx = contexts(HELD_OUT, pos, 3, 0)
    np.testing.assert_allclose(from_dir.log10_prob(ctx, HELD_OUT[pos]), from_arpa.log10_prob(ctx, HELD_OUT[pos]),
                               atol=1e-9)
    # the first command ran in a real process as a user runs it; this one through nnlm.cli.main (no interpreter start)
    code, text, err = nnlm_cli(capsys, "prune", tmp_path / "small.arpa", "--threshold", "1e-4", "--save",
                               tmp_path / "smaller", "--history-lm", saved)
    assert code == 0 and "order" in text and "kept" in text, err
    assert load(tmp_path / "smaller").params["pruned"]["history"]


@pytest.mark.parametrize("args, fragment", [
    (["--threshold", "0"], "--threshold"),
    (["--threshold", "nan"], "--threshold"),
    (["--threshold", "-1e-7"], "--threshold"),
    (["--threshold", "1e-7", "--save", "{model}"], "is the input"),
    (["--threshold", "1e-7"], "--save DIR and/or --arpa FILE"),
])
def test_prune_command_refuses_bad_input_in_one_line_and_writes_nothing(saved, tmp_path, capsys, args, fragment):
    before = sorted(p.name for p in tmp_path.iterdir())
    args = [a.format(model=saved) for a in args]
    if "--save" not in args and fragment != "--save DIR and/or --arpa FILE":
        args += ["--save", str(tmp_path / "out"), "--arpa", str(tmp_path / "out.arpa")]
    assert_one_line_error(in_process(capsys, "prune", saved, *args), fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_prune_command_refuses_a_model_that_is_not_backoff(tmp_path, capsys):
    save_ngram(AddOneBigram.fit(WORDS, TRAIN), tmp_path / "addone")
    assert_one_line_error(in_process(capsys, "prune", tmp_path / "addone", "--threshold", "1e-6", "--arpa",
                                     tmp_path / "a.arpa"), "back-off")
    assert not (tmp_path / "a.arpa").exists()

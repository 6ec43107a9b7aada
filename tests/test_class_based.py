"""Class-based n-gram: P(w|h) = P_KN(class | class history) P(w | class), proper everywhere."""
import json

import numpy as np
import pytest
from helpers import nnlm_cli, run_nnlm
from hypothesis import given, settings
from hypothesis import strategies as st

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import perplexity
from nnlm.ngram.build import build_ngram, load_ngram, save_ngram
from nnlm.ngram.class_based import ClassNgram, unseen_word_discount, word_given_class
from nnlm.ngram.kneser_ney import fit_kneser_ney

# 12 words; ids 0 (<unk>), 10 and 11 never occur in train
VOCAB = Vocabulary(("<unk>", "<p>") + tuple(f"w{i}" for i in range(2, 12)))


def toy_train() -> np.ndarray:
    rng = np.random.default_rng(3)
    seq = rng.integers(1, 10, size=400)
    seq[1::2] = (seq[0::2] % 9) + 1  # some structure for the classes to find
    return seq.astype(np.int64)


@pytest.fixture(scope="module")
def toy_models() -> dict[int, ClassNgram]:
    return {order: ClassNgram.fit(VOCAB, toy_train(), order, 4, progress=False) for order in (1, 3, 5)}


def test_word_given_class_sums_to_one_per_class_and_is_positive():
    classes = np.array([0, 0, 1, 1, 1, 2, 0])
    freq = np.array([5.0, 0.0, 1.0, 2.0, 7.0, 3.0, 1.0])  # word 1 unseen, in class 0
    p = word_given_class(classes, freq)
    np.testing.assert_allclose(np.bincount(classes, weights=p), 1.0)
    assert (p > 0).all()
    d = unseen_word_discount(freq)  # n1 = 2, n2 = 1 -> 0.5
    assert d == pytest.approx(0.5)
    assert p[0] == pytest.approx((5 - d) / 6) and p[1] == pytest.approx(d * 2 / 6)
    assert p[4] == pytest.approx(7 / 10)  # class 1 has no unseen word: plain relative frequency


def test_probability_is_class_probability_times_word_probability(toy_models):
    model = toy_models[3]
    train = toy_train()
    tables = fit_kneser_ney(model.classes[train], 3, model.n_classes)
    ctx = np.array([[2, 3], [11, 0], [5, 5]])
    targets = np.array([4, 10, 5])
    expected = tables.log_prob(model.classes[ctx], model.classes[targets]) + np.log(model.word_prob[targets])
    np.testing.assert_allclose(model.log_prob(ctx, targets), expected, rtol=1e-12)


@settings(max_examples=30, deadline=None)
@given(order=st.sampled_from([1, 3, 5]),
       rows=st.lists(st.lists(st.integers(0, 11), min_size=4, max_size=4), min_size=1, max_size=12))
def test_distribution_sums_to_one_and_matches_log_prob(toy_models, order, rows):
    model = toy_models[order]
    ctx = np.array(rows, dtype=np.int64)[:, 4 - (order - 1):]
    dist = model.distribution(ctx)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=1e-10)
    assert (dist > 0).all()  # unseen words (0, 10, 11) included
    for w in (0, 4, 10):
        np.testing.assert_allclose(np.log(dist[:, w]), model.log_prob(ctx, np.full(len(ctx), w)), rtol=1e-10)


def test_save_and_load(random_corpus, tmp_path):
    model = build_ngram("class", random_corpus, 4, classes=7)
    assert model.n_classes == 7 and model.order == 4
    save_ngram(model, tmp_path / "m")
    loaded = load_ngram(tmp_path / "m")
    assert isinstance(loaded, ClassNgram) and (loaded.classes == model.classes).all()
    assert perplexity(loaded, random_corpus, "test") == perplexity(model, random_corpus, "test")


def test_better_than_unigram_on_structured_data(random_corpus):
    model = build_ngram("class", random_corpus, 3, classes=10)
    unigram = build_ngram("kn", random_corpus, 1)
    assert perplexity(model, random_corpus, "valid") < perplexity(unigram, random_corpus, "valid")


@pytest.mark.parametrize("c", [0, 13])
def test_class_count_out_of_range(c):
    with pytest.raises(NnlmError, match="--classes must be between 1 and"):
        ClassNgram.fit(VOCAB, toy_train(), 3, c, progress=False)


run = run_nnlm


def test_cli_class_model_and_bad_class_counts(toy_dir, tmp_path, capsys):
    """The build in a real process as a user runs it; the load and the refusals in this process (nnlm_cli:
    the same command line through nnlm.cli.main, without an interpreter start each)."""
    proc = run("ngram", "--corpus", str(toy_dir), "--no-cache", "--kind", "class", "--classes", "3",
               "--order", "3", "--json", "--save", str(tmp_path / "m"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["kind"] == "class" and out["details"]["classes"] == 3
    code, loaded, err = nnlm_cli(capsys, "ngram", "--corpus", toy_dir, "--no-cache", "--load", tmp_path / "m", "--json")
    assert code == 0 and json.loads(loaded)["perplexity"] == out["perplexity"], err
    for args, fragment in ((("--kind", "class", "--classes", "100000"), "--classes must be between 1 and |V|"),
                           (("--kind", "kn", "--classes", "5"), "--classes applies only")):
        code, _, err = nnlm_cli(capsys, "ngram", "--corpus", toy_dir, "--no-cache", *args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert fragment in err and "Traceback" not in err

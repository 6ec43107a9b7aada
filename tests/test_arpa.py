"""ARPA files: round trip, KenLM reads ours and agrees word by word, malformed files are refused."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import nnlm_cli, run_nnlm

from nnlm.data.vocab import Vocabulary
from nnlm.errors import NnlmError
from nnlm.lm import contexts, perplexity
from nnlm.ngram.arpa import read_arpa, write_arpa
from nnlm.ngram.build import build_ngram


def kenlm_log10_probs(path: Path, words: list[str]) -> np.ndarray:
    """Per-word log10 P from KenLM, feeding the words one by one from an empty context."""
    kenlm = pytest.importorskip("kenlm")  # only these tests need it
    model = kenlm.Model(str(path))
    state, out = kenlm.State(), kenlm.State()
    model.NullContextWrite(state)
    scores = np.empty(len(words))
    for i, w in enumerate(words):
        scores[i] = model.BaseScore(state, w, out)
        state, out = out, state
    return scores


def assert_kenlm_agrees(model, corpus, split: str, path: Path, limit: int = 20_000) -> None:
    n = model.order
    stream, start = corpus.stream(), corpus.split_offset(split)
    stop = start + min(limit, len(corpus.split(split)))
    words = corpus.vocab.decode(stream[start:stop])
    theirs = kenlm_log10_probs(path, words)[n - 1:]  # positions with a full context
    pos = np.arange(start + n - 1, stop)
    ours = model.log10_prob(contexts(stream, pos, n - 1, corpus.pad_id), stream[pos])
    np.testing.assert_allclose(theirs, ours, atol=2e-5, rtol=0)


@pytest.mark.parametrize("order", [2, 3, 4, 5, 6])  # KenLM loads bigrams and up
def test_kenlm_gives_our_log10_probabilities(random_corpus, tmp_path, order):
    model = build_ngram("kn", random_corpus, order)
    path = tmp_path / f"kn{order}.arpa"
    write_arpa(model, path)
    for split in ("valid", "test"):
        assert_kenlm_agrees(model, random_corpus, split, path)


@pytest.mark.brown
def test_kenlm_agrees_on_brown_kn3(brown, tmp_path):
    model = build_ngram("kn", brown, 3)
    write_arpa(model, tmp_path / "brown3.arpa")
    assert_kenlm_agrees(model, brown, "valid", tmp_path / "brown3.arpa", limit=20_000)


@pytest.mark.parametrize("order", [1, 3, 5])
def test_round_trip_keeps_every_probability(random_corpus, tmp_path, order):
    model = build_ngram("kn", random_corpus, order)
    write_arpa(model, tmp_path / "m.arpa")
    back = read_arpa(tmp_path / "m.arpa", random_corpus.vocab)
    assert back.order == order and back.tables.sizes() == model.tables.sizes()
    for k in range(order):
        np.testing.assert_array_equal(back.tables.keys[k], model.tables.keys[k])
        np.testing.assert_allclose(back.tables.log10_prob[k], model.tables.log10_prob[k], atol=1e-9)
        np.testing.assert_allclose(back.tables.log10_backoff[k], model.tables.log10_backoff[k], atol=1e-9)
    rows = contexts(random_corpus.stream(), np.arange(50), order - 1, random_corpus.pad_id)
    np.testing.assert_allclose(back.distribution(rows).sum(axis=1), 1.0, atol=1e-7)
    assert perplexity(back, random_corpus, "test") == pytest.approx(perplexity(model, random_corpus, "test"), rel=1e-8)


def test_reading_without_a_vocabulary_uses_the_files_words(random_corpus, tmp_path):
    model = build_ngram("kn", random_corpus, 2)
    write_arpa(model, tmp_path / "m.arpa")
    back = read_arpa(tmp_path / "m.arpa")
    assert back.vocab.tokens == random_corpus.vocab.tokens  # <s> and </s> (-99) dropped again


# ---- malformed files -----------------------------------------------------------------------

GOOD = """\\data\\
ngram 1=5
ngram 2=2

\\1-grams:
-0.5\t<unk>\t-0.1
-0.6\ta\t-0.2
-0.7\tb\t-0.3
-99\t<s>\t0
-99\t</s>

\\2-grams:
-0.2\ta b
-0.3\tb a

\\end\\
"""
VOCAB = Vocabulary(("<unk>", "a", "b"))


def test_the_small_good_file_reads(tmp_path):
    (tmp_path / "good.arpa").write_text(GOOD)
    model = read_arpa(tmp_path / "good.arpa", VOCAB)
    # P(b | a) listed; P(a | a) backs off: b(a) * P(a); P(a | <unk>) likewise with b(<unk>)
    got = model.log10_prob(np.array([[1], [1], [0]]), np.array([2, 1, 1]))
    np.testing.assert_allclose(got, [-0.2, -0.2 - 0.6, -0.1 - 0.6])


@pytest.mark.parametrize("edit, fragment", [
    (lambda t: t.replace("ngram 2=2", "ngram 2=3"), "declares 3 2-grams but the section has 2"),
    (lambda t: t.replace("ngram 1=5", "ngram 1=4"), "declares 4 1-grams"),
    (lambda t: t.replace("-0.6\ta", "x0.6\ta"), "'x0.6' is not a number"),
    (lambda t: t.replace("a\t-0.2", "a\tnope"), "'nope' is not a number"),
    (lambda t: t.replace("-0.2\ta b", "0.2\ta b"), "must be a log10 value <= 0"),
    (lambda t: t.replace("-0.2\ta b", "nan\ta b"), "'nan' is not a number"),
    (lambda t: t.split("\\2-grams:")[0], "file ends before \\end\\"),
    (lambda t: t.replace("\\end\\\n", ""), "file ends before \\end\\"),
    (lambda t: t.replace("\\2-grams:", "\\3-grams:"), "expected the \\2-grams: section"),
    (lambda t: t.replace("\\data\\", "data"), "file ends before \\data\\"),
    (lambda t: t.replace("ngram 1=5\n", ""), "expected 'ngram 1=...'"),
    (lambda t: t.replace("-0.2\ta b", "-0.2\ta c"), "word 'c' is not in the corpus vocabulary"),
    (lambda t: t.replace("-0.3\tb a", "-0.3\ta b"), "this 2-gram is listed twice"),
    (lambda t: t.replace("-0.7\tb\t-0.3", "-0.7\tc\t-0.3"), "not in the corpus vocabulary"),
    (lambda t: t.replace("-99\t</s>", "-1\t</s>"), "gives '</s>' a real probability"),
    (lambda t: t.replace("-0.3\tb a", "-0.3\tb a\t-0.1"), "highest order and cannot have a back-off"),
    (lambda t: t.replace("-0.3\tb a", "-0.3\tb a c d"), "needs a probability, 2 word(s)"),
    (lambda t: t.replace("ngram 2=2", "ngram 2=2\nngram 3=0\nngram 4=0\nngram 5=0\nngram 6=0\nngram 7=0"),
     "above the supported maximum 6"),
])
def test_malformed_files_are_one_line_errors(tmp_path, edit, fragment):
    path = tmp_path / "bad.arpa"
    path.write_text(edit(GOOD))
    with pytest.raises(NnlmError) as info:
        read_arpa(path, VOCAB)
    message = str(info.value)
    assert fragment in message and "\n" not in message and str(path) in message


def test_markers_the_vocabulary_lacks_are_dropped_with_their_ngrams(tmp_path):
    # lmplz style: <s> opens contexts; </s> is predicted only with probability 1e-99 here.
    text = GOOD.replace("ngram 2=2", "ngram 2=4").replace(
        "-0.3\tb a\n", "-0.3\tb a\n-0.4\t<s> a\n-99\ta </s>\n")
    (tmp_path / "m.arpa").write_text(text)
    model = read_arpa(tmp_path / "m.arpa", VOCAB)
    assert model.tables.sizes() == [3, 2]
    np.testing.assert_allclose(model.log10_prob(np.array([[2]]), np.array([1])), [-0.3])


def test_positive_back_off_weights_are_allowed(tmp_path):
    (tmp_path / "m.arpa").write_text(GOOD.replace("a\t-0.2", "a\t0.25"))
    model = read_arpa(tmp_path / "m.arpa", VOCAB)
    np.testing.assert_allclose(model.log10_prob(np.array([[1]]), np.array([1])), [0.25 - 0.6])


def test_binary_file_is_an_error(tmp_path):
    (tmp_path / "bin.arpa").write_bytes(b"\\data\\\nngram 1=1\n\n\\1-grams:\n-1\t\xff\xfe\n")
    with pytest.raises(NnlmError, match="not a UTF-8 text file"):
        read_arpa(tmp_path / "bin.arpa", VOCAB)


def test_vocabulary_missing_from_the_file_is_an_error(tmp_path):
    (tmp_path / "good.arpa").write_text(GOOD)
    with pytest.raises(NnlmError, match=r"1 word\(s\) of the corpus vocabulary are not among its unigrams"):
        read_arpa(tmp_path / "good.arpa", Vocabulary(("<unk>", "a", "b", "zebra")))


def test_missing_context_is_an_error(tmp_path):
    text = GOOD.replace("ngram 2=2", "ngram 2=0").replace("-0.2\ta b\n-0.3\tb a\n", "")
    text = text.replace("ngram 1=5\nngram 2=0", "ngram 1=5\nngram 2=1\nngram 3=1")
    text = text.replace("\\2-grams:\n", "\\2-grams:\n-0.2\ta b\n\n\\3-grams:\n-0.1\tb a b\n")
    (tmp_path / "ctx.arpa").write_text(text)
    with pytest.raises(NnlmError, match="context of this 3-gram is not listed"):
        read_arpa(tmp_path / "ctx.arpa", VOCAB)


def test_missing_file_is_an_error(tmp_path):
    with pytest.raises(NnlmError, match="cannot read ARPA file"):
        read_arpa(tmp_path / "nope.arpa", VOCAB)


# ---- command line ----------------------------------------------------------------------------

run = run_nnlm


def test_cli_writes_saves_and_loads_kn(toy_dir, tmp_path, capsys):
    """The build in a real process as a user runs it; the loads and the re-save in this process (nnlm_cli:
    the same command line through nnlm.cli.main, without an interpreter start each)."""
    import json

    base = ("ngram", "--corpus", str(toy_dir), "--no-cache", "--json")
    built = run(*base, "--kind", "kn", "--order", "3", "--arpa", str(tmp_path / "m.arpa"),
                "--save", str(tmp_path / "m"))
    assert built.returncode == 0, built.stderr

    def in_process(*args: object) -> str:
        code, out, err = nnlm_cli(capsys, *base, *args)
        assert code == 0, err
        return out

    from_arpa = in_process("--load-arpa", tmp_path / "m.arpa")
    from_dir = in_process("--load", tmp_path / "m")
    in_process("--load-arpa", tmp_path / "m.arpa", "--save", tmp_path / "m2")
    from_resaved = in_process("--load", tmp_path / "m2", "--order", "3")
    assert json.loads(from_resaved)["perplexity"] == json.loads(from_arpa)["perplexity"]
    ppl = [json.loads(out)["perplexity"] for out in (built.stdout, from_arpa, from_dir)]
    for split in ("train", "valid", "test"):
        assert ppl[1][split] == pytest.approx(ppl[0][split], rel=1e-8)
        assert ppl[2][split] == ppl[0][split]


@pytest.mark.parametrize("make, args, fragment", [
    (None, ("--kind", "kn", "--order", "7"), "must be an integer in [1, 6], got 7"),
    (None, ("--kind", "kn", "--order", "0"), "must be an integer in [1, 6], got 0"),
    ("truncated", ("--load-arpa",), "file ends before"),
    ("foreign", ("--load-arpa",), "does not match the corpus"),
    ("kn2", ("--order", "3", "--load-arpa"), "has order 2, not --order 3"),
])
def test_cli_bad_input_is_one_line_exit_2(toy_dir, tmp_path, make, args, fragment):
    if make is not None:
        path = tmp_path / "bad.arpa"
        if make == "kn2":
            assert run("ngram", "--corpus", str(toy_dir), "--no-cache", "--kind", "kn", "--order", "2",
                       "--arpa", str(path)).returncode == 0
        else:
            path.write_text(GOOD.split("\\2-grams:")[0] if make == "truncated" else GOOD)
        args = (*args, str(path))
    proc = run("ngram", "--corpus", str(toy_dir), "--no-cache", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and fragment in lines[0], proc.stderr


def test_a_file_that_sums_below_one_is_read_with_one_note_and_ours_without(random_corpus, tmp_path, capsys):
    write_arpa(build_ngram("kn", random_corpus, 3), tmp_path / "ours.arpa")
    read_arpa(tmp_path / "ours.arpa", random_corpus.vocab)
    assert capsys.readouterr().err == ""
    (tmp_path / "toy.arpa").write_text(GOOD)  # its unigrams sum to 0.77
    read_arpa(tmp_path / "toy.arpa", VOCAB)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "sum to 0." in err[0] and "not 1" in err[0] and "toy.arpa" in err[0]

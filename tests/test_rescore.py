"""N-best rescoring: batched scores equal one-at-a-time ones, the three formats read and write back,
word errors are Levenshtein's, tuning never worsens the dev objective, and reranking a made-up set
with a trigram lowers its word error rate."""
from __future__ import annotations

import json

import numpy as np
import pytest
from test_use_neural import cli, one_line_error  # noqa: F401  (fixtures)

from nnlm.loading import load
from nnlm.rescore.formats import read_nbest, write_reranked
from nnlm.rescore.lm_scores import hypothesis_log_probs, one_at_a_time_log_probs
from nnlm.rescore.synthetic import write_srilm_set
from nnlm.rescore.tuning import DevSet, tune_weights, word_errors
from nnlm.use import score_lines


def plain_levenshtein(a: list[str], b: list[str]) -> int:
    d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[-1][-1]


def test_word_errors_are_levenshtein():
    rng = np.random.default_rng(1)
    for _ in range(200):
        a = list(rng.choice(list("abcd"), size=rng.integers(0, 7)))
        b = list(rng.choice(list("abcd"), size=rng.integers(0, 7)))
        assert word_errors(a, b) == plain_levenshtein(a, b)


@pytest.fixture
def kn3(random_corpus, tmp_path):
    from nnlm.ngram.build import build_ngram

    build_ngram("kn", random_corpus, 3).save(tmp_path / "kn3")
    return tmp_path / "kn3"


def test_batched_scores_equal_one_at_a_time_and_score_lines(kn3, neural_run):
    hyps = [["w1", "w2", "w3"], ["w5"], ["w9", "never-seen", "w1", "w2"], []]
    for model in (load(kn3), load(neural_run[0])):
        batched = hypothesis_log_probs(model, hyps, chunk=5)  # chunks that cut hypotheses
        assert np.allclose(batched, one_at_a_time_log_probs(model, hyps))
        scored, _ = score_lines(model, [" ".join(h) for h in hyps[:3]], carry_context=False)
        assert np.allclose(batched[:3] * np.log10(np.e), [s.log10_prob for s in scored])


def test_formats_read_and_write_back(tmp_path):
    (tmp_path / "srilm").mkdir()
    (tmp_path / "srilm" / "a").write_text("-10 -3 2 x y\n-9 -5 1 x\n")
    (tmp_path / "v2").write_text("NBestList2.0\n(-120) <s> ( st: 0 et: 1 g: 0 a: -1 ) x ( st: 1 et: 2 g: -5 a: -9 ) "
                                 "-pau- ( st: 2 et: 3 g: 0 a: 0 ) y ( st: 3 et: 4 g: -1 a: -2 ) </s>\n")
    (tmp_path / "m.txt").write_text("0 ||| x y ||| LM0= -3 ||| -1.5\n0 ||| x ||| LM0= -5 ||| -2\n"
                                    "1 ||| z ||| LM0= -1 ||| -1\n")
    (tmp_path / "k.txt").write_text("u1-1 x y\nu1-2 x\n")
    (tmp_path / "k.scores").write_text("u1-1 10 3\nu1-2 9 5\n")
    sr = read_nbest("srilm", [str(tmp_path / "srilm")])
    assert sr.names == ["acoustic", "lm", "nwords"] and sr.utterances[0].hypotheses == [["x", "y"], ["x"]]
    v2 = read_nbest("srilm", [str(tmp_path / "v2")])
    assert v2.format == "srilm2" and v2.utterances[0].hypotheses == [["x", "y"]]
    assert v2.utterances[0].features[0, 0] == -120
    mo = read_nbest("moses", [str(tmp_path / "m.txt")])
    assert [u.uid for u in mo.utterances] == ["0", "1"] and mo.utterances[0].extra[1] == "LM0= -5"
    ka = read_nbest("kaldi", [str(tmp_path / "k.txt")], str(tmp_path / "k.scores"), ["ac_cost", "lm_cost"])
    assert ka.utterances[0].uid == "u1" and ka.utterances[0].features.tolist() == [[10, 3], [9, 5]]
    for nbest, files in ((sr, ["a"]), (mo, ["nbest.txt"]), (ka, ["text", "scores"])):
        nbest.add_feature("nnlm0", [np.full(len(u.hypotheses), -1.0) for u in nbest.utterances])
        out = tmp_path / f"out-{nbest.format}"
        out.mkdir()
        weights = np.zeros(len(nbest.names))
        primary = nbest.column("lm" if nbest.format == "srilm" else nbest.names[0])
        weights[primary] = -1.0 if nbest.format == "kaldi" else 1.0
        write_reranked(nbest, weights, [np.arange(len(u.hypotheses))[::-1] for u in nbest.utterances], out, ["nnlm0"])
        assert all((out / f).exists() for f in files)
    assert (tmp_path / "out-moses" / "nbest.txt").read_text().splitlines()[0] == "0 ||| x ||| LM0= -5 nnlm0= -1 ||| -2"
    assert (tmp_path / "out-kaldi" / "scores").read_text().splitlines()[0] == "u1-2 9 5 -1"
    # the lm column: combined (-5) - acoustic (-9)
    assert (tmp_path / "out-srilm" / "a").read_text().splitlines()[0] == "-9 4 1 x"


def test_tuning_never_worsens_the_dev_objective(kn3, tmp_path):
    from nnlm.rescore import add_lm_features, parse_weights
    from nnlm.rescore.tuning import read_references

    sentences = [line.split() for line in (tmp_path / "rand" / "valid.txt").read_text().splitlines()[:30]]
    refs = write_srilm_set(sentences, tmp_path / "dev", n=6, seed=3)
    nbest = read_nbest("srilm", [str(tmp_path / "dev")])
    lm = add_lm_features(nbest, [load(kn3)])
    start = parse_weights(None, nbest, lm)
    dev = DevSet.build(nbest, read_references(str(refs)))
    for objective in ("wer", "likelihood"):
        tuned = tune_weights(dev, start, [nbest.column("nnlm0"), nbest.column("nwords")], 0, objective)
        assert dev.loss(objective, tuned) <= dev.loss(objective, start)
        assert tuned[0] == start[0]


def test_cli_rescore_lowers_word_errors(random_corpus, kn3, tmp_path, cli):  # noqa: F811
    text = (tmp_path / "rand" / "test.txt").read_text().splitlines()
    sentences = [line.split() for line in text if len(line.split()) >= 5][:40]
    refs = write_srilm_set(sentences, tmp_path / "test", n=8, seed=1)
    dev_refs = write_srilm_set(sentences[::-1], tmp_path / "dev", n=8, seed=2)
    code, out, err = cli("rescore", tmp_path / "test", "--lm", kn3, "--format", "srilm", "--out", tmp_path / "o",
                         "--refs", refs, "--tune", tmp_path / "dev", "--tune-refs", dev_refs, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["wer_after"] < result["wer_before"] and result["hypotheses"] == 40 * 8
    best = (tmp_path / "o" / "one-best.txt").read_text().splitlines()
    assert len(best) == 40 and best[0].startswith("utt0000 ")
    assert len((tmp_path / "o" / "utt0000").read_text().splitlines()) == 8


@pytest.mark.parametrize(("args", "message"), [
    (["--format", "kaldi"], "needs --scores"),
    (["--format", "srilm", "--weights", "bogus=1"], "no feature 'bogus'"),
    (["--format", "srilm", "--tune", "x"], "go together"),
    (["--format", "moses"], "no hypotheses"),
])
def test_cli_rescore_errors(kn3, tmp_path, cli, args, message):  # noqa: F811
    (tmp_path / "l").write_text("" if "moses" in args else "-1 0 1 w1\n")
    one_line_error(cli("rescore", tmp_path / "l", "--lm", kn3, "--out", tmp_path / "o", *args), message)

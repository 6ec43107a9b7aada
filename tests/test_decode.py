"""`nnlm decode`: the CTC beam search finds the words of clean posteriors, LM fusion fixes a word the
acoustics confuse, the pyctcdecode adapter gives the model's own scores, WER and tuning, and every bad
input is one line, exit 2, with nothing written."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from conftest import write_text_corpus
from test_use_neural import cli, one_line_error  # noqa: F401  (fixtures)

from nnlm.data.corpus import Corpus
from nnlm.data.vocab import Vocabulary
from nnlm.decode import Alphabet, CTCWordDecoder, DecodeOptions, corpus_wer
from nnlm.decode.tuning import tune_alpha_beta
from nnlm.decode.wer import word_errors
from nnlm.errors import NnlmError
from nnlm.mixture import Mixture
from nnlm.ngram.build import build_ngram

TEXT = ("the cat sat on the mat <p> the dog sat on the log <p> a cat ate the rat <p> "
        "the cap is on the hat <p> the cat sat on the hat <p> ") * 20
LABELS = ["<pad>", "|", *"abcdeghilmnopqrst", "<unk>"]


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    tokens = TEXT.split()
    vocab = Vocabulary.from_counts(Counter(tokens))
    ids = vocab.encode(tokens)
    return Corpus("toy", vocab, ids[:-60], ids[-60:-30], ids[-30:], pad_token="<p>")


@pytest.fixture(scope="module")
def kn3(corpus):
    return build_ngram("kn", corpus, 3)


@pytest.fixture(scope="module")
def alphabet() -> Alphabet:
    return Alphabet.from_labels(LABELS)


def posteriors(alphabet: Alphabet, spelled: list[list[tuple[str, float]]], sharp: float = 10.0) -> np.ndarray:
    """Log-probabilities with frames for each character: `spelled` is a list of words, each a list of
    (characters sharing the frame's mass, how much the first one is ahead) items; blanks between."""
    column = {lab: i for i, lab in enumerate(alphabet.labels)}
    rows = []

    def frame(weights: dict[int, float]) -> None:
        logits = np.zeros(len(alphabet))
        for c, w in weights.items():
            logits[c] = w
        rows.append(logits - np.log(np.exp(logits).sum()))

    for i, word in enumerate(spelled):
        if i:
            frame({column["|"]: sharp})
        for chars, lead in word:
            frame({column[chars[0]]: sharp + lead, **{column[ch]: sharp for ch in chars[1:]}})
            frame({alphabet.blank: sharp})
    return np.array(rows)


def clean(words: str) -> list[list[tuple[str, float]]]:
    return [[(ch, 0.0) for ch in w] for w in words.split()]


def test_clean_posteriors_decode_to_their_words(alphabet, kn3):
    lp = posteriors(alphabet, clean("the dog sat on the log"))
    for model in (None, kn3):
        assert CTCWordDecoder(alphabet, model).decode(lp).words == ["the", "dog", "sat", "on", "the", "log"]


def test_lm_fusion_fixes_a_confusable_word(alphabet, kn3):
    spelled = clean("the cat sat on the mat")
    spelled[1][2] = ("pt", 0.5)  # the acoustics hear "cap" a little more than "cat"
    lp = posteriors(alphabet, spelled)
    assert CTCWordDecoder(alphabet, None).decode(lp).words[1] == "cap"
    fused = CTCWordDecoder(alphabet, kn3, DecodeOptions(alpha=1.0, beta=0.0)).decode(lp)
    assert fused.words == ["the", "cat", "sat", "on", "the", "mat"]


def test_best_score_is_acoustic_plus_fused_lm(alphabet, kn3):
    """On posteriors with one path per text (blank and boundary frames certain), the winner's score is
    its path's ln P plus alpha * ln P(words, then <p>) + beta per word, from the model directly."""
    lp = posteriors(alphabet, clean("a cat ate the rat"), sharp=60.0)  # other labels ~e-60: one path
    options = DecodeOptions(alpha=0.7, beta=0.3)
    hyp = CTCWordDecoder(alphabet, kn3, options).decode(lp)
    assert hyp.words == ["a", "cat", "ate", "the", "rat"]
    ids = kn3.vocab.encode([*hyp.words, "<p>"])
    state, lm = kn3.begin_state(1), 0.0
    for w in ids:
        step, state = kn3.advance(state, [int(w)])
        lm += float(step[0])
    acoustic = lp.max(axis=1).sum()
    assert hyp.score == pytest.approx(acoustic + 0.7 * lm + 0.3 * 5, abs=1e-6)


def test_unknown_words_as_unk_or_kept_out(alphabet, kn3):
    lp = posteriors(alphabet, clean("the bat sat"))  # "bat" is no word of the model
    assert CTCWordDecoder(alphabet, kn3).decode(lp).words == ["the", "bat", "sat"]
    known = CTCWordDecoder(alphabet, kn3, DecodeOptions(known_words_only=True)).decode(lp).words
    assert all(w in kn3.vocab for w in known) and "bat" not in known


def test_a_mixture_is_a_word_lm_too(alphabet, corpus, kn3):
    mix = Mixture([kn3, build_ngram("kn", corpus, 2)], [0.6, 0.4])
    lp = posteriors(alphabet, clean("the cap is on the hat"))
    assert CTCWordDecoder(alphabet, mix).decode(lp).words == ["the", "cap", "is", "on", "the", "hat"]


def test_pyctcdecode_adapter_scores_are_the_models(alphabet, kn3):
    pytest.importorskip("pyctcdecode")
    from nnlm.decode.pyctc import NnlmLanguageModel, build_ctcdecoder

    lm = NnlmLanguageModel(kn3, alpha=0.8, beta=0.5)
    state, context = lm.get_start_state(), list(kn3.begin_state(1).context[0])
    for word in ["the", "cat", "sat", "on"]:
        score, state = lm.score(state, word)
        wid = kn3.vocab.id(word)
        expect = kn3.log_prob(np.array([context[-2:]]), np.array([wid]))[0]
        assert score == pytest.approx(0.8 * expect + 0.5, abs=1e-9)
        context.append(wid)
    last, _ = lm.score(state, "the", is_last_word=True)
    end = kn3.log_prob(np.array([[context[-1], kn3.vocab.id("the")]]), np.array([kn3.vocab.id("<p>")]))[0]
    the = kn3.log_prob(np.array([context[-2:]]), np.array([kn3.vocab.id("the")]))[0]
    assert last == pytest.approx(0.8 * (the + end) + 0.5, abs=1e-9)
    assert lm.score_partial_token("ca") == 0.0 and lm.score_partial_token("xq") == -10.0
    oov, _ = lm.score(lm.get_start_state(), "zebra")  # <unk>'s probability and the offset in log10 units
    unk = kn3.log_prob(kn3.begin_state(1).context, np.array([kn3.vocab.unk_id]))[0]
    assert oov == pytest.approx(0.8 * (unk + np.log(10) * -10.0) + 0.5, abs=1e-9)
    spelled = clean("the cat sat on the mat")
    spelled[1][2] = ("pt", 0.5)
    decoder = build_ctcdecoder(LABELS, kn3, alpha=1.0, beta=0.0)
    assert decoder.decode(posteriors(alphabet, spelled).astype(np.float32)) == "the cat sat on the mat"


def test_tuning_never_worsens_dev_wer(alphabet, kn3):
    spelled = clean("the cat sat on the mat")
    spelled[1][2] = ("pt", 0.5)
    dev = {"u1": posteriors(alphabet, spelled), "u2": posteriors(alphabet, clean("the dog sat on the log"))}
    refs = {"u1": ["the", "cat", "sat", "on", "the", "mat"], "u2": ["the", "dog", "sat", "on", "the", "log"]}

    def decode_set(options):
        decoder = CTCWordDecoder(alphabet, kn3, options)
        return {uid: decoder.decode(lp).words for uid, lp in dev.items()}

    start = DecodeOptions(alpha=0.0, beta=0.0)
    start_wer = corpus_wer(decode_set(start), refs)[0] / 12
    best, best_wer, trials = tune_alpha_beta(decode_set, refs, start)
    assert start_wer > 0 and best_wer == 0.0 and best.alpha > 0
    assert trials[0] == {"alpha": 0.0, "beta": 0.0, "wer": start_wer}
    assert best_wer == min(t["wer"] for t in trials)


# --- the command ---------------------------------------------------------------------------------

@pytest.fixture
def files(tmp_path, alphabet, kn3):
    kn3.save(tmp_path / "kn3")
    (tmp_path / "labels.txt").write_text("\n".join(LABELS) + "\n")
    spelled = clean("the cat sat on the mat")
    spelled[1][2] = ("pt", 0.5)
    logits = tmp_path / "logits"
    logits.mkdir()
    np.save(logits / "u1.npy", posteriors(alphabet, spelled))
    np.savez(tmp_path / "more.npz", u2=posteriors(alphabet, clean("the dog sat on the log")))
    (tmp_path / "refs.txt").write_text("u1 the cat sat on the mat\nu2 the dog sat on the log\n")
    return tmp_path


def decode_args(f, *extra, lm: str = "kn3"):
    return ["decode", f / "logits", f / "more.npz", "--labels", f / "labels.txt", "--lm", f / lm, *extra]


def test_cli_decodes_prints_wer_and_tunes(files, cli):  # noqa: F811
    code, out, _ = cli(*decode_args(files, "--out", files / "out", "--alpha", "0", "--beta", "0",
                                    "--refs", files / "refs.txt"))
    assert code == 0 and "WER 8.33% (1 errors in 12 words)" in out
    lines = (files / "out" / "transcripts.txt").read_text().splitlines()
    assert lines == ["u1 the cap sat on the mat", "u2 the dog sat on the log"]
    code, out, _ = cli(*decode_args(files, "--out", files / "out", "--alpha", "0", "--beta", "0", "--refs",
                                    files / "refs.txt", "--tune-dev", files / "logits", "--tune-refs",
                                    files / "refs.txt", "--json"))
    result = json.loads(out)
    assert code == 0 and result["wer"] == 0.0 and result["dev_wer"] == 0.0 and result["alpha"] > 0
    assert json.loads((files / "out" / "decode.json").read_text())["wer"] == 0.0
    hyps = dict(line.split(" ", 1) for line in (files / "out" / "transcripts.txt").read_text().splitlines())
    refs = dict(line.split(" ", 1) for line in (files / "refs.txt").read_text().splitlines())
    assert sum(word_errors(hyps[u].split(), refs[u].split()) for u in refs) == 0


def test_cli_mixes_several_models(files, cli):  # noqa: F811
    code, out, _ = cli(*decode_args(files, "--lm", files / "kn3", "--weights", "0.5,0.5", "--out", files / "o",
                                    "--refs", files / "refs.txt", "--alpha", "1", "--beta", "0"))
    assert code == 0 and "WER 0.00%" in out


def test_cli_decodes_with_a_mixture_saved_by_mix(files, cli):  # noqa: F811
    """`--lm MIXDIR`, a mixture saved by `nnlm mix --save` (two n-gram models built on a text directory, weights
    per context bucket): its fusion turns the acoustics' "cap" into "cat", as a single model's does."""
    lines = [s.strip() for s in TEXT.split("<p>") if s.strip()]  # the five sentences of the toy corpus
    held = "the cat sat on the log\nthe dog ate the rat\nthe cap is on the mat\n" * 2
    corpus = write_text_corpus(files / "toy", "\n".join(lines * 16) + "\n", held, held)
    for order in (2, 3):
        code, _, err = cli("ngram", "--corpus", corpus, "--kind", "kn", "--order", order, "--save",
                           files / f"toy-kn{order}")
        assert code == 0, err
    code, out, err = cli("mix", files / "toy-kn3", files / "toy-kn2", "--corpus", corpus, "--weights", "em-buckets",
                         "--save", files / "mix", "--json")
    assert code == 0, err
    assert (files / "mix" / "buckets.npz").is_file() and len(json.loads(out)["weights"]) > 1
    code, out, err = cli(*decode_args(files, "--out", files / "acoustic", "--alpha", "0", "--beta", "0", lm="mix"))
    assert code == 0, err
    assert (files / "acoustic" / "transcripts.txt").read_text().splitlines()[0] == "u1 the cap sat on the mat"
    code, out, err = cli(*decode_args(files, "--out", files / "fused", "--alpha", "1", "--beta", "0", "--refs",
                                      files / "refs.txt", "--json", lm="mix"))
    assert code == 0, err
    result = json.loads(out)
    assert result["wer"] == 0.0 and result["lm"] == [str(files / "mix")]
    assert (files / "fused" / "transcripts.txt").read_text().splitlines() == [
        "u1 the cat sat on the mat", "u2 the dog sat on the log"]


BAD = {
    "width": lambda f: np.save(f / "logits" / "u3.npy", np.zeros((4, len(LABELS) + 1))),
    "nan": lambda f: np.save(f / "logits" / "u3.npy", np.full((4, len(LABELS)), np.nan)),
    "empty": lambda f: np.save(f / "logits" / "u3.npy", np.zeros((0, len(LABELS)))),
    "blank": lambda f: (f / "labels.txt").write_text("\n".join(LABELS[1:] + ["z"]) + "\n"),
    "refs": lambda f: (f / "refs.txt").write_text("u1 the cat sat on the mat\n"),
}
MESSAGES = {"width": "columns but the labels file has", "nan": "NaN", "empty": "no frames",
            "blank": "no CTC blank label", "refs": "no reference for utterance u2"}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_cli_bad_input_is_one_line_and_writes_nothing(files, cli, bad):  # noqa: F811
    BAD[bad](files)
    result = cli(*decode_args(files, "--out", files / "out", "--refs", files / "refs.txt"))
    one_line_error(result, MESSAGES[bad])
    assert not (files / "out").exists()
    assert not [p for p in files.iterdir() if p.name.startswith(".out")]


@pytest.mark.parametrize("out", ["logits/u1.npy", "logits", "logits/inside", "labels.txt", "."])
def test_cli_never_writes_over_or_into_an_input(files, cli, out):  # noqa: F811
    before = {p: p.stat().st_mtime_ns for p in files.rglob("*")}
    one_line_error(cli(*decode_args(files, "--out", files / out)), "--out")
    assert {p: p.stat().st_mtime_ns for p in files.rglob("*")} == before


def test_cli_refuses_a_directory_it_did_not_write(files, cli):  # noqa: F811
    (files / "mine").mkdir()
    (files / "mine" / "notes.txt").write_text("keep")
    one_line_error(cli(*decode_args(files, "--out", files / "mine")), "did not write")
    assert (files / "mine" / "notes.txt").read_text() == "keep"


def test_labels_rules(tmp_path):
    with pytest.raises(NnlmError, match="several blank"):
        Alphabet.from_labels(["<pad>", "<blank>", "a"])
    with pytest.raises(NnlmError, match="appears on lines"):
        Alphabet.from_labels(["<pad>", "a", "a"])
    with pytest.raises(NnlmError, match="not one character"):
        Alphabet.from_labels(["<pad>", "ab"])
    a = Alphabet.from_labels(["<pad>", "<s>", "</s>", "<unk>", "|", "A", "'"])
    assert a.blank == 0 and a.boundary == 4 and a.emits.tolist() == [False] * 5 + [True, True]

"""Streaming scoring (nnlm.textfile + nnlm.score_stream): the same numbers as scoring the whole text at
once, whatever the block size; one tokenizer for `nnlm score`, the Python API and the corpus reader;
bounded pieces and chunks (counted, not timed)."""
import io
import json
import random

import numpy as np
import pytest

import nnlm.score_stream as score_stream
import nnlm.textfile as textfile
from nnlm.cli import main
from nnlm.data.text_stream import token_blocks
from nnlm.data.tokenize import prompt_tokens, text_tokens
from nnlm.errors import NnlmError
from nnlm.lm import EVAL_CHUNK, LOG10_E, stream_log_probs
from nnlm.ngram.build import build_ngram
from nnlm.score_stream import ScoreStream, WordScores
from nnlm.textfile import line_pieces, read_pieces
from nnlm.use import generate, next_words, score_file, score_text, score_words

WORDS = ["w1", "w2", "w3", "w7", "zebra", "é", "日本語", "<unk>", "<p>"]
SEPS = [" ", " ", " ", "\t", "\r", "\r\n", "\n", "\n", "\n\n", "\x85", "\u2028", "\u2029", "\f", "\x0b", "\x1c",
        "\x1f", "\u3000", "\xa0", " \n", "\n \t\n"]


@pytest.fixture
def kn3(random_corpus, tmp_path):
    model = build_ngram("kn", random_corpus, 3)
    model.save(tmp_path / "kn3")
    return model


def reference(model, text: str, carry: bool = True) -> dict[int, np.ndarray]:
    """log10 P of each "\\n"-line's tokens (nnlm.data.tokenize's rule), the whole text scored at once."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    tokens = [text_tokens(line) for line in lines]
    out = {}
    if carry:
        flat = [t for ts in tokens for t in ts]
        lp = stream_log_probs(model, model.vocab.encode(flat)) * LOG10_E if flat else np.zeros(0)
        at = 0
        for number, ts in enumerate(tokens, start=1):
            if ts:
                out[number] = lp[at:at + len(ts)]
            at += len(ts)
    else:
        for number, ts in enumerate(tokens, start=1):
            if ts:
                out[number] = stream_log_probs(model, model.vocab.encode(ts)) * LOG10_E
    return out


def scored(stream: ScoreStream) -> dict[int, np.ndarray]:
    return {s.line_number: s.word_log10 for s in stream}


def assert_same(got: dict[int, np.ndarray], want: dict[int, np.ndarray]) -> None:
    assert list(got) == list(want)
    for number in want:
        np.testing.assert_allclose(got[number], want[number], rtol=0, atol=1e-12, err_msg=f"line {number}")


def random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        text = "".join(rng.choice(WORDS) + rng.choice(SEPS) for _ in range(rng.randint(0, 40)))
        texts.append(text if rng.random() < 0.7 else text.rstrip("\n"))
    texts.append("w1 " * 300 + "w2\rw3 " + "é" * 40 + " w7" + "\u2028" * 3 + "w1")  # a long line, long words
    return texts


@pytest.mark.parametrize("carry", [True, False])
def test_streamed_scores_equal_the_whole_text_scored_at_once(kn3, carry):
    # Tiny blocks cut every line, paragraph and multi-byte character at some edge: \r, \r\n, \x85,
    # \u2028, \u3000 and é / 日本語 across block edges; blank lines and lines of white space only.
    for text in random_texts(30):
        want = reference(kn3, text, carry)
        for block in ((1, 2, 5, 1 << 12) if len(text) < 500 else (13, 64)):  # the long line: fewer, larger cuts
            got = scored(ScoreStream(kn3, read_pieces(io.BytesIO(text.encode()), "t", block), carry_context=carry))
            assert_same(got, want)
        lines = text.split("\n")
        lines = lines[:-1] if lines[-1] == "" else lines
        for block in ((1, 4, 1 << 12) if len(text) < 500 else (13, 64)):  # Python strings: the same cuts
            assert_same(scored(ScoreStream(kn3, line_pieces(lines, block), carry_context=carry)), want)


def test_blank_lines_are_counted_and_lines_numbered_by_newline(kn3):
    stream = ScoreStream(kn3, read_pieces(io.BytesIO(b"w1 w2\r\n\n \t\r\n\x0c\nw3\rw1\n"), "t", 3))
    lines = list(stream)
    assert [s.line_number for s in lines] == [1, 5] and stream.blank == 3
    assert [s.tokens for s in lines] == [3, 4]  # "w3\rw1" is two paragraphs, each closed by <p>


@pytest.mark.parametrize("carry", [True, False])
@pytest.mark.parametrize("block", [4, 64, 1 << 16])
@pytest.mark.parametrize("bad_line", [b"w2 " * 40 + b"\xff w4 " + b"w1 " * 30 + b"\n",  # found in a cut piece
                                      b"w2 " * 40 + b"w1\xff\n"])  # found in the block that ends the line
def test_an_undecodable_line_is_skipped_by_number_even_after_it_was_partly_scored(kn3, carry, block, bad_line):
    good, after = b"w1 w2 w3\n", b"w3 w1\nw2\n"
    data = good + bad_line + after
    stream = ScoreStream(kn3, read_pieces(io.BytesIO(data), "t", block), carry_context=carry, skip_bad=True)
    got = scored(stream)
    # the bad line is taken back: what follows is scored as if it were blank
    want = reference(kn3, (good + b"\n" + after).decode(), carry)
    assert_same(got, want)
    assert stream.skipped == [(2, "not valid UTF-8")] and stream.blank == 0
    with pytest.raises(NnlmError, match="line 2 is not valid UTF-8"):
        list(ScoreStream(kn3, read_pieces(io.BytesIO(data), "t", block), carry_context=carry))


def test_pieces_and_chunks_are_bounded(kn3, monkeypatch):
    # A 400 kB single line read in 4 kB blocks: no piece holds more than two blocks of text, no model
    # call more than EVAL_CHUNK positions, and the scores are those of the whole line at once.
    rng = np.random.default_rng(0)
    line = " ".join(rng.choice(["w1", "w2", "w3", "zebra", "日本語"], size=80_000)) + "\n"
    pieces = list(read_pieces(io.BytesIO(line.encode()), "t", 4096))
    assert len(pieces) > 90 and max(len(p.texts[0].encode()) for p in pieces) <= 2 * 4096
    calls: list[int] = []
    log_prob, stream_log_prob = kn3.log_prob, kn3.stream_log_prob  # rows, or the query engine's stream scorer
    monkeypatch.setattr(kn3, "log_prob", lambda c, t: calls.append(len(t)) or log_prob(c, t))
    monkeypatch.setattr(kn3, "stream_log_prob", lambda s, f, n, *a: calls.append(n) or stream_log_prob(s, f, n, *a))
    monkeypatch.setattr(score_stream, "EVAL_CHUNK", 1000)
    got = scored(ScoreStream(kn3, iter(pieces)))
    assert max(calls) <= 1000 and sum(calls) == 80_001
    monkeypatch.undo()
    assert_same(got, reference(kn3, line))
    assert score_stream.EVAL_CHUNK == EVAL_CHUNK


def test_each_line_is_reported_before_the_rest_of_the_text_is_read(kn3):
    consumed = []

    def lines():
        for i in range(200):
            consumed.append(i)
            yield "w1 w2 w3 " * 20

    for s in ScoreStream(kn3, line_pieces(lines(), 500)):
        assert len(consumed) <= s.line_number + 4  # a piece holds ~500 characters: 3 or 4 lines
        assert s.word_log10.size == s.tokens


def test_the_tokenizer_agrees_between_score_the_api_and_the_corpus_reader(kn3, tmp_path, capsys):
    text = "w1 w2\rw3 w4\n w5\x85w6\u2028w7\x0cw1\n\n \u3000\nw2\r\nzebra\x1ew3\u2029 \n"
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    corpus_tokens = [t for block in token_blocks(path) for t in block]
    assert corpus_tokens == text_tokens(text)
    api = score_words(kn3, text)
    assert len(api) == len(corpus_tokens) == 20  # 11 words, 9 paragraphs
    events = list(score_file(kn3, str(path), word_events=True).events())
    assert [t for e in events if isinstance(e, WordScores) for t in e.tokens] == corpus_tokens
    assert main(["score", str(tmp_path / "kn3"), str(path), "--per-word", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"]["tokens"] == len(corpus_tokens) and out["total"]["blank"] == 2
    np.testing.assert_allclose(np.concatenate([line["word_log10"] for line in out["lines"]]), api * LOG10_E,
                               rtol=0, atol=1e-12)
    assert [line["line"] for line in out["lines"]] == [1, 2, 5, 6]
    # "the software\ris free" is 6 tokens through every face
    assert len(score_words(kn3, "w1 w2\rw3 w4")) == 6
    assert score_text(kn3, ["w1 w2\rw3 w4"]).tokens == 6


def test_cli_streams_per_word_and_json_output_with_small_blocks(kn3, tmp_path, capsys, monkeypatch):
    text = ("w1 w2 " * 500 + "\n\nw3\rw1 \u2028\n" + "w7 é " * 300 + "\n").encode() + b"\xfe\nw2\n"
    path = tmp_path / "t.txt"
    path.write_bytes(text)
    model = str(tmp_path / "kn3")
    assert main(["score", model, str(path), "--skip-bad", "--per-word"]) == 0
    whole = capsys.readouterr()
    monkeypatch.setattr(textfile, "BLOCK_BYTES", 64)
    assert main(["score", model, str(path), "--skip-bad", "--per-word"]) == 0
    small = capsys.readouterr()
    assert small.out == whole.out and "skipped line 5: not valid UTF-8" in small.err
    rows = small.out.splitlines()
    assert len(rows) == 2 * 4 + 1 and rows[1].startswith("line 1\t") and rows[-1].endswith("\tskipped 1\tblank 1")
    assert len(rows[0].split("\t")) == 1001  # one long line's words stay one row, however it was cut
    assert main(["score", model, str(path), "--skip-bad", "--per-word", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = reference(kn3, text.replace(b"\xfe", b"").decode())
    assert [line["line"] for line in out["lines"]] == [1, 3, 4, 6] == list(want)
    for line in out["lines"]:
        np.testing.assert_allclose(line["word_log10"], want[line["line"]], rtol=0, atol=1e-12)
        assert line["tokens"] == len(line["word_log10"])
    assert out["total"]["skipped"] == [5] and out["total"]["blank"] == 1


def test_score_file_reads_a_path_or_lines_in_bounded_memory(kn3, tmp_path):
    lines = ["w1 w2", "", "w3\rzebra", "w7"]
    (tmp_path / "t.txt").write_text("\n".join(lines) + "\n")
    whole = score_text(kn3, lines)
    for source in (str(tmp_path / "t.txt"), iter(lines)):
        stream = score_file(kn3, source)
        got = list(stream)
        assert [s.line_number for s in got] == [s.line_number for s in whole.lines]
        assert all(s.word_log10.size == 0 for s in got)  # words are not kept unless asked
        assert stream.log10_prob == pytest.approx(whole.log10_prob, abs=1e-12)
        assert (stream.tokens, stream.oov, stream.blank) == (whole.tokens, whole.oov, whole.blank) == (9, 1, 1)


class _WithFeatures:
    """An n-gram model posing as one that scores unknown words itself (its log_prob_text is the plain
    stream), to test the --oov-vector path's plumbing without a net."""

    def __init__(self, model):
        self.model = model

    def __getattr__(self, name):
        return getattr(self.model, name)

    def log_prob_text(self, tokens):
        return stream_log_probs(self.model, self.model.vocab.encode(tokens))


@pytest.mark.parametrize("carry", [True, False])
def test_oov_vector_path_scores_the_text_in_one_pass_and_is_capped(kn3, carry, monkeypatch):
    model = _WithFeatures(kn3)
    data = b"w1 w2\n" + b"w3 " * 50 + b"\xff\n" + b"w2 zebra w1 " * 30 + b"\r\n\nw7\n"
    got = scored(ScoreStream(model, read_pieces(io.BytesIO(data), "t", 16), carry, skip_bad=True, oov_vector=True))
    assert_same(got, reference(kn3, data.replace(b"\xff", b"").replace(b"w3 " * 50, b"").decode(), carry))
    monkeypatch.setattr(score_stream, "OOV_VECTOR_MAX_TOKENS", 50)
    with pytest.raises(NnlmError, match="--oov-vector scores .* at most 50 tokens"):
        list(ScoreStream(model, read_pieces(io.BytesIO(data), "t", 16), carry, skip_bad=True, oov_vector=True))


def test_stdin_is_streamed_like_a_file(kn3, tmp_path, capsys, monkeypatch):
    data = "w1 w2\u2028w3\n\nzebra\n".encode()
    (tmp_path / "t.txt").write_bytes(data)
    assert main(["score", str(tmp_path / "kn3"), str(tmp_path / "t.txt"), "--json"]) == 0
    from_file = capsys.readouterr().out

    class Stdin:
        buffer = io.BytesIO(data)

    monkeypatch.setattr("sys.stdin", Stdin)
    assert main(["score", str(tmp_path / "kn3"), "-", "--json"]) == 0
    assert capsys.readouterr().out == from_file


def test_prompts_are_cut_by_the_same_rule(kn3):
    assert prompt_tokens("w1\rw2 \u2028") == ["w1", "<p>", "w2"] and prompt_tokens(" \n") == []
    assert next_words(kn3, "w1\u2028w2", 3) == next_words(kn3, ["w1", "<p>", "w2"], 3)
    assert generate(kn3, "w1\x85w2", 5, seed=1) == generate(kn3, ["w1", "<p>", "w2"], 5, seed=1)


def test_json_stays_valid_when_a_long_line_is_found_undecodable_after_its_words_were_written(kn3, tmp_path, capsys,
                                                                                           monkeypatch):
    path = tmp_path / "t.txt"
    path.write_bytes(b"w1 w2\n" + b"w3 " * 100 + b"\xff\nw2\n")
    monkeypatch.setattr(textfile, "BLOCK_BYTES", 32)
    assert main(["score", str(tmp_path / "kn3"), str(path), "--skip-bad", "--per-word", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [line["line"] for line in out["lines"]] == [1, 2, 3] and out["lines"][1]["skipped"] == "not valid UTF-8"
    assert "tokens" not in out["lines"][1] and out["total"]["skipped"] == [2] and out["total"]["tokens"] == 5
    want = reference(kn3, "w1 w2\n\nw2\n")  # the stream goes on from before the bad line
    np.testing.assert_allclose(out["lines"][2]["word_log10"], want[3], rtol=0, atol=1e-12)

"""Using a model on text: score lines, list likely next words, generate. Works for any LanguageModel.

Text follows the corpus format: whitespace tokens, one paragraph per line, each line ending in
`<p>`. A file is scored as one stream (a line's first words are predicted from the end of the
previous line, as in the corpus); the stream starts after the text marker.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from nnlm.capabilities import ChoosesScoring
from nnlm.compiled_lines import quick_line_scores
from nnlm.data.corpus import Corpus
from nnlm.data.tokenize import prompt_tokens
from nnlm.data.vocab import PARAGRAPH, TEXT
from nnlm.errors import NnlmError
from nnlm.lm import LOG10_E, LanguageModel, perplexity_from_log_probs, split_log_probs, start_id, text_stream
from nnlm.score_stream import LineScore, ScoreStream
from nnlm.textfile import line_pieces, open_text, read_pieces

__all__ = ["SplitScore", "TextScore", "generate", "next_context", "next_words", "render", "render_stream", "sample",
           "score_file", "score_lines", "score_split", "score_text", "score_words", "text_perplexity", "top_words",
           "use_unnormalized"]


def use_unnormalized(model: LanguageModel) -> LanguageModel:
    """`model` scoring y[word] without the softmax sum (self-normalized neural models only): a new model
    sharing its weights (`with_scoring`); `model` itself is unchanged."""
    if not isinstance(model, ChoosesScoring):
        raise NnlmError(f"--unnormalized applies to neural models only, not to {type(model).__name__}")
    from nnlm.neural.lm.scoring import UNNORMALIZED

    return model.with_scoring(UNNORMALIZED)


def score_lines(model: LanguageModel, lines: Iterable[str], carry_context: bool = True,
                skip_bad: bool = False, oov_vector: bool = False) -> tuple[list[LineScore], list[tuple[int, str]]]:
    """Score each line; returns the scores and (line number, reason) of lines skipped as bad.

    A line is cut by nnlm.data.tokenize's rule: a "\r", "\u2028", ... inside it ends a paragraph,
    and each non-blank paragraph is closed by `<p>` (the LineScore sums them). Blank lines are
    skipped, as corpora skip them (the stream goes on across them). The lines are scored as one
    stream in bounded chunks (nnlm.score_stream); for a text too large to hold, use `score_file`.
    Words outside V are `<unk>`; with `oov_vector` (neural models) they are still scored as `<unk>`
    but enter later contexts with the paper's feature vector instead of `<unk>`'s."""
    lines = lines if isinstance(lines, list) else list(lines)
    quick = None if oov_vector else quick_line_scores(model, lines, carry_context)
    if quick is not None:  # a count-based model: its query engine, without the pieces (nnlm.compiled_lines)
        return quick[0], []
    stream = ScoreStream(model, line_pieces(lines), carry_context, skip_bad, oov_vector,
                         tokens_hint=sum(map(len, lines)) // 2)
    return list(stream), stream.skipped


def score_file(model: LanguageModel, source: str | os.PathLike | Iterable[str], carry_context: bool = True,
               skip_bad: bool = False, oov_vector: bool = False, keep_words: bool = False,
               word_events: bool = False) -> ScoreStream:
    """Score a file ('-': stdin) or an iterable of lines in bounded memory, one line at a time.

    Iterate the result for each line's `LineScore` as soon as the line is scored; its totals
    (`log10_prob`, `tokens`, `oov`, `perplexity`, `blank`, `skipped`) are the whole text's once it
    is exhausted. A file's lines are "\n"-lines, read in blocks (nnlm.textfile); an undecodable
    line raises NnlmError, or with `skip_bad` is skipped and listed in `skipped`. `keep_words`
    keeps each line's per-token log10 probabilities (memory then grows with the longest line);
    `word_events` gives them, piece by piece, as WordScores from `.events()` instead."""
    if isinstance(source, (str, os.PathLike)):
        fh, name = open_text(os.fspath(source))
        size = os.fstat(fh.fileno()).st_size if fh is not sys.stdin.buffer else 0
        pieces = read_pieces(fh, name, close=fh is not sys.stdin.buffer)
        return ScoreStream(model, pieces, carry_context, skip_bad, oov_vector, keep_words, word_events, size // 6)
    return ScoreStream(model, line_pieces(source), carry_context, skip_bad, oov_vector, keep_words, word_events)


@dataclass
class TextScore:
    """A text scored line by line, with the totals `nnlm score` prints."""
    lines: list[LineScore]
    skipped: list[tuple[int, str]]   # (line number, reason): bad lines skipped on request
    blank: int                       # blank lines, skipped as corpora skip them

    @property
    def log10_prob(self) -> float:
        return float(sum(s.log10_prob for s in self.lines))

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.lines)

    @property
    def oov(self) -> int:
        return sum(s.oov for s in self.lines)

    @property
    def perplexity(self) -> float:
        return float(10 ** (-self.log10_prob / self.tokens)) if self.tokens else float("nan")


def score_text(model: LanguageModel, lines: Iterable[str], carry_context: bool = True, skip_bad: bool = False,
               oov_vector: bool = False) -> TextScore:
    """`score_lines` with its totals and the count of blank lines skipped."""
    lines = lines if isinstance(lines, list) else list(lines)
    quick = None if oov_vector else quick_line_scores(model, lines, carry_context)
    if quick is not None:
        return TextScore(quick[0], [], quick[1])
    stream = ScoreStream(model, line_pieces(lines), carry_context, skip_bad, oov_vector,
                         tokens_hint=sum(map(len, lines)) // 2)
    scores = list(stream)
    return TextScore(scores, stream.skipped, stream.blank)


@dataclass
class SplitScore:
    """A corpus split scored as one stream (`nnlm score --split`)."""
    ids: np.ndarray
    word_log10: np.ndarray
    oov: int

    @property
    def tokens(self) -> int:
        return len(self.ids)

    @property
    def log10_prob(self) -> float:
        return float(self.word_log10.sum())

    @property
    def perplexity(self) -> float:
        return perplexity_from_log_probs(self.word_log10 / LOG10_E)


def score_split(model: LanguageModel, corpus: Corpus, split: str) -> SplitScore:
    """Every token of a split, predicted from the stream before it: the very numbers `nnlm eval` averages."""
    log_probs = split_log_probs(model, corpus, split)
    ids = corpus.split(split)
    return SplitScore(ids, log_probs * LOG10_E, int((ids == corpus.vocab.unk_id).sum()))


def score_words(model: LanguageModel, text: str, oov_vector: bool = False) -> np.ndarray:
    """Natural-log probability of each token of `text` (nnlm.data.tokenize's rule: each non-blank
    paragraph's words, then `<p>`). Words outside V are `<unk>`; `oov_vector=True` (neural models)
    gives them the paper's feature vector. A long text is scored in bounded pieces (nnlm.score_stream)."""
    scores = list(ScoreStream(model, line_pieces([text]), oov_vector=oov_vector, tokens_hint=len(text) // 2))
    if not scores:
        return np.zeros(0, dtype=np.float64)
    return scores[0].word_log10 / LOG10_E


def text_perplexity(model: LanguageModel, text: str, oov_vector: bool = False) -> float:
    """Perplexity of `text`, every token (and each line's `<p>`) counted. (For a corpus split use
    `nnlm.perplexity(model, corpus, split)`.)"""
    return perplexity_from_log_probs(score_words(model, text, oov_vector))


def next_words(model: LanguageModel, history: str | list[str], k: int = 10) -> list[tuple[str, float]]:
    """The k most likely next tokens after `history` (words, or a string of them), with their probabilities."""
    if isinstance(history, str):
        history = prompt_tokens(history)
    if not 1 <= k <= len(model.vocab):
        raise NnlmError(f"k must be between 1 and |V| = {len(model.vocab)}, got {k}")
    return top_words(model, model.distribution(next_context(model, history)[None, :]), k)[0]


def next_context(model: LanguageModel, history: list[str]) -> np.ndarray:
    """The context ids [n-1] after the tokens `history`, read from the start of a text."""
    return text_stream(np.zeros(0, dtype=np.int64), model.context_size, start_id(model),
                       model.vocab.encode(history[-model.context_size:] if model.context_size else []))


def top_words(model: LanguageModel, dist: np.ndarray, k: int) -> list[list[tuple[str, float]]]:
    """The k most probable tokens of each row of `dist` [N, |V|] as (token, probability), most probable
    first, ties in vocabulary order (what a stable sort of the whole row gives, at O(|V|) a row)."""
    kth = -np.partition(-dist, k - 1, axis=1)[:, k - 1]
    out = []
    for row, least in zip(dist, kth, strict=True):  # a loop over rows (positions asked for alternatives)
        candidates = np.flatnonzero(row >= least)
        top = candidates[np.argsort(-row[candidates], kind="stable")[:k]]
        out.append([(model.vocab.tokens[i], float(row[i])) for i in top])
    return out


def generate(model: LanguageModel, prompt: str | list[str] = "", tokens: int = 50, temperature: float = 1.0,
             top_k: int | None = None, seed: int = 0) -> list[str]:
    """Sample `tokens` tokens after `prompt` (words, or a string of them); the same seed gives the same text."""
    return list(sample(model, prompt_tokens(prompt) if isinstance(prompt, str) else prompt, tokens, temperature,
                       top_k, seed))


def sample(model: LanguageModel, prompt: list[str], tokens: int, temperature: float = 1.0,
           top_k: int | None = None, seed: int = 0) -> Iterator[str]:
    """`generate`, one token at a time as it is drawn (a long text is printed while it is made).
    The arguments are checked before the first token is drawn."""
    if not (math.isfinite(temperature) and temperature > 0):
        raise NnlmError(f"temperature must be a finite number > 0, got {temperature}")
    if top_k is not None and not 1 <= top_k <= len(model.vocab):
        raise NnlmError(f"--top-k must be between 1 and |V| = {len(model.vocab)}, got {top_k}")
    if tokens < 1:
        raise NnlmError(f"--tokens must be at least 1, got {tokens}")
    return _draw(model, list(prompt), tokens, temperature, top_k, np.random.default_rng(seed))


UNIFORM_BLOCK = 4096  # uniforms drawn at once: the numbers one draw per token would give, in the same order


def _draw(model: LanguageModel, history: list[str], tokens: int, temperature: float, top_k: int | None,
          rng: np.random.Generator) -> Iterator[str]:
    """One model call per token (each token is the next one's context: a text has no batch to form);
    the rest is vectorized: the uniforms come in blocks, and each word is drawn by inverse CDF."""
    k = model.context_size
    uniforms = np.empty(0)
    for i in range(tokens):
        if i % UNIFORM_BLOCK == 0:
            uniforms = rng.random(min(UNIFORM_BLOCK, tokens - i))
        p = model.distribution(next_context(model, history)[None, :])[0]
        word = model.vocab.tokens[draw_index(p, temperature, top_k, uniforms[i % UNIFORM_BLOCK])]
        history.append(word)
        del history[:-k - 1]  # only the last words are context: memory stays flat for any --tokens
        yield word


def draw_index(p: np.ndarray, temperature: float, top_k: int | None, uniform: float) -> int:
    """The index a uniform number in [0, 1) picks from the distribution p reshaped by temperature and top-k:
    the first whose cumulative weight exceeds it (numpy's `Generator.choice` with p, without its checks of p)."""
    if not np.isfinite(p.sum()):  # one pass: a nan or inf anywhere makes the sum non-finite
        raise NnlmError("the model gives a non-finite probability: its weights are damaged")
    if temperature == 1.0 and top_k is None:
        weights, kept = p, None
    else:
        clipped = np.maximum(p, 1e-300)
        # top-k: only the k most likely (and those tied with the k-th) get a weight, computed for them alone
        kept = None if top_k is None else np.flatnonzero(clipped >= np.partition(clipped, -top_k)[-top_k])
        logits = np.log(clipped if kept is None else clipped[kept])
        with np.errstate(over="ignore"):  # a tiny temperature sends all but the top to -inf: greedy, as meant
            logits = (logits - np.log(clipped.max())) / temperature  # <= 0, the top at 0: never nan
        weights = np.exp(logits)
    cdf = np.cumsum(weights)  # over the kept words in vocabulary order: the others would add exact zeros
    cdf /= cdf[-1]  # exactly 1 at the end, so a uniform below 1 never passes it
    index = int(np.searchsorted(cdf, uniform, side="right"))
    return index if kept is None else int(kept[index])


def render_stream(tokens: Iterable[str]) -> Iterator[str]:
    """Pieces of `render(list(tokens))`, each as soon as its token is known."""
    started = in_paragraph = False
    for tok in tokens:
        if tok in (PARAGRAPH, TEXT):
            in_paragraph = False
            if tok == TEXT:
                yield "\n\n---" if started else "---"
                started = True
        elif in_paragraph:
            yield " " + tok
        else:
            yield ("\n\n" if started else "") + tok
            started = in_paragraph = True


def render(tokens: list[str]) -> str:
    """Tokens as readable text: `<p>` ends a paragraph, `<text>` ends a text (a `---` rule)."""
    paragraphs: list[str] = []
    words: list[str] = []
    for tok in tokens:  # generated text is short: a plain loop reads best
        if tok in (PARAGRAPH, TEXT):
            paragraphs.append(" ".join(words))
            words = []
            if tok == TEXT:
                paragraphs.append("---")
        else:
            words.append(tok)
    if words:
        paragraphs.append(" ".join(words))
    return "\n\n".join(p for p in paragraphs if p)

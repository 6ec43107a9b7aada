"""Using a model on text: score lines, list likely next words, generate. Works for any LanguageModel.

Text follows the corpus format: whitespace tokens, one paragraph per line, each line ending in
`<p>`. A file is scored as one stream (a line's first words are predicted from the end of the
previous line, as in the corpus); the stream starts after the text marker.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from nnlm.capabilities import ScoresUnknownWords, Unnormalizable
from nnlm.data.corpus import Corpus
from nnlm.data.vocab import PARAGRAPH, TEXT, start_token
from nnlm.errors import NnlmError
from nnlm.lm import EVAL_CHUNK, LanguageModel, contexts, perplexity_from_log_probs, split_log_probs

LOG10_E = float(np.log10(np.e))
__all__ = ["LineScore", "SplitScore", "TextScore", "generate", "next_words", "render", "render_stream", "sample",
           "score_lines", "score_split", "score_text", "score_words", "start_token", "text_perplexity",
           "use_unnormalized"]


def line_tokens(line: str) -> list[str]:
    """A line's tokens with the closing `<p>`; a blank line has none (callers skip it, as corpora do)."""
    words = line.split()
    if not words:
        raise NnlmError("empty line: nothing to score")
    return words + [PARAGRAPH]


def stream_log_probs(model: LanguageModel, ids: np.ndarray, history: np.ndarray | None = None) -> np.ndarray:
    """Natural-log probability of every token of `ids`, preceded by `history` (or the start token)."""
    k = model.context_size
    if history is None:
        history = np.full(k, model.vocab.id(start_token(model.vocab)), dtype=np.int64)
    history = np.asarray(history, dtype=np.int64)[-k:] if k else np.zeros(0, dtype=np.int64)
    pad = model.vocab.id(start_token(model.vocab))
    full = np.concatenate([np.full(k - len(history), pad, dtype=np.int64), history, np.asarray(ids, dtype=np.int64)])
    out = np.empty(len(ids), dtype=np.float64)
    with model.long_pass(len(ids)):  # as split_log_probs: the same scores for the same tokens
        for lo in range(0, len(ids), EVAL_CHUNK):  # bounded memory however long the text
            positions = np.arange(k + lo, k + min(lo + EVAL_CHUNK, len(ids)))
            out[lo:lo + len(positions)] = model.log_prob(contexts(full, positions, k, pad), full[positions])
    return out


def require_oov_vector(model: LanguageModel) -> ScoresUnknownWords:
    """Only neural models have feature vectors to give words outside V (`NeuralLM.log_prob_text`)."""
    if not isinstance(model, ScoresUnknownWords):
        raise NnlmError(f"--oov-vector applies to neural models only, not to {type(model).__name__}")
    return model


def use_unnormalized(model: LanguageModel) -> None:
    """Score y[word] without the softmax sum from now on (self-normalized neural models only)."""
    if not isinstance(model, Unnormalizable):
        raise NnlmError(f"--unnormalized applies to neural models only, not to {type(model).__name__}")
    model.unnormalized = True


@dataclass
class LineScore:
    line_number: int
    log10_prob: float
    tokens: int        # words + the closing <p>
    oov: int
    word_log10: np.ndarray

    @property
    def perplexity(self) -> float:
        return float(10 ** (-self.log10_prob / self.tokens))


def score_lines(model: LanguageModel, lines: list[str], carry_context: bool = True,
                skip_bad: bool = False, oov_vector: bool = False) -> tuple[list[LineScore], list[tuple[int, str]]]:
    """Score each line; returns the scores and (line number, reason) of lines skipped as bad.

    Blank lines are skipped, as corpora skip them (the stream goes on across them).
    All lines are scored as one batch (chunked model calls), so a long file costs one pass.
    Words outside V are `<unk>`; with `oov_vector` (neural models) they are still scored as `<unk>`
    but enter later contexts with the paper's feature vector instead of `<unk>`'s."""
    scorer = require_oov_vector(model) if oov_vector else None
    encoded, bad = [], []
    for number, line in enumerate(lines, start=1):
        if not line.split():
            continue
        try:
            tokens = line_tokens(line)
        except NnlmError as exc:
            if not skip_bad:
                raise NnlmError(f"line {number}: {exc}") from None
            bad.append((number, str(exc)))
            continue
        encoded.append((number, tokens, model.vocab.encode(tokens), sum(1 for w in tokens if w not in model.vocab)))
    if not encoded:
        return [], bad
    if scorer is not None and carry_context:
        log_probs = scorer.log_prob_text([t for _, tokens, _, _ in encoded for t in tokens])
    elif scorer is not None:
        log_probs = np.concatenate([scorer.log_prob_text(tokens) for _, tokens, _, _ in encoded])
    elif carry_context:
        log_probs = stream_log_probs(model, np.concatenate([ids for _, _, ids, _ in encoded]))
    else:
        log_probs = np.concatenate([stream_log_probs(model, ids) for _, _, ids, _ in encoded])
    scores, at = [], 0
    for number, _, ids, oov in encoded:
        lp10 = log_probs[at:at + len(ids)] * LOG10_E
        at += len(ids)
        scores.append(LineScore(number, float(lp10.sum()), len(ids), oov, lp10))
    return scores, bad


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


def score_text(model: LanguageModel, lines: list[str], carry_context: bool = True, skip_bad: bool = False,
               oov_vector: bool = False) -> TextScore:
    """`score_lines` with its totals and the count of blank lines skipped."""
    scores, bad = score_lines(model, lines, carry_context, skip_bad, oov_vector)
    return TextScore(scores, bad, sum(1 for line in lines if not line.split()))


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
    """Natural-log probability of each token of `text` (lines = paragraphs, each ending in `<p>`).
    Words outside V are `<unk>`; `oov_vector=True` (neural models) gives them the paper's feature vector."""
    scores, _ = score_lines(model, text.splitlines(), oov_vector=oov_vector)
    if not scores:
        return np.zeros(0, dtype=np.float64)
    return np.concatenate([s.word_log10 for s in scores]) / LOG10_E


def text_perplexity(model: LanguageModel, text: str, oov_vector: bool = False) -> float:
    """Perplexity of `text`, every token (and each line's `<p>`) counted. (For a corpus split use
    `nnlm.perplexity(model, corpus, split)`.)"""
    return perplexity_from_log_probs(score_words(model, text, oov_vector))


def next_words(model: LanguageModel, history: str | list[str], k: int = 10) -> list[tuple[str, float]]:
    """The k most likely next tokens after `history` (words, or a string of them), with their probabilities."""
    if isinstance(history, str):
        history = history.split()
    if not 1 <= k <= len(model.vocab):
        raise NnlmError(f"k must be between 1 and |V| = {len(model.vocab)}, got {k}")
    ctx = _context_ids(model, history)
    dist = model.distribution(ctx[None, :])[0]
    top = np.argsort(-dist, kind="stable")[:k]
    return [(model.vocab.tokens[i], float(dist[i])) for i in top]


def _context_ids(model: LanguageModel, history: list[str]) -> np.ndarray:
    k = model.context_size
    start = model.vocab.id(start_token(model.vocab))
    ids = [model.vocab.id(w) for w in history][-k:] if k else []
    return np.array([start] * (k - len(ids)) + ids, dtype=np.int64)


def generate(model: LanguageModel, prompt: str | list[str] = "", tokens: int = 50, temperature: float = 1.0,
             top_k: int | None = None, seed: int = 0) -> list[str]:
    """Sample `tokens` tokens after `prompt` (words, or a string of them); the same seed gives the same text."""
    return list(sample(model, prompt.split() if isinstance(prompt, str) else prompt, tokens, temperature, top_k,
                       seed))


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


def _draw(model: LanguageModel, history: list[str], tokens: int, temperature: float, top_k: int | None,
          rng: np.random.Generator) -> Iterator[str]:
    k = model.context_size
    for _ in range(tokens):  # one model call per generated token: generation is sequential
        p = model.distribution(_context_ids(model, history)[None, :])[0]
        if not np.all(np.isfinite(p)):
            raise NnlmError("the model gives a non-finite probability: its weights are damaged")
        logits = np.log(np.maximum(p, 1e-300))
        with np.errstate(over="ignore"):  # a tiny temperature sends all but the top to -inf: greedy, as meant
            logits = (logits - logits.max()) / temperature  # <= 0, the top at 0: never nan at any temperature
        if top_k is not None:
            cut = np.partition(logits, -top_k)[-top_k]
            logits = np.where(logits >= cut, logits, -np.inf)
        q = np.exp(logits)
        q /= q.sum()
        word = model.vocab.tokens[int(rng.choice(len(q), p=q))]
        history.append(word)
        del history[:-k - 1]  # only the last words are context: memory stays flat for any --tokens
        yield word


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

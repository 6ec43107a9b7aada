"""`nnlm.use.score_lines` of a model with a query engine, in a few array calls: the short path that the
count-based models take, which gives exactly the numbers of the generic one (nnlm.score_stream).

Why: the generic path walks pieces of lines (it has to, for files of any size), cuts and encodes
each piece, and builds context rows for `log_prob`: ~300-480 us of fixed cost per call, 30x KenLM's
16 us for a one-line call. A list of lines is already in memory, so here it is encoded at once
(ASCII text in one compiled pass, nnlm.ngram.ascii_tokens; other text by the tokenization rule and
the vocabulary's dict), scored by the model's compiled stream scorer (`stream_log_prob`,
nnlm.capabilities.ScoresStreams: the numbers `log_prob` gives on the generic path's rows, bit for
bit), and summed per line as the generic path sums them (np.bincount, in token order). A line that
the generic path would cut into pieces (longer than nnlm.textfile.BLOCK_BYTES) is summed whole here:
its total may differ in the last bits. tests/test_compiled_lines.py holds the two paths together.
"""
from __future__ import annotations

import numpy as np

from nnlm.lm import LOG10_E, LanguageModel, start_id
from nnlm.score_stream import LineScore
from nnlm.sentence import batch_ids

OOV = -1  # the id a word outside the vocabulary is given here until it is counted (then `<unk>`'s)
FEW_LINES = 8  # up to this many lines, each is summed by a Python sum (fewer numpy calls: a one-line call's cost)


def quick_line_scores(model: LanguageModel, lines: list, carry_context: bool) -> tuple[list[LineScore], int] | None:
    """(the LineScore of each non-blank line, the number of blank lines) of `lines` scored as `score_lines`
    scores them, or None when this path does not apply (no compiled stream scorer, or an item is not a str:
    the generic path then scores or refuses them)."""
    scorer = getattr(model, "stream_log_prob", None)
    if scorer is None:
        return None
    if len(lines) == 1 and type(lines[0]) is str and lines[0].isascii():
        return _one_line(model, scorer, lines[0])
    if not all(type(line) is str for line in lines):
        return None
    ids, bounds = batch_ids(model, lines, unknown=OOV)
    since = None if carry_context else np.arange(len(ids)) - np.repeat(bounds[:-1], np.diff(bounds))
    bounds = bounds.tolist()
    k, pad, n = model.context_size, _start_id(model), len(ids)
    unknown = ids < 0 if n and ids.min() < 0 else None
    if unknown is not None:
        ids[unknown] = model.vocab.unk_id
    stream = np.empty(k + n, dtype=np.int64)
    stream[:k] = pad
    stream[k:] = ids
    log_probs = scorer(stream, k, n, pad, since)
    if log_probs is None:
        return None
    word_log10 = log_probs * LOG10_E
    scored = _lines(word_log10, bounds, unknown)
    return scored, len(lines) - len(scored)


def _one_line(model: LanguageModel, scorer, text: str) -> tuple[list[LineScore], int] | None:
    """One ASCII line (a one-line call: its fixed cost is what counts), from the start of a text whether the
    context is carried or not (nothing comes before it): a back-off model encodes and scores it in one compiled
    call; another makes its stream in one and scores it in another."""
    kept = model.__dict__.get("_ascii_lexicon")
    if kept is None:
        from nnlm.ngram.ascii_tokens import lexicon

        kept = lexicon(model)
    line = model.__dict__.get("_ascii_line")  # back-off models: encoding, scores and their sum in one call
    if line is None:
        make = getattr(model, "ascii_line_scorer", None)
        line = (make(kept, _start_id(model)) if make is not None else None) or False
        model._ascii_line = line  # kept (False: none), as the lexicon is
    if line:
        word_log10, total, oov = line(text)
        return ([LineScore(1, total, len(word_log10), oov, word_log10)], 0) if len(word_log10) else ([], 1)
    k, pad = model.context_size, _start_id(model)
    stream, oov = kept.encode_stream(text, k, pad)
    n = len(stream) - k
    if n == 0:
        return [], 1
    log_probs = scorer(stream, k, n, pad, None)
    if log_probs is None:
        return None
    log_probs *= LOG10_E  # in place: the generic path's ln P * LOG10_E, to the bit
    return [LineScore(1, sum(log_probs.tolist()), n, oov, log_probs)], 0


def _lines(word_log10: np.ndarray, bounds: list[int], unknown: np.ndarray | None) -> list[LineScore]:
    """The LineScores of the non-blank lines; each total is its words' sum in token order (np.bincount's, as
    the generic path sums a line), by a Python sum for a few lines, else one np.bincount for all."""
    lines = len(bounds) - 1
    counts = np.diff(bounds) if lines > FEW_LINES or unknown is not None else None
    rows = None if counts is None else np.repeat(np.arange(lines), counts)
    oov = [0] * lines if unknown is None else np.bincount(rows[unknown], minlength=lines).tolist()
    if lines > FEW_LINES:
        sums = np.bincount(rows, weights=word_log10, minlength=lines).tolist()
    else:
        sums = [sum(word_log10[bounds[i]:bounds[i + 1]].tolist()) for i in range(lines)]
    return [LineScore(i + 1, sums[i], bounds[i + 1] - bounds[i], oov[i], word_log10[bounds[i]:bounds[i + 1]])
            for i in range(lines) if bounds[i + 1] > bounds[i]]  # a loop over lines: the objects the caller gets


def _start_id(model: LanguageModel) -> int:
    """start_id(model), kept on the model (a one-line call should not look it up each time)."""
    kept = model.__dict__.get("_start_id")
    if kept is None:
        kept = model._start_id = start_id(model)
    return kept

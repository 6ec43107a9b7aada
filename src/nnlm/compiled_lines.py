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


def quick_line_scores(model: LanguageModel, lines: list, carry_context: bool) -> tuple[list[LineScore], int] | None:
    """(the LineScore of each non-blank line, the number of blank lines) of `lines` scored as `score_lines`
    scores them, or None when this path does not apply (no compiled stream scorer, or an item is not a str:
    the generic path then scores or refuses them)."""
    scorer = getattr(model, "stream_log_prob", None)
    if scorer is None or not all(type(line) is str for line in lines):
        return None
    ids, bounds = batch_ids(model, lines, unknown=OOV)
    k, pad, n = model.context_size, start_id(model), len(ids)
    unknown = ids == OOV
    any_unknown = unknown.any()
    if any_unknown:
        ids[unknown] = model.vocab.unk_id
    stream = np.empty(k + n, dtype=np.int64)
    stream[:k] = pad
    stream[k:] = ids
    counts = np.diff(bounds)
    since = None if carry_context else np.arange(n) - np.repeat(bounds[:-1], counts)
    log_probs = scorer(stream, k, n, pad, since)
    if log_probs is None:
        return None
    word_log10 = log_probs * LOG10_E
    rows = np.repeat(np.arange(len(lines)), counts)
    sums = np.bincount(rows, weights=word_log10, minlength=len(lines))
    oov = np.bincount(rows[unknown], minlength=len(lines)) if any_unknown else np.zeros(len(lines), dtype=np.int64)
    scored = np.flatnonzero(counts)
    lo, hi = bounds[:-1].tolist(), bounds[1:].tolist()
    out = [LineScore(i + 1, float(sums[i]), hi[i] - lo[i], int(oov[i]), word_log10[lo[i]:hi[i]])
           for i in scored.tolist()]  # a loop over lines: the objects the caller gets
    return out, len(lines) - len(out)

"""Word error rate of transcripts against `uttid words` references (edit distance in words)."""
from __future__ import annotations

from nnlm.errors import NnlmError
from nnlm.rescore.tuning import read_references, word_errors

__all__ = ["corpus_wer", "read_references", "word_errors"]


def corpus_wer(transcripts: dict[str, list[str]], refs: dict[str, list[str]]) -> tuple[int, int]:
    """(word errors, reference words) over all utterances; every utterance needs a reference."""
    missing = [uid for uid in transcripts if uid not in refs]
    if missing:
        raise NnlmError(f"no reference for utterance {missing[0]}"
                        + (f" and {len(missing) - 1} more" if len(missing) > 1 else "") + " in the references file")
    errors = sum(word_errors(words, refs[uid]) for uid, words in transcripts.items())
    return errors, sum(len(refs[uid]) for uid in transcripts)

"""Counted nouns in messages ("1 pass", "12 passes"): a log line or error must read right for a count of one.

English's regular plural is enough for the nouns nnlm counts (epoch, pass, trial, ...); any other (a soft
"ch" as in batch, an irregular noun) is given by the caller."""
from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`count` and the noun in the number it takes: counted(1, "pass") = "1 pass", counted(3, "pass") = "3 passes"."""
    if count == 1:
        return f"{count} {noun}"
    if plural is None:
        plural = noun + ("es" if noun.endswith(("s", "sh", "x", "z")) else "s")  # "ch": epochs, but batches
    return f"{count} {plural}"

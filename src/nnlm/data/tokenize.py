"""The one rule that turns text into tokens, used by every face of nnlm.

The corpus reader (training text), `nnlm score`, the Python API (`nnlm.text_perplexity`, ...),
`nnlm rescore` and `nnlm serve` all call these functions, so one text gives the same tokens, and
so the same numbers, whichever way it reaches a model:

- a paragraph is a line as Python's `str.splitlines` cuts them: besides "\\n" and "\\r\\n", a lone
  "\\r", "\\v", "\\f", "\\x1c"-"\\x1e", "\\x85", "\\u2028" and "\\u2029" end a line too;
- a paragraph's tokens are its words as `str.split()` cuts them (any Unicode white space),
  followed by the paragraph marker `<p>`;
- a blank paragraph (white space only) has no tokens at all.

The corpus reader set this rule first (it read every training corpus this way); the other faces
followed it, since a model's numbers mean something only for text cut as its training text was.
"""
from __future__ import annotations

from nnlm.data.vocab import PARAGRAPH
from nnlm.errors import NnlmError


def paragraphs(text: str) -> list[list[str]]:
    """The words of each non-blank paragraph of `text`, without the `<p>` markers."""
    return [words for line in text.splitlines() if (words := line.split())]


def text_tokens(text: str) -> list[str]:
    """All tokens of `text`: each non-blank paragraph's words, then `<p>`."""
    lines = [line for line in text.splitlines() if not line.isspace() and line]
    if not lines:
        return []
    return f" {PARAGRAPH} ".join(lines).split() + [PARAGRAPH]


def tokens_to_score(text: str) -> list[str]:
    """`text_tokens` of a text given to be scored (a line, a request's text): NnlmError when it has no words."""
    tokens = text_tokens(text)
    if not tokens:
        raise NnlmError("the text has no words: nothing to score")
    return tokens


def prompt_tokens(text: str) -> list[str]:
    """A text to continue (a prompt, a history): its tokens without the `<p>` that would close it, as its last
    paragraph is still being written ("a\rb" is a, <p>, b)."""
    return text_tokens(text)[:-1]

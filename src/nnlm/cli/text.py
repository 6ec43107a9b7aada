"""`nnlm generate` and `nnlm next`: sample text from a model, or list its likely next words."""
from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from nnlm.cli import arg_types as T
from nnlm.cli.common import THREADS_HELP, add_json_option, emit, govern_threads
from nnlm.errors import NnlmError

if TYPE_CHECKING:
    from nnlm.progress import Silent
    from nnlm.threads import ThreadGovernor


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="sample text from a model")
    p.add_argument("model", help="a saved model (n-gram directory, ARPA file or neural run directory)")
    p.add_argument("--prompt", default="", help="words to continue (default: none, start a new text)")
    p.add_argument("--tokens", type=T.int_range(1, 10**9), default=50, help="tokens to draw (default 50)")
    p.add_argument("--temperature", type=T.float_range(0.0, 1e6, lo_open=True), default=1.0,
                   help="divides the log-probabilities: below 1 sharper, above 1 flatter (default 1.0)")
    p.add_argument("--top-k", type=T.positive_int, default=None,
                   help="draw only among the k most likely words (default: all words)")
    p.add_argument("--seed", type=T.seed, default=0, help="random seed: the same seed gives the same text (default 0)")
    p.add_argument("--threads", type=T.threads, default=None, help=THREADS_HELP)
    p.add_argument("--no-progress", action="store_true",
                   help="no progress on stderr (default: shown while the text goes to a file or pipe, not to a "
                        "terminal, where it is its own progress: tokens/s and the time left)")
    p.set_defaults(handler=run_generate)

    p = sub.add_parser("next", help="the most likely next words after a context")
    p.add_argument("model", help="a saved model (n-gram directory, ARPA file or neural run directory)")
    p.add_argument("context", help="the preceding words")
    p.add_argument("-k", type=T.positive_int, default=10, help="how many words to list (default 10)")
    add_json_option(p)
    p.set_defaults(handler=run_next)


def run_generate(args: argparse.Namespace) -> int:
    from nnlm.data.tokenize import prompt_tokens
    from nnlm.loading import load
    from nnlm.progress import is_terminal, show_progress
    from nnlm.use import render_stream, sample

    model = load(args.model)
    prompt = prompt_tokens(args.prompt)  # nnlm.data.tokenize's rule, as every face
    if prompt and all(w not in model.vocab for w in prompt):
        raise NnlmError("every word of the prompt is outside the model's vocabulary")
    governor = govern_threads(args)  # one context per call: extra threads only wait on each other under load
    tokens = sample(model, prompt, args.tokens, args.temperature, args.top_k, args.seed)
    with show_progress(args.tokens, "generating", "tok",
                       enabled=not args.no_progress and not is_terminal(sys.stdout)) as bar:
        for i, piece in enumerate(render_stream(itertools.chain(prompt, drawn(tokens, bar, governor)))):
            sys.stdout.write(piece)  # printed as it is drawn
            if i % 64 == 63:
                sys.stdout.flush()
    print()
    return 0


def drawn(tokens: Iterator[str], bar: Silent, governor: ThreadGovernor | None) -> Iterator[str]:
    """The tokens as they are drawn, counted on the progress display; the thread count re-checked as it goes."""
    for i, token in enumerate(tokens):
        yield token
        bar.update(1)
        if governor is not None and i % 64 == 63:
            governor.check()


def run_next(args: argparse.Namespace) -> int:
    from nnlm import use
    from nnlm.loading import load

    model = load(args.model)
    ranked = use.next_words(model, args.context, args.k)  # a string: cut by nnlm.data.tokenize's rule
    emit(args, {"context": args.context, "next": [{"word": w, "p": p} for w, p in ranked]},
         [f"{p:.5f}  {w}" for w, p in ranked])
    return 0

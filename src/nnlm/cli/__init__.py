"""The `nnlm` command line: one module per command (or small family), each with its parser next to
its handler; `main` (nnlm.cli.main) builds the parser and turns errors into one line and an exit code."""
from nnlm.cli.main import build_parser, main

__all__ = ["build_parser", "main"]

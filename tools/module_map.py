"""The module maps of the docs, generated from the modules' own docstrings, so that they cannot drift from the code.

docs/architecture.md's map of src/nnlm and DEVELOPERS.md's list of benchmarks/ stand between two marker lines;
each module is one entry, described by the first sentence of its docstring (cut at MAX_SUMMARY characters).
`python tools/module_map.py` rewrites both blocks; `--check` only says whether they are stale (exit 1), as
tests/test_module_map.py does.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEGIN = "<!-- module map: generated from the docstrings by tools/module_map.py; edit the docstrings, not this -->"
END = "<!-- end of the module map -->"
MAX_SUMMARY = 170  # characters of a docstring's first sentence, at most
NAME_COLUMN = 30  # where the descriptions start
WIDTH = 118
SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)\.(?=\s|$)")


def summary(path: Path) -> str:
    """The first sentence of the module's docstring ("" without one), cut at a word before MAX_SUMMARY."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    end = SENTENCE_END.search(paragraph)
    sentence = paragraph[:end.end()] if end else paragraph
    if len(sentence) <= MAX_SUMMARY:
        return sentence
    return sentence[:sentence.rfind(" ", 0, MAX_SUMMARY - 1)].rstrip(",;:(") + " …"


def entry(name: str, depth: int, text: str) -> list[str]:
    """One module's lines: its name, then its summary wrapped in the description column."""
    head = "  " * depth + name
    lines = textwrap.wrap(text, WIDTH - NAME_COLUMN) or [""]
    if len(head) >= NAME_COLUMN - 1:  # a long name: the description starts on the next line
        return [head] + [" " * NAME_COLUMN + line for line in lines if line]
    return [(head.ljust(NAME_COLUMN) + lines[0]).rstrip()] + [" " * NAME_COLUMN + line for line in lines[1:]]


def tree(directory: Path, depth: int = 1) -> list[str]:
    """Every module below `directory` (packages after the modules, each opened by its __init__.py)."""
    out: list[str] = []
    for path in sorted(directory.glob("*.py"), key=lambda p: (p.name != "__init__.py", p.name)):
        out += entry(path.name, depth, summary(path))
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        out.append("  " * depth + sub.name + "/")
        out += tree(sub, depth + 1)
    return out


def module_map(root: Path = ROOT) -> str:
    """The block of docs/architecture.md: src/nnlm, every module."""
    return "\n".join(["```", "src/nnlm/", *tree(root / "src" / "nnlm"), "```"])


def benchmark_map(root: Path = ROOT) -> str:
    """The block of DEVELOPERS.md: benchmarks/, every script."""
    return "\n".join(["```", "benchmarks/", *tree(root / "benchmarks"), "```"])


TARGETS = {"docs/architecture.md": module_map, "DEVELOPERS.md": benchmark_map}


def with_block(text: str, block: str, where: str) -> str:
    """`text` with the part between the markers replaced by `block`."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"{where}: needs one line {BEGIN!r} and, after it, one line {END!r}")
    before, rest = text.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    return f"{before}{BEGIN}\n{block}\n{END}{after}"


def stale(root: Path = ROOT) -> list[str]:
    """The documents whose block is not what the modules' docstrings give now."""
    return [name for name, make in TARGETS.items()
            if (text := (root / name).read_text(encoding="utf-8")) != with_block(text, make(root), name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say which maps are stale (exit 1 if any)")
    args = parser.parse_args(argv)
    if args.check:
        out = stale()
        for name in out:
            print(f"{name}: the module map is stale; run python tools/module_map.py", file=sys.stderr)
        return 1 if out else 0
    for name, make in TARGETS.items():
        path = ROOT / name
        text = path.read_text(encoding="utf-8")
        new = with_block(text, make(), name)
        if new != text:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(new, encoding="utf-8")
            tmp.replace(path)  # atomic: a reader sees the old document or the new one
            print(f"rewrote the module map in {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

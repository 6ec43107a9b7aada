"""A real English text corpus with a natural vocabulary, built from Debian documentation packages (issue 47).

Why: nnlm's nets must be measured against Kneser-Ney on real text of several million tokens with a natural
vocabulary (>= 100k word types seen twice), and the machine reaches only package registries. Install the
packages first (as root):

    apt-get install -y linux-doc-6.1 python3.11-doc dict-gcide wordnet-base

    python benchmarks/real_text_corpus.py OUT_FILE [--sources linux-doc python-doc gcide wordnet]

Sources (the installed files are read; nothing is fetched):
  linux-doc   the kernel's Sphinx HTML (/usr/share/doc/linux-doc-6.1/html): one document per page;
  python-doc  Python 3.11's Sphinx HTML (/usr/share/doc/python3.11/html): one document per page;
  gcide       the GNU Collaborative International Dictionary of English (Webster 1913 and additions): the
              definitions, quotations and etymologies, without headwords and pronunciations; one document per
              two-letter headword prefix;
  wordnet     WordNet 3.x glosses and their example sentences, one document per 500 synsets.
Only running text is kept: of the HTML, the page's main part, without <pre>, <code> blocks (Sphinx's
div.highlight), tables, scripts, styles, navigation and C/Python signatures (dt.sig); inline code inside a
sentence is kept as the word it is. Its paragraphs (p, li, dd, headings, ...) become lines.

Normalisation: NFKC, curly quotes made straight; tokens are words (letters, digits, '_', joined by inner ' - . /:
"don't", "e.g", "os.path", "and/or") and punctuation runs ("--", "...", "(") as separate tokens, roughly as
Brown splits them. Case is kept, as in the project's Brown protocol (bengio2003). A line is dropped when it has
fewer than MIN_TOKENS tokens or when fewer than half of them are plain words (tables, listings, addresses), and
when the same line (after tokenization) was already written: docs repeat boilerplate.

Order, and so held-out: the default --heldout takes valid and test from the END of the file, so the end must be a
fair mix. Documents are ordered within each source by the SHA-256 of their name (a fixed order that is random with
respect to topic), then the sources are merged in proportion: a document's key is the fraction of its source's
tokens written before its middle, and documents are written in key order. Every stretch of the file, the last 10%
included, then holds each source in proportion to its size, and the held-out documents are a random sample of
each source's. The output is byte-identical run to run (gzip written with mtime 0 and no name).
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
from nnlm.errors import NnlmError  # noqa: E402
from nnlm.io import atomic_path  # noqa: E402
from nnlm.output_guard import guard_outputs  # noqa: E402

APT_COMMAND = "apt-get install -y linux-doc-6.1 python3.11-doc dict-gcide wordnet-base"
MIN_TOKENS = 5
MIN_WORD_SHARE = 0.5
WORDNET_CHUNK = 500
SOURCES = {  # name: (package, installed path read)
    "linux-doc": ("linux-doc-6.1", Path("/usr/share/doc/linux-doc-6.1/html")),
    "python-doc": ("python3.11-doc", Path("/usr/share/doc/python3.11/html")),
    "gcide": ("dict-gcide", Path("/usr/share/dictd/gcide.dict.dz")),
    "wordnet": ("wordnet-base", Path("/usr/share/wordnet")),
}

# ---------------------------------------------------------------- tokenization and line filtering
TOKEN = re.compile(r"\w+(?:['./:\-]\w+)*|([^\w\s])\1*")
WORD = re.compile(r"[^\W\d_]+(?:['\-][^\W\d_]+)*")
QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00b6": " "})


def tokenize(text: str) -> list[str]:
    """The tokens of one paragraph: words (inner ' - . / : kept) and runs of one punctuation mark."""
    text = unicodedata.normalize("NFKC", text).translate(QUOTES)
    return [m.group(0) for m in TOKEN.finditer(text)]


def is_prose(tokens: list[str]) -> bool:
    """Long enough, and at least half of it plain words (not a table row, a listing or a list of names)."""
    if len(tokens) < MIN_TOKENS:
        return False
    return sum(1 for t in tokens if WORD.fullmatch(t)) >= MIN_WORD_SHARE * len(tokens)


# ---------------------------------------------------------------- HTML (Sphinx pages)
BLOCK_TAGS = {"p", "li", "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6", "div", "section", "blockquote",
              "ul", "ol", "dl", "td", "th", "tr", "br", "caption", "figcaption", "article", "aside"}
SKIP_TAGS = {"pre", "script", "style", "table", "nav", "footer", "header", "form", "math", "svg", "button"}
SKIP_CLASSES = {"highlight", "sig", "headerlink", "sphinxsidebar", "related", "footer", "literal-block",
                "rst-footer-buttons", "wy-nav-side", "toctree-wrapper"}
SKIP_ROLES = {"navigation", "contentinfo", "search"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _MainText(HTMLParser):
    """The paragraphs of a page's role="main" element, skipping code blocks, tables and page furniture.

    A stack of open elements says whether the text is inside the main part and inside something skipped; an
    end tag closes up to its matching open tag (so an unclosed <p> or <li> does not derail it)."""

    def __init__(self, whole_page: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, skipped, in main)
        self.whole_page = whole_page
        self.buffer: list[str] = []
        self.paragraphs: list[str] = []

    def _flush(self) -> None:
        text = " ".join("".join(self.buffer).split())
        if text:
            self.paragraphs.append(text)
        self.buffer = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in BLOCK_TAGS:
            self._flush()
        if tag in VOID_TAGS:
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        skipped, main = self.stack[-1][1:] if self.stack else (False, self.whole_page)
        skip = (tag in SKIP_TAGS or a.get("role") in SKIP_ROLES or bool(classes & SKIP_CLASSES)
                or any(c.startswith("highlight-") for c in classes))
        self.stack.append((tag, skipped or skip, main or a.get("role") == "main"))

    def handle_endtag(self, tag: str) -> None:
        if tag in BLOCK_TAGS:
            self._flush()
        if any(t == tag for t, _, _ in self.stack):
            while self.stack and self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1][2] and not self.stack[-1][1]:
            self.buffer.append(data)


def html_paragraphs(html: str) -> list[str]:
    """The running-text paragraphs of a Sphinx HTML page (of the whole body when it has no role="main")."""
    parser = _MainText(whole_page='role="main"' not in html)
    parser.feed(html)
    parser.close()
    parser._flush()
    return parser.paragraphs


SPHINX_SKIP = {"_sources", "_static", "_images", "_downloads", "genindex.html", "search.html",
               "py-modindex.html", "genindex-all.html"}


def sphinx_documents(root: Path) -> Iterator[tuple[str, list[str]]]:
    """(relative path, paragraphs) of every page under a Sphinx HTML tree, indexes and sources skipped."""
    for path in sorted(root.rglob("*.html")):
        rel = path.relative_to(root)
        if SPHINX_SKIP & set(rel.parts) or rel.name.startswith("genindex"):
            continue
        yield str(rel), html_paragraphs(path.read_text(encoding="utf-8", errors="replace"))


# ---------------------------------------------------------------- GCIDE (dictd text)
SOURCE_NOTE = re.compile(r"^\s*\[[^\]\n]*\]\s*$")  # "[1913 Webster]", "[PJC]" alone on a line
HEADWORD = re.compile(r"^\S[^\\\n]*\\[^\\\n]*\\\s*(?:\([^)\n]*\)?)?,?")  # Word \Syl*la*bles\ (pron),
ACCENTED = re.compile(r"\[(?:[=~'\"`.\-]([A-Za-z])|([A-Za-z])\^)\]")
LIGATURE = re.compile(r"\[(ae|oe|AE|OE)\]")
BRACED = re.compile(r"\{([^{}]*)\}")


def gcide_clean(text: str) -> str:
    """Dictionary markup out: {cross refs} and syllable marks, [a^]-style letters, the headword and its
    pronunciation at the start of an entry."""
    text = HEADWORD.sub("", text)
    text = ACCENTED.sub(lambda m: m.group(1) or m.group(2), LIGATURE.sub(r"\1", text))
    return BRACED.sub(lambda m: re.sub(r"[*\"`]", "", m.group(1)), text)


def gcide_entries(text: str) -> Iterator[tuple[str, list[str]]]:
    """(headword, paragraphs) of each entry: an entry starts at an unindented line; a paragraph ends at a
    blank line or a source note such as [1913 Webster]."""
    head, paras, lines = "", [], []
    for line in text.splitlines():
        if line and not line[0].isspace():  # a new entry
            if lines:
                paras.append(" ".join(lines))
            if head and paras:
                yield head, [gcide_clean(p) for p in paras]
            head, paras, lines = line.split("\\")[0].strip(), [], [line]
        elif not line.strip() or SOURCE_NOTE.match(line):
            if lines:
                paras.append(" ".join(lines))
            lines = []
        else:
            lines.append(line.strip())
    if lines:
        paras.append(" ".join(lines))
    if head and paras:
        yield head, [gcide_clean(p) for p in paras]


def gcide_documents(path: Path) -> Iterator[tuple[str, list[str]]]:
    """One document per two-letter headword prefix (lower-cased), the database's own 00-database entries out."""
    groups: dict[str, list[str]] = {}
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
        for head, paras in gcide_entries(fh.read()):
            if not head.startswith("00-database"):
                groups.setdefault(head[:2].lower(), []).extend(paras)
    yield from sorted(groups.items())


# ---------------------------------------------------------------- WordNet
def wordnet_gloss(line: str) -> list[str]:
    """The gloss of one data.* line (after ' | '), split into its definition and its quoted examples."""
    if line.startswith("  ") or " | " not in line:
        return []  # the licence header, or a line without a gloss
    parts = [p.strip() for p in line.split(" | ", 1)[1].split(";")]
    return [p.strip('"').strip() for p in parts if p.strip('"').strip()]


def wordnet_documents(root: Path) -> Iterator[tuple[str, list[str]]]:
    """One document per WORDNET_CHUNK synsets of data.noun, data.verb, data.adj, data.adv."""
    for pos in ("adj", "adv", "noun", "verb"):
        glosses = [wordnet_gloss(line) for line in (root / f"data.{pos}").read_text(
            encoding="utf-8", errors="replace").splitlines()]
        glosses = [g for g in glosses if g]
        for i in range(0, len(glosses), WORDNET_CHUNK):
            yield f"{pos}/{i // WORDNET_CHUNK:04d}", [p for g in glosses[i:i + WORDNET_CHUNK] for p in g]


READERS = {"linux-doc": sphinx_documents, "python-doc": sphinx_documents, "gcide": gcide_documents,
           "wordnet": wordnet_documents}


# ---------------------------------------------------------------- assembling the corpus
def source_documents(name: str, path: Path) -> list[tuple[str, list[list[str]]]]:
    """A source's documents as token lists of their prose lines, in SHA-256-of-name order; empty ones out."""
    docs = []
    for doc_name, paras in READERS[name](path):
        lines = [tokens for p in paras if is_prose(tokens := tokenize(p))]
        if lines:
            docs.append((doc_name, lines))
    return sorted(docs, key=lambda d: hashlib.sha256(f"{name}/{d[0]}".encode()).hexdigest())


def interleave(sources: dict[str, list[tuple[str, list[list[str]]]]]) -> list[tuple[str, list[list[str]]]]:
    """All documents, each source's spread evenly: sorted by the share of its source's tokens before its middle."""
    keyed = []
    for name, docs in sorted(sources.items()):
        total = sum(len(t) for _, lines in docs for t in lines) or 1
        before = 0
        for doc_name, lines in docs:
            size = sum(len(t) for t in lines)
            keyed.append(((before + size / 2) / total, name, doc_name, lines))
            before += size
    keyed.sort(key=lambda k: k[:3])
    return [(name, lines) for _, name, _, lines in keyed]


def unique_lines(docs: list[tuple[str, list[list[str]]]]) -> Iterator[tuple[str, str]]:
    """(source, line) of every line not already seen, in order."""
    seen: set[str] = set()
    for name, lines in docs:
        for tokens in lines:
            line = " ".join(tokens)
            if line not in seen:
                seen.add(line)
                yield name, line


def write_corpus(out: Path, lines: list[str]) -> None:
    """`lines` to `out` atomically; gzip (mtime 0, no name: the same bytes every run) if it ends in .gz."""
    data = ("\n".join(lines) + "\n").encode("utf-8")
    with atomic_path(out) as tmp:
        if out.name.endswith(".gz"):
            with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                gz.write(data)
        else:
            tmp.write_bytes(data)


def summary(written: list[tuple[str, str]]) -> dict:
    """Sizes and types; per source, its tokens in all and in the last 10% of the lines (where held-out is)."""
    counts: Counter[str] = Counter()
    per_source: Counter[str] = Counter()
    tail: Counter[str] = Counter()
    for i, (name, line) in enumerate(written):
        tokens = line.split()
        counts.update(tokens)
        per_source[name] += len(tokens)
        if i >= 0.9 * len(written):
            tail[name] += len(tokens)
    return {"tokens": sum(per_source.values()), "lines": len(written), "word_types": len(counts),
            "word_types_seen_2_or_more": sum(1 for c in counts.values() if c >= 2),
            "tokens_per_source": dict(sorted(per_source.items())),
            "tokens_per_source_last_10pct_of_lines": dict(sorted(tail.items())),
            "note": "tokens exclude the <p> nnlm adds at each line end (one per line)"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path, help="the corpus file to write (.gz: gzip-compressed)")
    p.add_argument("--sources", nargs="+", choices=sorted(SOURCES), default=list(SOURCES),
                   help="which installed packages to read (default: all)")
    p.add_argument("--force", action="store_true", help="replace an existing OUT not written by nnlm")
    args = p.parse_args(argv)
    try:
        missing = [SOURCES[s][0] for s in args.sources if not SOURCES[s][1].exists()]
        if missing:
            raise NnlmError(f"package(s) {' '.join(missing)} not installed: run `{APT_COMMAND}` first")
        guard_outputs(files=[("OUT", args.out)], force=args.force)
        sources = {s: source_documents(s, SOURCES[s][1]) for s in args.sources}
        written = list(unique_lines(interleave(sources)))
        write_corpus(args.out, [line for _, line in written])
    except NnlmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary(written), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

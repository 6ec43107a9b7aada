"""The modules of src/nnlm import each other without circles: arrows point from the commands down to
the interface, never back (function-level imports count too)."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def module_names() -> dict[str, Path]:
    names = {}
    for path in sorted((SRC / "nnlm").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under `if TYPE_CHECKING:` (imports for type hints only run no code)."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


def nnlm_imports(name: str, path: Path, modules: dict[str, Path], nodes=runtime_nodes) -> set[str]:
    """The nnlm modules `name` imports anywhere in its body (`from pkg import sub` counts as pkg.sub); `nodes`
    picks the nodes that count (`ast.walk`: type-only imports too)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path [a, b, ..., a], or None (depth-first search, three colours)."""
    colour = dict.fromkeys(graph, 0)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if colour[nxt] == 1:
                return stack[stack.index(nxt):] + [nxt]
            if colour[nxt] == 0 and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        colour[node] = 2
        return None

    for start in sorted(graph):
        if colour[start] == 0 and (cycle := visit(start)):
            return cycle
    return None


def test_the_cycle_finder_finds_a_circle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_relative_and_submodule_imports_are_resolved(tmp_path):
    pkg = tmp_path / "nnlm" / "p"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\nfrom .b import thing\n")
    (pkg / "a.py").write_text("def f():\n    from nnlm.p.b import thing\n")
    (pkg / "b.py").write_text("thing = 1\n")
    modules = {"nnlm.p": pkg / "__init__.py", "nnlm.p.a": pkg / "a.py", "nnlm.p.b": pkg / "b.py"}
    assert nnlm_imports("nnlm.p", pkg / "__init__.py", modules) == {"nnlm.p.a", "nnlm.p.b"}
    assert nnlm_imports("nnlm.p.a", pkg / "a.py", modules) == {"nnlm.p.b"}


def test_src_has_no_import_cycle():
    modules = module_names()
    graph = {name: nnlm_imports(name, path, modules) for name, path in modules.items()}
    assert graph["nnlm.cli"], "the graph found no import at all: the parser is broken"
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


@pytest.mark.parametrize("name", sorted(module_names()))
def test_every_module_imports(name):
    if name == "nnlm.__main__":
        pytest.skip("runs the command line when imported")
    importlib.import_module(name)


def test_the_model_families_meet_only_through_shared_modules():
    """nnlm.neural and nnlm.ngram import nothing of each other (function-level imports count too), and the word
    classes both use (nnlm.wordclasses) import neither: what they share sits below both."""
    modules = module_names()
    graph = {name: nnlm_imports(name, path, modules) for name, path in modules.items()}

    def crossing(family: str, others: tuple[str, ...]) -> dict[str, set[str]]:
        found = {name: {m for m in graph[name] if m.startswith(others)} for name in graph
                 if name == family or name.startswith(family + ".")}
        return {name: hits for name, hits in found.items() if hits}

    assert not crossing("nnlm.neural", ("nnlm.ngram",))
    assert not crossing("nnlm.ngram", ("nnlm.neural",))
    assert not crossing("nnlm.wordclasses", ("nnlm.neural", "nnlm.ngram"))


TRAIN_MODULE_BUDGET = 45  # nnlm modules a tiny single-process `nnlm train` may load (issue 49's bound)


def test_a_tiny_train_loads_only_what_it_runs(tmp_path):
    """`nnlm train` of a tiny 3-split directory (n = 3, 1 epoch, random rows) loads no n-gram model, no word
    clustering, no parallel training and no other command's module: at most TRAIN_MODULE_BUDGET of nnlm's.
    (The default `--init-features auto` fits a class and a word trigram to choose the rows: it uses n-gram
    models, and loads them.)"""
    import subprocess
    import sys

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for split, lines in (("train", 60), ("valid", 8), ("test", 8)):
        (corpus / f"{split}.txt").write_text("".join(f"w{i % 7} w{i % 5} w{i % 3} x\n" for i in range(lines)))
    probe = ("import sys\nfrom nnlm.cli.main import main\n"
             f"code = main(['train', '--corpus', {str(corpus)!r}, '--out', {str(tmp_path / 'run')!r}, "
             "'--order', '3', '--epochs', '1', '--init-features', 'random', '--no-progress'])\n"
             "print(code, ' '.join(sorted(m for m in sys.modules if m == 'nnlm' or m.startswith('nnlm.'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    code, names = out.strip().splitlines()[-1].split(" ", 1)
    loaded = names.split()
    assert code == "0"
    unwanted = [m for m in loaded if m.startswith(("nnlm.ngram", "nnlm.wordclasses", "nnlm.neural.parallel",
                                                    "nnlm.reproduce", "nnlm.decode", "nnlm.serve", "nnlm.rescore"))]
    assert not unwanted
    assert len(loaded) <= TRAIN_MODULE_BUDGET, f"{len(loaded)} modules: {loaded}"

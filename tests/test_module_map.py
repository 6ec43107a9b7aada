"""docs/architecture.md's map of src/nnlm and DEVELOPERS.md's list of benchmarks/ are generated from the modules'
docstrings (tools/module_map.py): every module is in its map, and the committed maps are what the docstrings
give now. After adding a module or changing a docstring's first sentence, run `python tools/module_map.py`."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tool():
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "tools" / "module_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed_block(document: str, tool) -> str:
    text = (ROOT / document).read_text(encoding="utf-8")
    return text.split(tool.BEGIN, 1)[1].split(tool.END, 1)[0]


def test_every_module_is_in_its_map():
    mm = tool()
    for document, folder in (("docs/architecture.md", ROOT / "src" / "nnlm"), ("DEVELOPERS.md", ROOT / "benchmarks")):
        lines = committed_block(document, mm).splitlines()
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).parts  # the map indents each folder level by two spaces
            for depth, part in enumerate(parts, start=1):
                head = "  " * depth + (part if depth == len(parts) else part + "/")
                assert any(line == head or line.startswith(head + " ") for line in lines), \
                    f"{document} lacks {path.relative_to(ROOT)}: run python tools/module_map.py"


def test_the_committed_maps_are_not_stale():
    assert tool().stale(ROOT) == [], "run python tools/module_map.py (the maps are generated from the docstrings)"


def test_a_summary_is_the_first_sentence_cut_at_a_word(tmp_path):
    mm = tool()
    short = tmp_path / "short.py"
    short.write_text('"""One job, as Bengio et al. (2003) did it. More detail\nhere."""\n')
    assert mm.summary(short) == "One job, as Bengio et al. (2003) did it."
    long = tmp_path / "long.py"
    long.write_text('"""' + "word " * 100 + '"""\n')
    cut = mm.summary(long)
    assert cut.endswith(" …") and len(cut) <= mm.MAX_SUMMARY + 2 and "wor " not in cut + " "
    (tmp_path / "none.py").write_text("x = 1\n")
    assert mm.summary(tmp_path / "none.py") == ""

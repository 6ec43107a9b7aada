"""src/nnlm/reproduce has no import ring, counting every import: at the top, inside functions, and those under
`if TYPE_CHECKING:` (a ring of type hints is a ring a reader walks: job -> net_rows -> job). The rows take the
call (`job.Job`) and the section (`section.Section`); the modules that run the rows (`nnlm.reproduce`,
`beyond`) import them, never the other way round."""
from __future__ import annotations

import ast

from test_import_graph import find_cycle, module_names, nnlm_imports


def every_import(name, path, modules) -> set[str]:
    return nnlm_imports(name, path, modules, nodes=ast.walk)


def test_a_type_only_ring_is_found(tmp_path):
    pkg = tmp_path / "nnlm" / "p"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "job.py").write_text("def run():\n    from nnlm.p import rows\n")
    hints = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nnlm.p.job import Job\n"
    (pkg / "rows.py").write_text(hints)
    modules = {f"nnlm.p.{p.stem}": p for p in pkg.glob("[!_]*.py")}
    graph = {name: every_import(name, path, modules) for name, path in modules.items()}
    assert find_cycle(graph) == ["nnlm.p.job", "nnlm.p.rows", "nnlm.p.job"]
    assert nnlm_imports("nnlm.p.rows", pkg / "rows.py", modules) == set()  # the runtime graph has no ring here


def test_reproduce_has_no_import_ring_type_hints_included():
    modules = {name: path for name, path in module_names().items() if name.startswith("nnlm.reproduce")}
    graph = {name: every_import(name, path, modules) for name, path in modules.items()}
    assert "nnlm.reproduce.job" in graph["nnlm.reproduce.net_rows"], "the parser found no type-only import"
    ring = find_cycle(graph)
    assert ring is None, "import ring: " + " -> ".join(ring)

"""The shape of the package: an acyclic import graph and a lazy public API.

``pytest tests/test_architecture.py`` is the command that checks the import graph.
"""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "stackedheads"


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, counting imports inside functions too (an
    import moved into a function hides a cycle from Python, not from this graph)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package that holds this module
                    anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                # `from pkg import sub` imports the submodule `pkg.sub` where there is one
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target == PACKAGE or target.startswith(PACKAGE + "."):
                    dep = resolve(target)
                    if dep and dep != name:
                        deps.add(dep)
        graph[name] = deps
    return graph


def test_the_import_graph_has_no_cycle() -> None:
    graph = import_graph(_modules())
    assert len(graph) > 40 and graph["stackedheads.cli._app"]  # the graph is really built
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"import cycle: {' -> '.join(e.args[1])}")


def test_the_checker_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    modules = {"stackedheads": tmp_path / "__init__.py", "stackedheads.a": tmp_path / "a.py", "stackedheads.b": tmp_path / "b.py"}
    modules["stackedheads"].write_text("")
    modules["stackedheads.a"].write_text("from stackedheads import b\n")
    modules["stackedheads.b"].write_text("def f():\n    from stackedheads.a import x\n")
    graph = import_graph(modules)
    assert graph == {"stackedheads": set(), "stackedheads.a": {"stackedheads.b"}, "stackedheads.b": {"stackedheads.a"}}
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(graph).static_order())


def test_the_cli_is_a_package_that_only_the_entry_points_import() -> None:
    graph = import_graph(_modules())
    importers = {m for m, deps in graph.items() if any(d.startswith("stackedheads.cli") for d in deps)}
    assert importers <= {"stackedheads.__main__"} | {m for m in graph if m.startswith("stackedheads.cli")}


def _fresh_python(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_the_public_api_is_lazy_and_complete() -> None:
    # The CLI sets OpenMP's environment before torch loads, so importing the package (which
    # every CLI run does first) must not import torch.
    assert _fresh_python("import sys, stackedheads; print('torch' in sys.modules)") == "False"
    out = _fresh_python(
        "import stackedheads as s, inspect\n"
        "from stackedheads.training.loop import train\n"
        "from stackedheads.circuits.discover import discover\n"
        "from stackedheads.llm.bench import run_bench\n"
        "print(s.train is train, s.discover is discover, s.run_bench is run_bench,\n"
        "      inspect.ismodule(s.presets), callable(s.prompts.generate), callable(s.emergence.emergence_run),\n"
        "      s.TrainConfig.__name__, s.EnsembleTransformer.__name__, sorted(s.__all__) == sorted(dir(s)))"
    )
    assert out == "True True True True True True TrainConfig EnsembleTransformer True"
    r = subprocess.run([sys.executable, "-c", "import stackedheads; stackedheads.nope"], capture_output=True, text=True, check=False)
    assert r.returncode == 1 and "AttributeError" in r.stderr and "nope" in r.stderr


def test_the_package_root_shows_the_pipeline() -> None:
    """At most 20 modules at the root, and no two names for one job (docs/architecture.md)."""
    root = SRC / PACKAGE
    modules = sorted(p.stem for p in root.glob("*.py"))
    assert len(modules) <= 20, modules
    names = {p.stem for p in root.rglob("*.py")} | {p.name for p in root.rglob("*") if p.is_dir()}
    for one, other in (("checks", "validators"), ("statefiles", "storage")):
        assert not {one, other} <= names, (one, other)
    assert not (root / "claims" / "circuits.py").exists()  # a module named like the circuits/ package


# Entry points that are no command line: `python -m stackedheads` runs the CLI, and the local
# executor starts `python -m stackedheads.execution.worker` with a job as JSON on stdin.
ENTRY_POINTS = {"stackedheads.__main__", "stackedheads.execution.worker"}
PARSERS = {"argparse", "click", "typer", "optparse", "getopt", "fire"}


def _command_line_in(path: Path) -> list[str]:
    """What in a module makes a command line: a parser's import, or a ``__main__`` guard."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        found += [f"imports {n}" for n in names if n.split(".")[0] in PARSERS]
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "__name__" \
                and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in node.comparators):
            found.append("has a __main__ guard")
    return found


def test_no_command_line_lives_outside_the_cli() -> None:
    """Every verb is the typer app's (cli/): a module elsewhere with its own parser or __main__
    would be a command line that --help does not list (docs/architecture.md, the layout's rules)."""
    problems = [f"{name}: {what}" for name, path in _modules().items()
                if not name.startswith("stackedheads.cli") and name not in ENTRY_POINTS for what in _command_line_in(path)]
    assert not problems, "\n".join(problems)


def test_the_command_line_check_finds_a_parser_and_a_main_guard(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def main():\n    import argparse\n\nif __name__ == '__main__':\n    main()\n")
    assert _command_line_in(module) == ["imports argparse", "has a __main__ guard"]
    module.write_text("import json\nname = __name__\n")
    assert _command_line_in(module) == []


def test_the_maintainers_verbs_are_cli_maintain_s_and_its_only_ones() -> None:
    """publish, publish-piece and results-index: defined in cli/maintain.py, which defines no
    other verb, and listed in --help's last panel."""
    import typer

    from stackedheads.cli import app
    from stackedheads.cli._app import VERB_PANELS

    group = typer.main.get_command(app)
    in_maintain = sorted(name for name, cmd in group.commands.items()
                         if getattr(cmd.callback, "__module__", "") == "stackedheads.cli.maintain")
    assert in_maintain == ["publish", "publish-piece", "results-index"]
    assert sorted(v for v, _ in VERB_PANELS[-1][1]) == in_maintain


MAX_CLAIM_FUNCTION_LINES = 60  # one function a claim (sec8's a1..a5, sec9's e1..e4): none grows past this


def long_functions(source: str, limit: int = MAX_CLAIM_FUNCTION_LINES) -> list[tuple[str, int]]:
    """``(name, lines)`` of every function of ``source``, nested ones included, that spans more
    than ``limit`` lines from its ``def`` to its last line (decorators not counted)."""
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit]


def test_no_function_of_the_claims_package_spans_more_than_60_lines() -> None:
    long = [f"{path.name}:{name} ({n} lines)" for path in sorted((SRC / PACKAGE / "claims").glob("*.py"))
            for name, n in long_functions(path.read_text(encoding="utf-8"))]
    assert not long, long


def test_the_length_check_counts_from_def_to_the_last_line() -> None:
    def source(body_lines: int) -> str:
        return "def outer():\n    def inner():\n" + "        x = 1\n" * body_lines + "    return inner\n"

    assert long_functions(source(59)) == [("outer", 62)]  # inner: 60 lines, at the limit
    assert long_functions(source(60)) == [("outer", 63), ("inner", 61)]
    assert long_functions(source(57)) == []

"""The shape rules: no function over 60 lines, no module over 300 (the project's limits), in the package and
in the benchmarks, which are code users run and read too."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "retriever"
BENCHMARKS = REPO / "benchmarks"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 300


def offenders(package: Path = PACKAGE) -> list[str]:
    """``path: what is too long (lines)`` for every module and function over its limit; a function counts from
    its ``def`` to its last line, decorators left out (click option stacks are declarations, not logic)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(package.parent)
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            found.append(f"{name}: module has {lines} lines (limit {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{name}:{node.lineno}: {node.name} has {length} lines (limit {MAX_FUNCTION_LINES})")
    return found


def test_no_function_or_module_is_over_its_limit():
    assert offenders() == [], "\n".join(["split these along their seams:", *offenders()])


def test_no_benchmark_function_or_module_is_over_its_limit():
    found = offenders(BENCHMARKS)
    assert found == [], "\n".join(["split these along their seams:", *found])


def test_the_check_sees_long_functions_and_modules(tmp_path):
    package = tmp_path / "retriever"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (package / "long.py").write_text(f"def too_long():\n{body}\n" + "\n" * MAX_MODULE_LINES, encoding="utf-8")
    assert offenders(package) == [
        f"retriever/long.py: module has {MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES} lines (limit {MAX_MODULE_LINES})",
        f"retriever/long.py:1: too_long has {MAX_FUNCTION_LINES + 1} lines (limit {MAX_FUNCTION_LINES})"]


def test_modules_import_test_helpers_as_plain_pytest_finds_them():
    """``from fixtures_models import ...`` (pytest puts each test folder on sys.path); ``from tests.conftest import
    ...`` works only under ``python -m pytest``, which adds the working directory, and failed to collect under
    ``pytest``."""
    found = []
    for path in sorted((REPO / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else (
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            found += [f"{path.relative_to(REPO)}:{node.lineno}" for name in names if name.split(".")[0] == "tests"]
    assert found == [], "import these by the plain module name (`from fixtures_models import ...`): " + ", ".join(found)


def test_no_two_test_modules_share_a_name():
    """pytest imports a test file by its base name, prefixed by the packages around it (folders holding an
    ``__init__.py``), so two test_x.py outside packages stop the whole run at collection."""
    def import_name(path: Path) -> str:
        parts, folder = [path.stem], path.parent
        while (folder / "__init__.py").is_file():
            parts, folder = [folder.name, *parts], folder.parent
        return ".".join(parts)

    names = [import_name(path) for path in (REPO / "tests").rglob("test_*.py")]
    assert len(names) > 100 and sorted({name for name in names if names.count(name) > 1}) == []


def test_the_package_has_no_unused_import_or_name():
    """pyflakes (unused imports and variables, undefined names): `training/stack.py` kept importing a function it
    no longer called, which two trainers then reached through it (`stack.launched_processes`)."""
    import io

    from pyflakes.api import checkRecursive
    from pyflakes.reporter import Reporter

    out = io.StringIO()
    assert checkRecursive([str(PACKAGE)], Reporter(out, out)) == 0, out.getvalue()

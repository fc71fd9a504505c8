"""The shape of kdbench's source: import chains, module and function lengths, long lines.

`python -m tests.code_shape` prints the figures; tests/unit/test_code_shape.py holds them to bounds.
"""

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "kdbench"


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports at module level (function-level imports excluded)."""
    is_package = path.name == "__init__.py"
    base = name.split(".") if is_package else name.split(".")[:-1]
    targets = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            stem = base[: len(base) - node.level + 1] if node.level else []
            module = ".".join(stem + ([node.module] if node.module else []))
            targets.add(module)
            targets |= {f"{module}.{alias.name}" for alias in node.names}
    return {target for target in targets if target in known and target != name}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports at module level."""
    found = modules()
    return {name: _imported(name, path, set(found)) for name, path in found.items()}


def longest_import_chain() -> list[str]:
    """The longest chain a -> b -> ... of module-level imports inside the package."""
    graph = import_graph()

    @functools.cache
    def chain_from(name: str) -> tuple[str, ...]:
        tails = [chain_from(child) for child in graph[name]]
        return (name, *max(tails, key=len, default=()))

    return list(max((chain_from(name) for name in graph), key=len))


def module_lengths() -> dict[str, int]:
    return {name: len(path.read_text().splitlines()) for name, path in modules().items()}


def function_lengths() -> dict[str, int]:
    """`module:qualified.name` -> lines, for every function and method of the package."""
    lengths = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lengths[f"{name}:{node.name}:{node.lineno}"] = node.end_lineno - node.lineno + 1
    return lengths


def long_lines(limit: int = 100) -> list[str]:
    """`file:line` of every source line longer than `limit` characters."""
    return [
        f"{path.relative_to(PACKAGE.parent)}:{number}"
        for path in modules().values()
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if len(line) > limit
    ]


def main() -> None:
    chain = longest_import_chain()
    print(f"longest import chain: {len(chain)} modules: {' -> '.join(chain)}")
    lengths = sorted(module_lengths().items(), key=lambda item: -item[1])
    print("modules over 300 lines:", ", ".join(f"{n} {k}" for n, k in lengths if k > 300) or "none")
    name, lines = max(function_lengths().items(), key=lambda item: item[1])
    print(f"longest function: {name} ({lines} lines)")
    print(f"source lines over 100 characters: {len(long_lines())}")


if __name__ == "__main__":
    main()

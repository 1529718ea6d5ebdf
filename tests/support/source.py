"""Reading the product's source as the layout tests do: its string constants."""
from __future__ import annotations

import ast
from typing import Iterator


def string_literals(path: str) -> Iterator[tuple[int, str]]:
    """(line, value) of every string constant in the module at ``path`` but its docstrings."""
    with open(path) as handle:
        tree = ast.parse(handle.read(), path)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value

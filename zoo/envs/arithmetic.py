"""A safe arithmetic evaluator for the `calculator` environment: numbers and + - * / ( ) only.

The expression is parsed with `ast.parse(mode="eval")` and walked node by node; nothing is ever
passed to `eval`, `exec` or `compile`. Anything that is not a number literal, a unary +/-, or a
binary + - * / is refused (names, calls, attributes, `**`, comparisons, strings, subscripts ...).
Bounds: at most `MAX_CHARS` characters, nesting depth (parentheses, unary signs, right operands; not the
length of a flat chain like `1+1+...+1`) at most `MAX_DEPTH`, every intermediate value
of magnitude at most `MAX_MAGNITUDE`, so no expression can make the evaluator slow or huge.
"""

from __future__ import annotations

import ast
import math

MAX_CHARS = 200
MAX_DEPTH = 32
MAX_MAGNITUDE = 1e15

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
_UNARY = {ast.UAdd: lambda a: +a, ast.USub: lambda a: -a}


class CalcError(ValueError):
    """An expression the calculator refuses or cannot evaluate; the message says why (one line)."""


def evaluate(expr: str) -> int | float:
    """The value of an arithmetic expression of numbers, + - * / and parentheses.

    Integers stay exact; `/` gives a float. Raises CalcError for an empty or too long expression, a
    syntax error, any other construct (names, calls, attributes, `**` ...), nesting deeper than
    MAX_DEPTH, a value beyond MAX_MAGNITUDE, a non-finite number or a division by zero."""
    if not isinstance(expr, str) or not expr.strip():
        raise CalcError("empty expression")
    if len(expr) > MAX_CHARS:
        raise CalcError(f"expression longer than {MAX_CHARS} characters")
    if _paren_depth(expr) > MAX_DEPTH:  # before parsing: deep nesting never reaches the parser's recursion
        raise CalcError(f"parentheses nested deeper than {MAX_DEPTH}")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalcError("not an arithmetic expression") from None
    return _eval(tree.body, 0)


def _paren_depth(expr: str) -> int:
    """The deepest nesting of parentheses in `expr` (not their count: `(1)+(2)` is 1)."""
    depth = deepest = 0
    for ch in expr:
        depth += (ch == "(") - (ch == ")")
        deepest = max(deepest, depth)
    return deepest


def _eval(node: ast.AST, depth: int) -> int | float:
    """The value of `node`; depth counts nesting, not length: the left operand of a binary operator
    stays at its depth, so a flat `1+1+...+1` (a left-leaning chain to the parser) is depth 1."""
    if depth > MAX_DEPTH:
        raise CalcError(f"nested deeper than {MAX_DEPTH}")
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise CalcError(f"only numbers are allowed, got {type(v).__name__}")
        return _bounded(v)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_eval(node.operand, depth + 1)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval(node.left, depth), _eval(node.right, depth + 1)
        if isinstance(node.op, ast.Div) and b == 0:
            raise CalcError("division by zero")
        return _bounded(_BINOPS[type(node.op)](a, b))
    what = type(node.op).__name__ if isinstance(node, (ast.BinOp, ast.UnaryOp)) else type(node).__name__
    raise CalcError(f"{what} is not allowed: only numbers, + - * / and parentheses")


def _bounded(v: int | float) -> int | float:
    if isinstance(v, float) and not math.isfinite(v):
        raise CalcError("the value is not finite")
    if abs(v) > MAX_MAGNITUDE:
        raise CalcError(f"a value beyond {MAX_MAGNITUDE:g}")
    return v


def format_number(v: int | float) -> str:
    """An integer as is; a float with 10 significant digits, written as an integer when it is one."""
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v) if isinstance(v, int) else f"{v:.10g}"

"""The set-order check: a guarded test's own source, read for the places it takes an order from a set.

A set of strings (or of objects hashed by address) iterates in an order that moves with `PYTHONHASHSEED` and
the allocator. No audit event marks a set being iterated, and tracing each opcode would fight coverage and
debuggers for the interpreter's one trace slot, so the check reads the test function's source instead: a loop,
a comprehension, `list()`, `tuple()`, `enumerate()`, `zip()`, `iter()`, `next()`, `str()`, `repr()`, `print()`,
`str.join`, `set.pop()`, `*` unpacking or an f-string over a set display, a set comprehension, `set(...)`,
`frozenset(...)`, a set operator or method on one of those, or a local name only ever bound to one.

What it does not see: a set that reaches the test from elsewhere (a fixture, a helper's return value, an
attribute), and code outside the test function. Sets of number literals iterate in a fixed order and pass. A
line that takes an order it does not depend on says so with the comment `# anagrapheus: any-order`.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from types import CodeType, FunctionType

from anagrapheus.testing.entropy.frames import is_user_file, shown

__all__ = ["ANY_ORDER", "SetOrder", "set_orders"]

ANY_ORDER = "anagrapheus: any-order"
"""The comment that tells the check a line's use of a set's order is deliberate."""

# Calls whose result keeps the order the set iterated in; `sorted`, `len`, `min`, `sum` and `in` do not.
_ORDERING_CALLS = frozenset(("list", "tuple", "enumerate", "zip", "iter", "next", "str", "repr", "print", "map"))
_SET_CALLS = frozenset(("set", "frozenset"))
_SET_METHODS = frozenset(("union", "intersection", "difference", "symmetric_difference", "copy"))
_SET_OPERATORS = (ast.BitOr, ast.BitAnd, ast.Sub, ast.BitXor)
_A_SET = ast.Call(func=ast.Name(id="set"), args=[], keywords=[])


@dataclass(frozen=True, slots=True)
class SetOrder:
    """One place a test takes an order from a set."""

    what: str
    """How the order is taken, e.g. `list() of a set` or `for loop over a set`."""
    where: str
    """`path:line (in function)`."""


def set_orders(test: Callable[..., object]) -> tuple[SetOrder, ...]:
    """The places the test function `test` takes an order from a set; none when its source is not the user's."""
    function = _innermost(test)
    code = getattr(function, "__code__", None)
    return _scanned(code) if isinstance(code, CodeType) and isinstance(function, FunctionType) else ()


def _innermost(test: Callable[..., object]) -> object:
    # A hypothesis test keeps the function as written on `.hypothesis.inner_test`; a bound method on `__func__`.
    inner = getattr(getattr(test, "hypothesis", None), "inner_test", None)
    function: object = inner if inner is not None else test
    function = getattr(function, "__func__", function)
    return inspect.unwrap(function) if callable(function) else function  # pyright: ignore[reportUnknownArgumentType]


# By code object, for the process: a function's code never changes, and a test runs its functions many times.
# It holds the user functions' code it scanned, which the test process holds anyway.
@cache
def _scanned(code: CodeType) -> tuple[SetOrder, ...]:
    if not is_user_file(code.co_filename):
        return ()
    try:
        lines, start = inspect.getsourcelines(code)
    except (OSError, TypeError):
        # Compiled from a string, or its file gone: nothing to read, and nothing claimed.
        return ()
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return ()
    found: list[SetOrder] = []
    seen: set[tuple[str, int]] = set()
    for what, line in _orders(tree):
        number = start + line - 1
        if (what, number) in seen or ANY_ORDER in lines[line - 1]:
            continue
        seen.add((what, number))
        found.append(SetOrder(what, f"{shown(code.co_filename)}:{number} (in {code.co_name})"))
    return tuple(found)


def _orders(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """Each `(what, line)` in `tree` that takes an order from a set, in source order."""
    names = _set_names(tree)
    hits: list[tuple[int, int, str]] = []

    def hit(node: ast.AST, what: str) -> None:
        hits.append((getattr(node, "lineno", 1), getattr(node, "col_offset", 0), what))

    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.AsyncFor) and _is_set(node.iter, names):
            hit(node.iter, "for loop over a set")
        elif isinstance(node, ast.comprehension) and _is_set(node.iter, names):
            hit(node.iter, "comprehension over a set")
        elif isinstance(node, ast.Call):
            _call_orders(node, names, hit)
        elif isinstance(node, ast.Starred) and _is_set(node.value, names):
            hit(node, "* unpacking of a set")
        elif isinstance(node, ast.FormattedValue) and _is_set(node.value, names):
            hit(node.value, "f-string of a set")
        elif (
            isinstance(node, ast.Assign)
            and _is_set(node.value, names)
            and any(isinstance(target, ast.Tuple | ast.List) for target in node.targets)
        ):
            hit(node, "unpacking of a set")
    for line, _, what in sorted(hits):
        yield what, line


def _call_orders(call: ast.Call, names: frozenset[str], hit: Callable[[ast.AST, str], None]) -> None:
    func = call.func
    if isinstance(func, ast.Name) and func.id in _ORDERING_CALLS:
        if any(_is_set(arg, names) for arg in call.args):
            hit(call, f"{func.id}() of a set")
    elif isinstance(func, ast.Attribute):
        if func.attr == "join" and call.args and _is_set(call.args[0], names):
            hit(call, "str.join of a set")
        elif func.attr == "pop" and not call.args and _is_set(func.value, names):
            hit(call, "set.pop()")


def _set_names(tree: ast.AST) -> frozenset[str]:
    """Local names every binding of which is a set (`|=` keeps a set one), found to a fixed point."""
    bindings: dict[str, list[ast.expr | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _bind(bindings, target, node.value)
        elif isinstance(node, ast.AnnAssign):
            # An annotation of `set`/`frozenset` is taken at its word, whatever the value's form.
            _bind(bindings, node.target, _A_SET if _annotated_set(node.annotation) else node.value)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension | ast.withitem | ast.NamedExpr):
            target = node.optional_vars if isinstance(node, ast.withitem) else node.target
            if target is not None:
                _bind(bindings, target, None)
        elif isinstance(node, ast.arg):
            bindings.setdefault(node.arg, []).append(None)
    names: frozenset[str] = frozenset()
    while True:
        grown = frozenset(
            name
            for name, values in bindings.items()
            if values and all(value is not None and _is_set(value, names) for value in values)
        )
        if grown == names:
            return names
        names = grown


def _bind(bindings: dict[str, list[ast.expr | None]], target: ast.expr, value: ast.expr | None) -> None:
    if isinstance(target, ast.Name):
        bindings.setdefault(target.id, []).append(value)
    elif isinstance(target, ast.Tuple | ast.List | ast.Starred):
        # Unpacked: what each name gets is not the value as a whole.
        for element in ast.walk(target):
            if isinstance(element, ast.Name):
                bindings.setdefault(element.id, []).append(None)


def _annotated_set(annotation: ast.expr) -> bool:
    base = annotation.value if isinstance(annotation, ast.Subscript) else annotation
    return isinstance(base, ast.Name) and base.id in _SET_CALLS


def _is_set(node: ast.expr, names: frozenset[str]) -> bool:
    """Whether `node` is, by its form, a set whose order can move (a display of number literals cannot)."""
    if isinstance(node, ast.Set):
        return not all(isinstance(e, ast.Constant) and type(e.value) in (int, float) for e in node.elts)
    if isinstance(node, ast.SetComp):
        return True
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name):
            return func.id in _SET_CALLS
        return isinstance(func, ast.Attribute) and func.attr in _SET_METHODS and _is_set(func.value, names)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _SET_OPERATORS):
        return _is_set(node.left, names) or _is_set(node.right, names)
    return False

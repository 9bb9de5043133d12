"""Static analysis of a snippet's AST before anything runs (the first, non-boundary layer).

It rejects code that plainly tries to leave the sandbox so that the model gets a precise,
cheap error; the OS layer still assumes every rule here can be bypassed.
"""

from __future__ import annotations

import ast
import functools
import re
import threading

from agentic_jax.sandbox.types import ExecResult, failure

FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "__import__", "open", "input", "breakpoint", "globals", "locals",
    "vars", "help", "exit", "quit", "__builtins__", "__loader__", "__spec__",
})
# Attribute names that expose frames, code objects or interpreter internals.
FORBIDDEN_ATTRS = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame",
    "ag_code", "ag_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code", "f_trace",
    "tb_frame", "tb_next", "co_code", "func_globals", "mro", "format_map",
})
# Dunder names harmless enough to keep ordinary class code working.
ALLOWED_DUNDERS = frozenset({"__name__", "__doc__", "__init__", "__version__", "__qualname__"})
ATTR_BUILTINS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
NESTING_NODES = (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                 ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp, ast.DictComp,
                 ast.GeneratorExp)
# Format strings such as "{0.__class__}" read attributes without an Attribute node.
_FORMAT_DUNDER = re.compile(r"\{[^{}]*__")
# Identifiers whose presence makes a snippet's output non-deterministic (never cached).
_NONDETERMINISTIC = frozenset({
    "time", "perf_counter", "monotonic", "process_time", "now", "today", "utcnow", "uuid",
    "uuid1", "uuid4", "secrets", "shuffle", "choice", "choices", "sample", "seed", "urandom",
    "getrandbits", "id", "hash", "datetime",
})


# CPython 3.11's AST constructor keeps its recursion-depth bookkeeping per interpreter, so parses
# running at once on several pool threads can fail with "AST constructor recursion depth
# mismatch" (a SystemError); parsing one snippet at a time avoids it and costs microseconds.
_PARSE_LOCK = threading.Lock()


class Rejected(Exception):
    """A static rule fired; carries the taxonomy error name and the explanation."""

    def __init__(self, error: str, what: str) -> None:
        super().__init__(what)
        self.error = error
        self.what = what


def validate(code: str, whitelist: tuple[str, ...], max_code_bytes: int, max_nesting: int,
             max_literal_len: int) -> ast.Module | ExecResult:
    """Parse `code` and check every static rule.

    Returns the parsed module when the code may run, else the failure `ExecResult`
    (SyntaxError with line/column, ImportError, or SecurityError naming the rule).
    """
    if not isinstance(code, str):
        return failure("SecurityError", f"code must be a str, got {type(code).__name__}")
    if len(code.encode("utf-8", "surrogatepass")) > max_code_bytes:
        return failure("SecurityError", f"code longer than {max_code_bytes} bytes")
    try:
        tree = _parse(code)
    except SyntaxError as err:
        return failure("SyntaxError", f"{err.msg} (line {err.lineno}, column {err.offset})")
    except (ValueError, RecursionError, MemoryError) as err:
        return failure("SyntaxError", f"unparsable source: {type(err).__name__}")
    try:
        _check_tree(tree, frozenset(whitelist), max_nesting, max_literal_len)
    except Rejected as rej:
        return failure(rej.error, rej.what)
    return tree


# Verdicts kept for sources up to this length: a session replays its earlier blocks with every
# call, and the same source always gets the same verdict.
_VERDICT_CACHE_MAX_CODE = 8192


def verdict(code: str, whitelist: tuple[str, ...], max_code_bytes: int, max_nesting: int,
            max_literal_len: int) -> ExecResult | bool:
    """`validate` without the tree: the failure `ExecResult`, or whether the code is
    deterministic (`is_deterministic`). Remembered for the last 1024 short sources."""
    if isinstance(code, str) and len(code) <= _VERDICT_CACHE_MAX_CODE:
        return _cached_verdict(code, tuple(whitelist), max_code_bytes, max_nesting,
                               max_literal_len)
    return _verdict(code, whitelist, max_code_bytes, max_nesting, max_literal_len)


def _verdict(code: str, whitelist: tuple[str, ...], max_code_bytes: int, max_nesting: int,
             max_literal_len: int) -> ExecResult | bool:
    checked = validate(code, whitelist, max_code_bytes, max_nesting, max_literal_len)
    return checked if isinstance(checked, ExecResult) else is_deterministic(checked)


_cached_verdict = functools.lru_cache(maxsize=1024)(_verdict)


def _parse(code: str) -> ast.Module:
    with _PARSE_LOCK:
        try:
            return ast.parse(code, filename="<snippet>")
        except SystemError:
            # A parse elsewhere in the process (outside this lock) collided with ours; the
            # bookkeeping is reset once that parse returns, so one retry is enough.
            return ast.parse(code, filename="<snippet>")


def _check_tree(tree: ast.AST, whitelist: frozenset[str], max_nesting: int,
                max_literal_len: int) -> None:
    """Walk iteratively (deep sources must not overflow the host's stack) checking each node."""
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, NESTING_NODES):
            depth += 1
            if depth > max_nesting:
                raise Rejected("SecurityError", f"nesting deeper than {max_nesting} "
                               f"(line {getattr(node, 'lineno', '?')}) is not allowed")
        _check_node(node, whitelist, max_literal_len)
        for name in node._fields:  # ast.iter_child_nodes, without a generator per node
            value = getattr(node, name, None)
            if isinstance(value, ast.AST):
                stack.append((value, depth))
            elif isinstance(value, list):
                stack.extend((item, depth) for item in value if isinstance(item, ast.AST))


def _check_node(node: ast.AST, whitelist: frozenset[str], max_literal_len: int) -> None:
    line = getattr(node, "lineno", "?")
    if isinstance(node, ast.Import):
        for alias in node.names:
            _check_module(alias.name, whitelist, line)
            for part in alias.name.split(".")[1:]:
                _check_attr(part, line)
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            raise Rejected("ImportError", f"relative import (line {line}) is not allowed")
        _check_module(node.module or "", whitelist, line)
        for alias in node.names:
            _check_attr(alias.name, line)  # `from m import __builtins__` is an attribute read
    elif isinstance(node, ast.Name):
        _check_name(node.id, line)
    elif isinstance(node, ast.Attribute):
        _check_attr(node.attr, line)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        _check_name(node.name, line)
    elif isinstance(node, ast.arg):
        _check_name(node.arg, line)
    elif isinstance(node, ast.keyword) and node.arg is not None:
        _check_name(node.arg, line)
    elif isinstance(node, ast.Call):
        _check_call(node, line)
    elif isinstance(node, ast.Constant):
        _check_constant(node.value, line, max_literal_len)
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        _check_size(len(node.elts), line, max_literal_len)
    elif isinstance(node, ast.Dict):
        _check_size(len(node.keys), line, max_literal_len)


def _check_module(name: str, whitelist: frozenset[str], line: object) -> None:
    top = name.split(".")[0]
    if top not in whitelist:
        raise Rejected("ImportError", f"module {name!r} (line {line}) is not in the whitelist")


def _check_name(name: str, line: object) -> None:
    if name in FORBIDDEN_NAMES:
        raise Rejected("SecurityError", f"use of {name!r} (line {line}) is not allowed")
    if _is_dunder(name) and name not in ALLOWED_DUNDERS:
        raise Rejected("SecurityError", f"dunder name {name!r} (line {line}) is not allowed")


def _check_attr(attr: str, line: object) -> None:
    if _is_dunder(attr) and attr not in ALLOWED_DUNDERS:
        raise Rejected("SecurityError", f"dunder attribute {attr!r} (line {line}) is not allowed")
    if attr in FORBIDDEN_ATTRS:
        raise Rejected("SecurityError", f"internal attribute {attr!r} (line {line}) is not allowed")


def _check_call(node: ast.Call, line: object) -> None:
    func = node.func
    if isinstance(func, ast.Name) and func.id in ATTR_BUILTINS and len(node.args) >= 2:
        name = node.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            raise Rejected("SecurityError", f"string-built attribute name in {func.id}() "
                           f"(line {line}) is not allowed")
        _check_attr(name.value, line)


def _check_constant(value: object, line: object, max_literal_len: int) -> None:
    if isinstance(value, (str, bytes)):
        _check_size(len(value), line, max_literal_len)
        if isinstance(value, str) and _FORMAT_DUNDER.search(value):
            raise Rejected("SecurityError", f"dunder access inside a format string (line {line}) "
                           "is not allowed")


def _check_size(size: int, line: object, max_literal_len: int) -> None:
    if size > max_literal_len:
        raise Rejected("SecurityError", f"literal with {size} elements (line {line}) exceeds "
                       f"the limit of {max_literal_len}")


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def is_deterministic(tree: ast.AST) -> bool:
    """False when the snippet mentions randomness, clocks or identity-based values.

    A conservative name heuristic: any identifier containing "rand" or naming a clock/uuid/
    sampling function disables caching for the snippet.
    """
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
        for name in names:
            lowered = name.lower()
            if "rand" in lowered or any(part in _NONDETERMINISTIC for part in lowered.split(".")):
                return False
    return True

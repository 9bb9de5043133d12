"""The tools an episode may call: a small protocol, the Python sandbox and a calculator.

A tool call is text the policy writes that the tool recognises (``find_call``: the first
completed call in a turn's text, e.g. a closed ```python block). The rollout loop cuts the turn
just after the call, pauses the episode's sequence in the engine (its pages kept), starts the
call on the host (``start`` -> a future) while other episodes decode, and appends
``feedback(...)`` tokens to the episode with loss_mask 0 before it decodes on. The policy learns
from its own tokens only; what a tool answers is context.

    class Tool(Protocol):
        name: str
        pause_text: str | None          # text whose single token should end a decode round trip
        def find_call(self, text) -> str | None: ...
        def start(self, call, *, timeout_ms, state) -> Future: ...
        def feedback(self, call, result, *, tokenizer, max_tokens, state) -> Feedback: ...

``find_call`` must be monotone in the text (once a prefix holds a call, every longer text
reports the same call): the loop binary-searches the token prefix where the call completes.
``state`` is a dict of the episode's own, for tools that remember earlier calls. A tool with
nothing slow to do returns a finished future (`done`). To add a tool, implement the protocol and
pass it in ``tools=`` to `RolloutService` / `build_service`, or name it in a run's config
(``environment.tools``, read by `build_tools`): a built-in name, or ``module:attribute`` for an
object (or a class / factory called without arguments) importable from the run's Python path.
Neither the engine nor the loop changes.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import dataclasses
import fractions
import importlib
import operator
import re
from typing import Any, Protocol, Sequence

from agentic_jax.rollout import tool_text


@dataclasses.dataclass(frozen=True)
class Feedback:
    """What one tool call feeds back: ``tokens`` (appended with loss_mask 0) and whether the
    call succeeded (``error``: its failure's name, counted in the episode's tool errors)."""

    tokens: list[int]
    ok: bool = True
    error: str = ""


class Tool(Protocol):
    name: str
    pause_text: str | None

    def find_call(self, text: str) -> str | None: ...

    def start(self, call: str, *, timeout_ms: int, state: dict) -> cf.Future: ...

    def feedback(self, call: str, result: Any, *, tokenizer: Any, max_tokens: int,
                 state: dict) -> Feedback: ...


def done(value: Any) -> cf.Future:
    """A future that already holds ``value`` (a tool that answers at once)."""
    future: cf.Future = cf.Future()
    future.set_result(value)
    return future


class PythonTool:
    """A closed ```python block, run in the `agentic_jax.sandbox.Sandbox`; its stdout (or its
    one-line error with the taxonomy hint) comes back as a ```output block.

    stateful: an episode's blocks share one namespace, as in a notebook (the sandbox replays the
    episode's earlier successful blocks before each new one).
    """

    name = "python"
    pause_text = tool_text.CODE_CLOSE

    def __init__(self, sandbox: Any, stateful: bool = False):
        self.sandbox, self.stateful = sandbox, stateful

    def find_call(self, text: str) -> str | None:
        found = tool_text.find_closed_code(text)
        return None if found is None else found[0]

    def start(self, call: str, *, timeout_ms: int, state: dict) -> cf.Future:
        history = {"history": tuple(state.get("history", ()))} if self.stateful else {}
        return self.sandbox.submit(call, timeout_ms=timeout_ms, **history)

    def feedback(self, call: str, result: Any, *, tokenizer: Any, max_tokens: int,
                 state: dict) -> Feedback:
        if result.ok and self.stateful:
            state.setdefault("history", []).append(call)
        tokens = tool_text.render_tool_result(result, tokenizer, max_tokens=max_tokens)
        return Feedback(tokens, bool(result.ok), "" if result.ok else str(result.error))


class CalculatorError(ValueError):
    """An expression the calculator refuses (not arithmetic, too large, division by zero)."""


class Calculator:
    """``<calc>EXPR</calc>``: exact rational arithmetic (+ - * / // % **, parentheses, decimals),
    answered at once as an output block with the value (an integer, a fraction, or a decimal
    for non-integers). Bounded: at most ``max_chars`` of expression, exponents up to
    ``max_exponent``, results up to ``max_digits`` digits; anything else is an error message fed
    back like a failed snippet."""

    name = "calculator"
    pause_text = None
    OPEN, CLOSE = "<calc>", "</calc>"
    _CALL = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
    _BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
               ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod}

    def __init__(self, max_chars: int = 200, max_exponent: int = 1000, max_digits: int = 400):
        self.max_chars, self.max_exponent, self.max_digits = max_chars, max_exponent, max_digits

    def find_call(self, text: str) -> str | None:
        match = self._CALL.search(text)
        return None if match is None else match.group(1)

    def start(self, call: str, *, timeout_ms: int, state: dict) -> cf.Future:
        try:
            return done(self.evaluate(call))
        except CalculatorError as err:
            return done(err)

    def feedback(self, call: str, result: Any, *, tokenizer: Any, max_tokens: int,
                 state: dict) -> Feedback:
        if isinstance(result, CalculatorError):
            body, ok, error = f"CalculatorError: {result}", False, "CalculatorError"
        else:
            body, ok, error = _show(result), True, ""
        return Feedback(tool_text.render_message(body, tokenizer), ok, error)

    def evaluate(self, expression: str) -> fractions.Fraction:
        """The exact value of ``expression``; raises CalculatorError."""
        source = expression.strip()
        if not source or len(source) > self.max_chars:
            raise CalculatorError(f"expected an expression of 1 to {self.max_chars} characters")
        try:
            tree = ast.parse(source.replace("^", "**"), mode="eval")
        except SyntaxError:
            raise CalculatorError("not an arithmetic expression") from None
        return self._value(tree.body)

    def _value(self, node: ast.AST) -> fractions.Fraction:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return fractions.Fraction(str(node.value))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            value = self._value(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return self._power(self._value(node.left), self._value(node.right))
        if isinstance(node, ast.BinOp) and type(node.op) in self._BINARY:
            left, right = self._value(node.left), self._value(node.right)
            if right == 0 and not isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
                raise CalculatorError("division by zero")
            return self._bounded(self._BINARY[type(node.op)](left, right))
        raise CalculatorError("only numbers, + - * / // % ** and parentheses are allowed")

    def _power(self, base: fractions.Fraction, exponent: fractions.Fraction
               ) -> fractions.Fraction:
        if exponent.denominator != 1:
            raise CalculatorError("only whole exponents are allowed")
        if abs(exponent) > self.max_exponent:
            raise CalculatorError(f"exponents are limited to {self.max_exponent}")
        if base == 0 and exponent < 0:
            raise CalculatorError("division by zero")
        # |result| has about |exponent| * digits(base) digits: refuse before computing it.
        digits = max(len(str(abs(base.numerator))), len(str(base.denominator)))
        if abs(int(exponent)) * digits > self.max_digits + 1:
            raise CalculatorError(f"the result would have more than {self.max_digits} digits")
        return self._bounded(base ** int(exponent))

    def _bounded(self, value: fractions.Fraction) -> fractions.Fraction:
        if max(len(str(abs(value.numerator))), len(str(value.denominator))) > self.max_digits:
            raise CalculatorError(f"the result has more than {self.max_digits} digits")
        return value


def _show(value: fractions.Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    decimal = f"{float(value):.12g}"
    return f"{value.numerator}/{value.denominator} = {decimal}"


@dataclasses.dataclass(frozen=True)
class Call:
    """A turn's first completed event: ``cut`` model tokens kept (up to the token that
    completes it); ``tool`` and ``payload`` of a tool call, or tool None for a final answer."""

    cut: int
    tool: Any = None
    payload: str = ""


class ToolSet:
    """The tools of one loop and the final-answer rule: finds a turn's first event."""

    def __init__(self, tools: Sequence[Tool], stop_on_answer: bool = True):
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tools: names must be distinct, got {names}")
        self.tools, self.stop_on_answer = tuple(tools), stop_on_answer

    def pause_texts(self) -> list[str]:
        return [t.pause_text for t in self.tools if t.pause_text]

    def first_event(self, turn: list[int], decode) -> Call | None:
        """The turn's first completed tool call or (with stop_on_answer) closed final answer;
        None while neither has happened."""
        def happened(text: str) -> bool:
            return any(t.find_call(text) is not None for t in self.tools) or (
                self.stop_on_answer and tool_text.has_final_answer(text))

        if not happened(decode(turn)):
            return None
        cut = tool_text.first_prefix_with(turn, decode, happened)
        text = decode(turn[:cut])
        for tool in self.tools:
            payload = tool.find_call(text)
            if payload is not None:
                return Call(cut, tool, payload)
        return Call(cut)


# The tools a config names without an import path.
BUILTIN_TOOLS = ("python", "calculator")
_PROTOCOL = ("name", "pause_text", "find_call", "start", "feedback")


def build_tools(names: Sequence[str], *, sandbox: Any = None, stateful: bool = False
                ) -> list[Tool]:
    """The tools named by a config (``environment.tools``), in order.

    Args:
      names: "python" (the sandbox's ```python blocks), "calculator" (`Calculator`), or
        "module:attribute" for a user's tool: an object implementing `Tool`, or a class /
        factory that returns one when called without arguments.
      sandbox, stateful: the Python tool's sandbox and whether its blocks share a namespace.

    Raises:
      ValueError: an unknown name, an import that fails, or an object that is not a tool.
    """
    if isinstance(names, str) or not names:
        raise ValueError(f"tools: expected a non-empty list of tool names, got {names!r}")
    tools: list[Tool] = []
    for name in names:
        if name == "python":
            tools.append(PythonTool(sandbox, stateful))
        elif name == "calculator":
            tools.append(Calculator())
        elif isinstance(name, str) and ":" in name:
            tools.append(_import_tool(name))
        else:
            raise ValueError(f"tools: unknown tool {name!r}; expected one of {BUILTIN_TOOLS} or "
                             f"'module:attribute'")
    ToolSet(tools)  # distinct names
    return tools


def _import_tool(spec: str) -> Tool:
    module, _, attribute = spec.partition(":")
    try:
        obj = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError, ValueError) as err:
        raise ValueError(f"tools: cannot import {spec!r} ({type(err).__name__}: {err})") from None
    if isinstance(obj, type) or (callable(obj) and not _is_tool(obj)):
        try:
            obj = obj()
        except Exception as err:  # noqa: BLE001 - a user's factory, reported as a config error
            raise ValueError(f"tools: calling {spec!r} without arguments failed "
                             f"({type(err).__name__}: {err})") from None
    if not _is_tool(obj):
        missing = [a for a in _PROTOCOL if not hasattr(obj, a)]
        raise ValueError(f"tools: {spec!r} is not a tool (it lacks {', '.join(missing)}; see "
                         f"agentic_jax.rollout.environment.Tool)")
    return obj


def _is_tool(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in _PROTOCOL) and not isinstance(obj, type)

"""Arithmetic stage: the four operations, parentheses, fractions, multi-digit products, powers.

Difficulty grows with operand size, from 2-digit sums a tiny model can add in its head to
products, powers and fraction sums where mental arithmetic fails and a tool call pays off.
Questions write expressions in Python syntax so that the reference code copies them verbatim.
"""

from __future__ import annotations

import dataclasses
import math
import random
from fractions import Fraction
from typing import Callable

from agentic_jax.data import checks, symbolic
from agentic_jax.data.problem import KindTable, Problem, draft

_ASK = ("Compute {e}.", "What is {e}?", "Calculate {e}.", "Evaluate {e}.", "Find the value of {e}.")
_OPS: dict[str, Callable[[int, int], int]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2}

# An expression tree: an int leaf, or (op, left, right).
Node = int | tuple


def _number(rng: random.Random, digits: int) -> int:
    """A random integer with exactly `digits` digits (at least 2 for one digit)."""
    return rng.randint(max(2, 10 ** (digits - 1)), 10**digits - 1)


def _draft(kind: str, difficulty: float, rng: random.Random, expr: str, answer: str,
           code: str, direct: str, key: str) -> Problem:
    return draft(
        kind=kind,
        difficulty=difficulty,
        question=rng.choice(_ASK).format(e=expr),
        answer=answer,
        solution_code=code,
        tests=checks.value_test(answer),
        direct_solution=direct,
        key=key,
    )


def _sum_or_difference(rng: random.Random, level: float, op: str) -> Problem:
    digits = 2 + round(level * 5)
    a, b = _number(rng, digits), _number(rng, rng.choice((digits, max(1, digits - 1))))
    if op == "-" and level < 0.5:
        a, b = max(a, b), min(a, b)  # easy differences stay non-negative
    expr, result = f"{a} {op} {b}", _OPS[op](a, b)
    if a < 100 and b < 100:
        tens, ones = _OPS[op](a // 10 * 10, b // 10 * 10), _OPS[op](a % 10, b % 10)
        direct = f"{expr} = ({a // 10 * 10} {op} {b // 10 * 10}) + ({a % 10} {op} {b % 10})"
        joined = f"{tens} + {ones}" if ones >= 0 else f"{tens} - {-ones}"
        direct += f" = {joined} = {result}."
    else:
        direct = f"{expr} = {result}."
    key = f"{op}:{min(a, b)},{max(a, b)}" if op == "+" else f"-:{a},{b}"
    kind = "sum" if op == "+" else "difference"
    return _draft(kind, (digits - 2) / 5, rng, expr, str(result), f"print({expr})", direct, key)


def _product(rng: random.Random, level: float) -> Problem:
    total = 2 + round(level * 7)
    a, b = _number(rng, (total + 1) // 2), _number(rng, total // 2)
    expr, result = f"{a} * {b}", a * b
    if b < 10:
        direct = f"{expr} = {result}."
    elif b < 100:
        high, low = b // 10 * 10, b % 10
        direct = f"{expr} = {a} * {high} + {a} * {low} = {a * high} + {a * low} = {result}."
    else:
        direct = f"{expr} = {result}."
    key = f"*:{min(a, b)},{max(a, b)}"
    return _draft("product", (total - 2) / 7, rng, expr, str(result), f"print({expr})", direct, key)


def _quotient(rng: random.Random, level: float) -> Problem:
    total = 2 + round(level * 6)
    b, q = _number(rng, (total + 1) // 2), _number(rng, total // 2)
    a = b * q
    expr = f"{a} / {b}"
    direct = f"{expr} = {q}, because {b} * {q} = {a}."
    return _draft("quotient", (total - 2) / 6, rng, expr, str(q), f"print({a} // {b})", direct,
                  f"/:{a},{b}")


def _power(rng: random.Random, level: float) -> Problem:
    max_digits = 2 + round(level * 28)  # the result's size bounds base and exponent
    base = rng.randint(2, 9 if level < 0.3 else 99)
    top = max(2, int(max_digits / math.log10(base)))
    exponent = rng.randint(2, max(2, min(top, 40)))
    expr, result = f"{base} ** {exponent}", base**exponent
    if exponent <= 4 and result < 10**6:
        direct = f"{expr} = {' * '.join([str(base)] * exponent)} = {result}."
    else:
        direct = f"{expr} = {result}."
    difficulty = min(1.0, math.log10(result) / 30)
    return _draft("power", difficulty, rng, expr, str(result), f"print({expr})", direct,
                  f"**:{base},{exponent}")


def _render(node: Node, parent: int = 0, right: bool = False) -> str:
    """Prints a tree with the parentheses Python precedence needs."""
    if isinstance(node, int):
        return str(node)
    op, left, rhs = node
    own = _PRECEDENCE[op]
    text = f"{_render(left, own)} {op} {_render(rhs, own, right=True)}"
    return f"({text})" if own < parent or (right and own == parent and op != "*") else text


def _reduce_once(node: Node) -> Node:
    """Evaluates the leftmost innermost operation (one step of working by hand)."""
    op, left, rhs = node
    if isinstance(left, int) and isinstance(rhs, int):
        return _OPS[op](left, rhs)
    if not isinstance(left, int):
        return (op, _reduce_once(left), rhs)
    return (op, left, _reduce_once(rhs))


def _mixed(rng: random.Random, level: float) -> Problem:
    operands = 3 + round(level * 2)
    digits = 1 + round(level * 2)
    node: Node = _number(rng, digits)
    for _ in range(operands - 1):
        leaf = _number(rng, digits)
        op = rng.choice("+-*")
        node = (op, node, leaf) if rng.random() < 0.5 else (op, leaf, node)
    expr, steps = _render(node), [_render(node)]
    while not isinstance(node, int):
        node = _reduce_once(node)
        steps.append(_render(node))
    direct = " = ".join(steps) + "."
    difficulty = ((operands - 3) / 2 + (digits - 1) / 2) / 2
    return _draft("mixed", difficulty, rng, expr, str(node), f"print({expr})", direct,
                  f"mixed:{expr.replace(' ', '')}")


def _fraction(rng: random.Random, level: float) -> Problem:
    top = 5 + round(level * 45)
    b, d = rng.randint(2, top), rng.randint(2, top)
    a, c = rng.randint(1, 2 * b), rng.randint(1, 2 * d)
    op = rng.choice("+-*")
    x, y = Fraction(a, b), Fraction(c, d)
    result = {"+": x + y, "-": x - y, "*": x * y}[op]
    expr = f"{a}/{b} {op} {c}/{d}"
    if op == "*":
        raw = f"{a * c}/{b * d}"
        direct = f"{expr} = ({a} * {c})/({b} * {d}) = {raw}"
    else:
        lcm = b * d // math.gcd(b, d)
        raw = f"{_OPS[op](a * lcm // b, c * lcm // d)}/{lcm}"
        direct = f"{expr} = {a * lcm // b}/{lcm} {op} {c * lcm // d}/{lcm} = {raw}"
    answer = symbolic.num(result)
    direct += "." if raw == answer else f" = {answer}."
    code = f"from sympy import *\nprint(Rational({a}, {b}) {op} Rational({c}, {d}))"
    problem = _draft("fraction", (top - 5) / 45, rng, expr, answer, code, direct,
                   f"frac:{expr.replace(' ', '')}")
    question = problem.question[:-1] + ", as a fraction in lowest terms" + problem.question[-1]
    return dataclasses.replace(problem, question=question)


GENERATORS: KindTable = {
    "sum": (0.15, lambda rng, level: _sum_or_difference(rng, level, "+")),
    "difference": (0.10, lambda rng, level: _sum_or_difference(rng, level, "-")),
    "product": (0.22, _product),
    "quotient": (0.10, _quotient),
    "power": (0.13, _power),
    "mixed": (0.15, _mixed),
    "fraction": (0.15, _fraction),
}

"""Configuration validation, the static analysis layer, and result hygiene (no processes)."""

import signal

import pytest

from agentic_jax.sandbox import SandboxConfig
from agentic_jax.sandbox.output import OutputCapture, classify, scrub_paths
from agentic_jax.sandbox.validator import is_deterministic, validate

WL = ("sympy", "numpy", "math")


def check(code: str, whitelist=WL):
    return validate(code, whitelist, max_code_bytes=65536, max_nesting=16, max_literal_len=100_000)


@pytest.mark.parametrize("field,value", [
    ("timeout_ms", 0), ("timeout_ms", 1.5), ("memory_mb", True), ("num_workers", 0),
    ("max_output_bytes", 1), ("cache_size", -1), ("whitelist", "sympy"),
    ("whitelist", ("os.path",)),
    ("sandbox_uid", 0),
])
def test_config_rejects_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"SandboxConfig.{field}"):
        SandboxConfig(**{field: value})


def test_config_defaults_match_the_reproduced_system():
    cfg = SandboxConfig()
    assert (cfg.timeout_ms, cfg.memory_mb, cfg.whitelist) == (500, 100, ("sympy", "numpy", "math"))
    assert cfg.workers >= 1


@pytest.mark.parametrize("code", [
    "import os", "import os.path", "from os import system", "import sympy, subprocess",
    "from . import x", "from .sympy import x", "import importlib", "from ctypes import CDLL",
])
def test_imports_outside_whitelist_are_import_errors(code):
    result = check(code)
    assert result.error == "ImportError" and "whitelist" in result.message


@pytest.mark.parametrize("code,rule", [
    ("eval('1')", "eval"), ("exec('x=1')", "exec"), ("compile('1','','eval')", "compile"),
    ("__import__('os')", "__import__"), ("open('/etc/passwd')", "open"), ("input()", "input"),
    ("breakpoint()", "breakpoint"), ("globals()", "globals"), ("locals()", "locals"),
    ("vars()", "vars"), ("f = eval", "eval"), ("().__class__", "__class__"),
    ("int.__subclasses__()", "__subclasses__"), ("f.__globals__", "__globals__"),
    ("__builtins__", "__builtins__"), ("f.__code__", "__code__"), ("g.gi_frame", "gi_frame"),
    ("fr.f_globals", "f_globals"), ("tb.tb_frame", "tb_frame"), ("c.cr_frame", "cr_frame"),
    ("getattr(x, 'a' + 'b')", "getattr"), ("getattr(x, name)", "getattr"),
    ("getattr(x, '__class__')", "__class__"), ("setattr(x, n, 1)", "setattr"),
    ("'{0.__class__}'.format(1)", "format string"), ("type(1).mro()", "mro"),
    ("def f(__builtins__): pass", "__builtins__"), ("f(**{'a': 1}).__dict__", "__dict__"),
])
def test_security_rules_name_the_rule(code, rule):
    result = check(code)
    assert result.error == "SecurityError", code
    assert rule in result.message and "not allowed" in result.message


def test_syntax_error_reports_line_and_column():
    result = check("x = 1\ny = (2 +\n")
    assert result.error == "SyntaxError"
    assert "line 2" in result.message and "column" in result.message


def test_nesting_and_literal_bounds():
    loops = "".join("    " * i + "for i%d in range(1):\n" % i for i in range(20))
    nested = loops + "    " * 20 + "pass"
    assert check(nested).error == "SecurityError"
    assert "nesting" in check(nested).message
    assert check("x = '" + "a" * 100_001 + "'").error == "SecurityError"
    assert check("x = [" + "1," * 100_001 + "]").error == "SecurityError"
    assert check("x = " + "(" * 5000 + ")" * 5000).error == "SyntaxError"
    assert validate("x = 1\n" * 20, WL, 10, 16, 100).error == "SecurityError"


def test_allowed_code_passes_and_returns_the_tree():
    code = ("import sympy as sp\nfrom math import sqrt\nclass A:\n    def __init__(self):\n"
            "        self.v = sqrt(4)\nif __name__ == '__main__':\n"
            "    print(A().v, getattr(sp, 'pi'))")
    assert not hasattr(check(code), "error")


def test_determinism_heuristic_disables_cache_for_randomness():
    assert is_deterministic(check("print(2 + 2)"))
    for code in ("import numpy\nprint(numpy.random.rand())", "import sympy\nsympy.randprime(1, 9)",
                 "import math\nprint(id(math))", "import numpy as np\nnp.random.default_rng()"):
        assert not is_deterministic(check(code)), code


def test_output_capture_keeps_head_and_tail_with_marker():
    cap = OutputCapture(100)
    for i in range(1000):
        cap.feed(f"{i:05d}\n".encode())
    text = cap.text()
    assert text.startswith("00000\n") and text.endswith("00999\n")
    assert "output truncated" in text and len(text) < 200
    small = OutputCapture(100)
    small.feed(b"abc")
    assert small.text() == "abc"


def test_scrub_paths_removes_host_directories():
    assert scrub_paths("No such file: '/root/.secret/dir/key.pem'") == "No such file: 'key.pem'"
    assert scrub_paths("1/2 and a/b") == "1/2 and a/b"


def test_classify_maps_reports_to_the_taxonomy():
    base = {"stdout": "", "stderr": "", "exec_ms": 1.0, "timed_out": False, "signal": None,
            "exit_code": 0, "result": None}
    assert classify({**base, "result": {"error": None}}, 500, 2.0).ok
    assert classify({**base, "timed_out": True}, 500, 2.0).error == "TimeoutError"
    assert classify({**base, "signal": signal.SIGXCPU}, 500, 2.0).error == "TimeoutError"
    crash = classify({**base, "signal": signal.SIGSEGV}, 500, 2.0)
    assert crash.error == "SystemError" and "SIGSEGV" in crash.message
    raised = classify({**base, "result": {"error": "KeyError", "detail": "'a' (line 3)"}}, 500, 1)
    assert raised.error == "KeyError" and "line 3" in raised.message
    assert "environment.timeout" in classify({**base, "timed_out": True}, 500, 2.0).message


def test_parse_survives_a_colliding_parse(monkeypatch):
    """A concurrent parse elsewhere can make CPython 3.11's AST constructor raise SystemError
    once; validation retries instead of failing the snippet."""
    import ast as ast_module

    from agentic_jax.sandbox import validator

    real_parse = ast_module.parse
    calls = []

    def flaky_parse(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=24, after=22)")
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(validator.ast, "parse", flaky_parse)
    tree = validator.validate("print(6 * 7)", ("math",), 65536, 16, 100_000)
    assert isinstance(tree, ast_module.Module) and len(calls) == 2

"""tools/build_tokenizer.py: it writes over the committed tokenizer only when asked to."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import build_tokenizer as tool  # noqa: E402

from agentic_jax.data.tokenizer import ASSET_DIR  # noqa: E402


@pytest.mark.parametrize("argv", [[], ["--out", "x", "--replace_builtin"],
                                  ["--out", str(ASSET_DIR)], ["--out", f"{ASSET_DIR}/."]])
def test_it_never_writes_over_the_asset_unasked(argv, monkeypatch, capsys):
    before = {p.name: p.read_bytes() for p in ASSET_DIR.iterdir() if p.is_file()}
    monkeypatch.setattr(tool.tokenizer, "tokenizer_corpus", lambda seed: pytest.fail("built"))
    with pytest.raises(SystemExit) as exit_:
        tool.main(argv)
    assert exit_.value.code == 2 and "--replace_builtin" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in ASSET_DIR.iterdir() if p.is_file()} == before


def test_it_builds_into_another_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(tool.tokenizer, "tokenizer_corpus",
                        lambda seed: ["print(1 + 2)", "x = 3\n"] * 50)
    tool.main(["--out", str(tmp_path), "--vocab_size", "300"])
    assert (tmp_path / "tokenizer.json").is_file()

"""The page's script, run by Node against a live server with a minimal DOM: each tool's
handler sends its request and shows the reply (not a real browser: layout is not checked). It
runs where no headless Chromium is installed; test_page_browser.py covers it otherwise."""

import json
import pathlib
import re
import shutil
import subprocess

import httpx
import pytest

from agentic_jax.serve import ServeLimits
from tests.serve.serve_testing import chromium, live_server

HERE = pathlib.Path(__file__).parent
PAGE = HERE.parents[1] / "agentic_jax" / "serve" / "static" / "index.html"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
@pytest.mark.skipif(chromium() is not None, reason="test_page_browser.py drives the same tools "
                                                   "in a real browser")
def test_every_tool_of_the_page_talks_to_the_server(tiny_policy, tmp_path):
    script = tmp_path / "page.js"
    script.write_text(re.search(r"<script>(.*)</script>", PAGE.read_text(), re.S).group(1))
    with live_server(tiny_policy, ServeLimits(batch_wait_ms=0)) as (url, _):
        shown = subprocess.run(["node", str(HERE / "page_driver.js"), url, str(script)],
                               check=True, capture_output=True, text=True, timeout=300)
        whole = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "What is 2 + 3?"}], "temperature": 0,
            "max_tokens": 20}).json()["choices"][0]
    out = json.loads(shown.stdout)
    streamed = "".join(text for kind, text in out["solve"]["boxes"] if kind != "muted")
    assert out["solve"]["error"] == "" and streamed.strip()
    assert streamed.replace("```python", "").replace("```", "").split() == \
        whole["message"]["content"].replace("```python", "").replace("```", "").split()
    assert out["solve"]["boxes"][-1] == ["muted", f"finished: {whole['finish_reason']}"]
    assert [row[1] for row in out["derivation"]] == ["", "✓", "✗"]
    assert out["plot"]["src"].startswith("blob:") and out["plot"]["error"] == ""
    assert "not an expression" in out["plot_error"]
    assert out["practice"]["question"].startswith("[arithmetic, difficulty")
    assert out["practice"]["feedback"][0].startswith("wrong: the answer is")
    assert json.loads(out["grade"]["summary"])["correct"] == 1
    assert out["grade"]["rows"] == 3 and out["grade"]["download"] and not out["grade"]["error"]

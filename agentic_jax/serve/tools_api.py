"""The page's JSON routes: homework grading, derivation checks, plots and practice.

    POST /api/grade            {"text": file contents, "format": "csv"|"jsonl", "hints": bool}
                               -> 200 every row graded, 207 some rows not (each in "errors"),
                               422 no readable row (the first named; 400: no readable file)
    POST /api/derivation       {"text": "one step per line"}
    POST /api/plot             {"text": "x^2; y = sin(x)", "xmin": -5, "xmax": 5} -> image/png
    POST /api/practice/next    {"learner": "ada"}
    POST /api/practice/answer  {"learner": "ada", "answer": "42"}

Blocking work (the grader, the sandbox) runs in the server's thread pool; hints are written by
the policy through the same worker as chat requests, so they share its batches.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import threading
from typing import Any, Literal

import pydantic
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from agentic_jax.serve.completions import read_json
from agentic_jax.serve.fair_queue import client_key
from agentic_jax.serve.hints import WorkerHints
from agentic_jax.serve.schema import RequestError, validation_message

MAX_LEARNERS = 1000
MAX_UPLOAD_BYTES = 8 << 20
# Wall time one graded upload may spend in the sandbox, and again in the grader: the sandbox is
# shared by every client, and a 10,000-row upload of looping code would otherwise hold it for
# hours (2 s per snippet).
GRADE_BUDGET_S = 60.0
DERIVATION_BUDGET_S = 10.0  # one derivation check (up to 200 steps)


class _Body(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)


class GradeBody(_Body):
    text: str = pydantic.Field(max_length=MAX_UPLOAD_BYTES)
    format: Literal["csv", "jsonl"]
    hints: bool = False


class DerivationBody(_Body):
    text: str = pydantic.Field(max_length=200_000)


class PlotBody(_Body):
    text: str = pydantic.Field(max_length=2000)
    xmin: float = -5.0
    xmax: float = 5.0

    @pydantic.field_validator("xmin", "xmax", mode="before")
    @classmethod
    def _number(cls, value):
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class PracticeBody(_Body):
    learner: str = pydantic.Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    answer: str | None = pydantic.Field(None, max_length=2000)


class ToolResources:
    """The tools' sandboxes and learners, made on first use and closed with the server."""

    def __init__(self, policy: Any, worker: Any, seed: int = 0):
        self.policy, self.worker, self.seed = policy, worker, seed
        self._lock = threading.Lock()
        self._sandboxes: dict[str, Any] = {}
        self._pool = None
        self._hint_slots = None
        self.hint_worker = WorkerHints(worker)
        self.learners: collections.OrderedDict[str, Any] = collections.OrderedDict()

    def sandbox(self, kind: str) -> Any:
        from agentic_jax.apps.sandboxes import grading_sandbox, plot_sandbox

        with self._lock:
            if kind not in self._sandboxes:
                self._sandboxes[kind] = (plot_sandbox() if kind == "plot"
                                         else grading_sandbox(num_workers=1))
            return self._sandboxes[kind]

    def hint_slots(self) -> Any:
        """The hint jobs all uploads together may keep in the worker's queue (a quarter)."""
        from agentic_jax.apps.hints import hint_slots

        with self._lock:
            if self._hint_slots is None:
                self._hint_slots = hint_slots(self.hint_worker)
            return self._hint_slots

    def learner(self, name: str) -> Any:
        """The learner called ``name`` (new ones start at the first stage; the least recently
        seen are forgotten past MAX_LEARNERS)."""
        from agentic_jax.apps.practice import Learner, practice_pool

        with self._lock:
            if self._pool is None:
                self._pool = practice_pool(self.seed)
            if name not in self.learners:
                self.learners[name] = Learner(self._pool, seed=self.seed)
                while len(self.learners) > MAX_LEARNERS:
                    self.learners.popitem(last=False)
            self.learners.move_to_end(name)
            return self.learners[name]

    def close(self) -> None:
        with self._lock:
            for sandbox in self._sandboxes.values():
                sandbox.close()
            self._sandboxes.clear()


async def _body(request: Request, model: type[_Body], max_bytes: int) -> Any:
    def validate(payload: Any) -> Any:
        if not isinstance(payload, dict):
            raise RequestError(400, "request body: expected a JSON object")
        try:
            return model.model_validate(payload)
        except pydantic.ValidationError as err:
            message, param = validation_message(err)
            raise RequestError(400, message, param) from None

    return await read_json(request, max_bytes, validate)


def add_routes(app: FastAPI, service: Any) -> None:
    tools: ToolResources = service.tools

    @app.post("/api/grade")
    async def grade(request: Request):
        body = await _body(request, GradeBody, MAX_UPLOAD_BYTES + 4096)
        # Rendered in the thread too: 10,000 graded rows are megabytes of JSON.
        return await run_in_threadpool(_grade, service, body, client_key(request))

    @app.post("/api/derivation")
    async def derivation(request: Request):
        from agentic_jax.apps.derivation import check_derivation

        body = await _body(request, DerivationBody, service.limits.max_body_bytes)
        try:
            result = await run_in_threadpool(check_derivation, body.text, DERIVATION_BUDGET_S)
        except ValueError as err:
            raise RequestError(400, str(err), "text") from None
        return {"ok": result.ok, "first_invalid": result.first_invalid,
                "steps": [dataclasses.asdict(s) for s in result.steps]}

    @app.post("/api/plot")
    async def plot(request: Request):
        from agentic_jax.apps.plot import PlotError, render_plot

        body = await _body(request, PlotBody, service.limits.max_body_bytes)
        try:
            result = await run_in_threadpool(render_plot, body.text, tools.sandbox("plot"),
                                             body.xmin, body.xmax)
        except PlotError as err:
            raise RequestError(400, str(err), "text") from None
        return Response(result.png, media_type="image/png")

    @app.post("/api/practice/next")
    async def practice_next(request: Request):
        body = await _body(request, PracticeBody, service.limits.max_body_bytes)
        learner = tools.learner(body.learner)
        problem = learner.current or learner.next_problem()
        return {"problem": {"id": problem.id, "stage": problem.stage,
                            "difficulty": problem.difficulty, "question": problem.question},
                "progress": learner.progress()}

    @app.post("/api/practice/answer")
    async def practice_answer(request: Request):
        body = await _body(request, PracticeBody, service.limits.max_body_bytes)
        if body.answer is None:
            raise RequestError(400, "answer: required", "answer")
        learner = tools.learner(body.learner)
        try:
            feedback = await run_in_threadpool(learner.answer, body.answer)
        except ValueError as err:
            raise RequestError(400, str(err), "learner") from None
        return {"feedback": dataclasses.asdict(feedback), "progress": learner.progress()}


def _grade(service: Any, body: GradeBody, client: str) -> JSONResponse:
    from agentic_jax.apps.grade import HTTP_STATUS, first_problem, grade_rows, outcome, summary
    from agentic_jax.apps.hints import policy_hint_fn
    from agentic_jax.apps.homework import parse_homework, write_results_csv

    try:
        rows = parse_homework(body.text, body.format)
    except ValueError as err:
        raise RequestError(400, f"text: {err}", "text") from None
    if outcome(rows) == "unreadable":
        raise RequestError(HTTP_STATUS["unreadable"], f"text: {first_problem(rows)}", "text")
    tools = service.tools
    hints = (policy_hint_fn(WorkerHints(service.worker, client), slots=tools.hint_slots())
             if body.hints else None)
    graded = grade_rows(rows, service.tools.sandbox("grade"), hints,
                        time_budget_s=GRADE_BUDGET_S)
    results = [dataclasses.asdict(r) for r in graded]
    out = io.StringIO()
    write_results_csv(results, out)
    result = outcome(rows, graded)
    return JSONResponse({"status": result, "summary": summary(graded),
                         "errors": [{"row": r.row, "error": r.error} for r in graded
                                    if r.verdict == "error"],
                         "rows": results, "csv": out.getvalue()},
                        status_code=HTTP_STATUS[result])

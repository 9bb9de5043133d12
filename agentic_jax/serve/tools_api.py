"""JSON routes of the page's tools."""

from __future__ import annotations

from typing import Any


class ToolResources:
    def __init__(self, policy: Any, worker: Any, seed: int = 0):
        self.policy, self.worker, self.seed = policy, worker, seed

    def close(self) -> None:
        pass


def add_routes(app, service) -> None:
    pass

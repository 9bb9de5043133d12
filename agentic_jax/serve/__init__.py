"""Serving a policy: an OpenAI-compatible chat API whose replies run the tool loop, the tools'
JSON routes and a web page, on one worker thread that batches concurrent requests.

    from agentic_jax.serve import Service, ServeLimits, create_app
"""

from agentic_jax.serve.app import Service, create_app
from agentic_jax.serve.loading import LoadedPolicy, load_policy
from agentic_jax.serve.schema import ChatRequest, ServeLimits
from agentic_jax.serve.worker import RolloutWorker, Job, QueueFull

__all__ = ["RolloutWorker", "ChatRequest", "Job", "LoadedPolicy", "QueueFull", "ServeLimits",
           "Service", "create_app", "load_policy"]

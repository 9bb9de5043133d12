"""A live server on a random loopback port, for API tests with a real HTTP client."""

import contextlib
import importlib.util
import shutil
import socket
import threading
import time

import uvicorn

from agentic_jax.serve import ServeLimits, Service, create_app


def chromium() -> tuple[str, str] | None:
    """(browser, chromedriver) paths when the headless-browser page tests can run, else None."""
    browser = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                    "google-chrome"))), None)
    driver = shutil.which("chromedriver")
    if browser is None or driver is None or importlib.util.find_spec("selenium") is None:
        return None
    return browser, driver


@contextlib.contextmanager
def live_server(policy, limits: ServeLimits, **service_args):
    """Yields (base_url, service) while uvicorn serves ``policy`` on 127.0.0.1:<free port>."""
    service = Service.start(policy, limits, **service_args)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", service
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        service.close()

"""Headless Chromium driven over the Chrome DevTools protocol, for the report's browser tests.

The protocol runs over a pipe (``--remote-debugging-pipe``: commands on the browser's fd 3, replies
on fd 4, each message JSON ended by a NUL byte), so no port, no websocket library. A page's console
errors, uncaught exceptions, failed loads and every request that is not ``file:``/``data:`` are
collected: a self-contained report makes none.

``NEURON_SIM_REQUIRE_BROWSER=1`` (set by .ci/run) turns "Chromium is not installed" from a skip into
a failure, so CI cannot pass without running the browser tests.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from neuronsim.env import NEURON_SIM_REQUIRE_BROWSER as REQUIRE_BROWSER

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--remote-debugging-pipe")
WINDOW = (1500, 1000)


def find_browser() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def browser_or_skip() -> str:
    path = find_browser()
    if path is None:
        message = f"no Chromium found (looked for {', '.join(NAMES)}); Debian: apt-get install -y chromium"
        if os.environ.get(REQUIRE_BROWSER) == "1":
            pytest.fail(f"{REQUIRE_BROWSER}=1 but {message}")
        pytest.skip(message)
    return path


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless browser with one page; use as a context manager."""

    def __init__(self, path: str, window=WINDOW, timeout: float = 60.0):
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="neuronsim-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire_pipes():  # the child's fd 3 reads our commands, fd 4 carries its replies
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [path, *FLAGS, f"--user-data-dir={self.profile}", f"--window-size={window[0]},{window[1]}",
                "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, pass_fds=(3, 4), preexec_fn=wire_pipes)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._replies: dict[int, dict] = {}
        self._events: queue.Queue = queue.Queue()
        self._lock = threading.Condition()
        self._next_id = 0
        self.session = None
        self.target = None
        self.console_errors: list[str] = []
        self.requests: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._stderr = []
        threading.Thread(target=lambda: self._stderr.extend(self.proc.stderr), daemon=True).start()

    # ---- transport
    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_browser, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._lock.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._lock:
                        self._replies[msg["id"]] = msg
                        self._lock.notify_all()
                else:
                    self._on_event(msg)

    def _on_event(self, msg: dict) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = params.get("exceptionDetails", {})
            what = d.get("exception", {}).get("description") or d.get("text")
            self.console_errors.append(f"uncaught: {what}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console_errors.append(f"console.{params['type']}: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.console_errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:", "about:")):
                self.requests.append(url)
        self._events.put(msg)

    def send(self, method: str, params: dict | None = None, *, session: bool = True) -> dict:
        with self._lock:
            self._next_id += 1
            ident = self._next_id
        msg = {"id": ident, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        with self._lock:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    stderr = b"".join(self._stderr)[-2000:]
                    raise BrowserError(f"no reply to {method} (browser stderr: {stderr!r})")
                self._lock.wait(min(left, 0.5))
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"timed out waiting for {method}")
            try:
                msg = self._events.get(timeout=left)
            except queue.Empty:
                continue
            if msg.get("method") == method:
                return msg.get("params", {})

    # ---- page
    def open(self, path: Path) -> None:
        """Open ``path`` in a fresh tab (the previous one closed, its errors forgotten) and wait
        until the report has started (``data-ready`` on the root element)."""
        if self.session:
            self.send("Target.closeTarget", {"targetId": self.target}, session=False)
            self.session = None
        self.console_errors, self.requests = [], []
        while not self._events.empty():
            self._events.get_nowait()
        self.target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": self.target, "flatten": True},
                                 session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.wait_event("Page.loadEventFired")
        self.wait_for("document.documentElement.dataset.ready === '1'")

    def eval(self, expression: str):
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float | None = None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise BrowserError(f"timed out waiting for {expression}")

    def frame(self) -> None:
        """Wait until the page has drawn what is queued (two animation frames)."""
        self.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")

    def wheel(self, x: float, y: float, delta_y: float, *, ctrl: bool = False) -> None:
        self.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
        self.send("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": x, "y": y, "deltaX": 0,
                                               "deltaY": delta_y, "modifiers": 2 if ctrl else 0})
        self.frame()

    def mouse(self, kind: str, x: float, y: float, clicks: int = 1) -> None:
        params = {"type": kind, "x": x, "y": y}
        if kind in ("mousePressed", "mouseReleased"):
            params.update(button="left", clickCount=clicks)
        self.send("Input.dispatchMouseEvent", params)

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        params = {"format": "png", "captureBeyondViewport": full_page}
        if full_page:
            size = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": min(size[1], 16000), "scale": 1}
        data = self.send("Page.captureScreenshot", params)["data"]
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", session=False)
                except BrowserError:
                    pass
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(10)
        finally:
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

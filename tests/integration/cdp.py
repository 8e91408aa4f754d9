"""A small Chrome DevTools Protocol client for the browser test: headless Chromium, one page, no network.

Why CDP and not `chromium --dump-dom`: only the protocol reports every JavaScript error as
an event (Runtime.exceptionThrown for uncaught exceptions, Runtime.consoleAPICalled for
console.error, Log.entryAdded for the browser's own errors), every request the page makes
(Network.requestWillBeSent, to prove a report fetches nothing), and lets the test wait for
a condition inside the page (the plots drawn) before it takes a screenshot.

The protocol is JSON over one websocket: commands carry an id and get a reply with the same
id; events have a "method" and no id, and arrive interleaved with replies. Everything here
is synchronous (websockets' sync client), one page at a time.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

# URL schemes a self-contained page may use: the file itself, inline data, and blank frames.
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")


class ChromiumMissing(RuntimeError):
    pass


@dataclass
class PageReport:
    """What happened while a page loaded: its JavaScript errors, and any request off the machine."""

    url: str
    errors: list[str] = field(default_factory=list)
    remote_requests: list[str] = field(default_factory=list)


def find_chromium() -> str:
    """The Chromium binary (Debian's `chromium`, installed by scripts/install-system-packages.sh)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise ChromiumMissing("Chromium is not installed; run scripts/install-system-packages.sh "
                          "(as root) or apt-get install chromium.")


class Browser:
    """Headless Chromium driven over CDP; use as a context manager so the process never outlives the test."""

    def __init__(self, width: int = 1280, height: int = 900, timeout: float = 60.0):
        self.width, self.height, self.timeout = width, height, timeout
        binary = find_chromium()
        self._profile = tempfile.mkdtemp(prefix="kafkaesque-chromium-")
        argv = [binary, "--headless=new", "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}", f"--window-size={width},{height}",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage",
                # No name resolves: a report that tried to fetch anything remote could not leak
                # a request off the machine, and the Network events below still name it.
                "--host-resolver-rules=MAP * ~NOTFOUND",
                # plotly's scattergl traces need WebGL; headless Chromium without a GPU has it
                # only through SwiftShader, which must be asked for explicitly.
                "--use-angle=swiftshader", "--enable-unsafe-swiftshader",
                "about:blank"]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium refuses to start as root with its sandbox
        self._log = open(Path(self._profile) / "chromium.log", "wb")
        self._proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        self._next_id = 0
        self._events: list[dict[str, Any]] = []
        self._stack = contextlib.ExitStack()
        try:
            # One page's screenshots are megabytes (no size limit); CDP needs no keepalive pings.
            self._ws = self._stack.enter_context(
                connect(self._page_ws_url(), max_size=None, open_timeout=timeout, ping_interval=None))
        except BaseException:
            self.close()
            raise

    # --- process and connection --------------------------------------------------------------

    def _page_ws_url(self) -> str:
        """Chromium writes its port to DevToolsActivePort when it is ready; /json/list names the page."""
        port_file = Path(self._profile) / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"Chromium exited with status {self._proc.returncode}: {self.log_tail()}")
            if port_file.exists() and port_file.read_text().strip():
                port = int(port_file.read_text().split()[0])
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                    targets = json.load(r)
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise RuntimeError(f"Chromium did not open its DevTools port in {self.timeout:.0f} s: {self.log_tail()}")

    def log_tail(self, chars: int = 2000) -> str:
        self._log.flush()
        return (Path(self._profile) / "chromium.log").read_text(errors="replace")[-chars:]

    def close(self) -> None:
        self._stack.close()  # the websocket, if it was opened
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- the protocol --------------------------------------------------------------------------

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept in order."""
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no reply to {method} in {self.timeout:.0f} s")
            msg = json.loads(self._ws.recv(timeout=left))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method} failed: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self._events.append(msg)

    def _pump(self, seconds: float) -> None:
        """Collect the events that arrive within `seconds` (errors can come after the load event)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = json.loads(self._ws.recv(timeout=left))
            except TimeoutError:
                return
            if "method" in msg:
                self._events.append(msg)

    def evaluate(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"evaluating {expression!r} threw: {_exception_text(r['exceptionDetails'])}")
        return r["result"].get("value")

    # --- pages ---------------------------------------------------------------------------------

    def open(self, path: str | os.PathLike, ready: str = "true", settle: float = 1.0) -> PageReport:
        """Load a local file, wait until it has loaded and `ready` (a JS expression) is true, and
        report what went wrong.

        The returned report lists every uncaught exception, console.error/assert and browser
        error logged from the navigation on, and every request to a non-local URL.
        """
        self._events.clear()
        for domain in ("Runtime", "Log", "Network", "Page"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=self.width, height=self.height,
                  deviceScaleFactor=1, mobile=False)
        url = Path(path).resolve().as_uri()
        # Mark the current document: until the new one has replaced it, `ready` must not be asked
        # (the old page, or about:blank, can satisfy it; Page.navigate returns before the load).
        self.evaluate("window.__kafkaesqueOldPage = true")
        nav = self.send("Page.navigate", url=url)
        if nav.get("errorText"):
            raise RuntimeError(f"could not open {url}: {nav['errorText']}")
        deadline = time.monotonic() + self.timeout
        loaded = "!window.__kafkaesqueOldPage && document.readyState === 'complete'"
        while not self.evaluate(f"!!({loaded} && ({ready}))"):
            if time.monotonic() > deadline:
                break  # the caller's checks say what is missing; the errors below say why
            self._pump(0.2)
        self._pump(settle)
        report = PageReport(url)
        for ev in self._events:
            method, p = ev["method"], ev.get("params", {})
            if method == "Runtime.exceptionThrown":
                report.errors.append("uncaught exception: " + _exception_text(p["exceptionDetails"]))
            elif method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                report.errors.append(f"console.{p['type']}: {text}")
            elif method == "Log.entryAdded" and p["entry"].get("level") == "error":
                e = p["entry"]
                report.errors.append(f"browser {e.get('source')} error: {e.get('text')} {e.get('url', '')}".strip())
            elif method == "Network.requestWillBeSent":
                req_url = p["request"]["url"]
                if not req_url.startswith(LOCAL_SCHEMES):
                    report.remote_requests.append(req_url)
        return report

    def screenshot(self, out: str | os.PathLike, full_page: bool = False) -> Path:
        """A PNG of the first screen (width x height), or of the whole page."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            m = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": m["width"], "height": m["height"], "scale": 1})
        data = self.send("Page.captureScreenshot", **params)["data"]
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out


def _exception_text(details: dict[str, Any]) -> str:
    exc = details.get("exception") or {}
    where = f" at {details.get('url', '')}:{details.get('lineNumber', '?')}"
    return (exc.get("description") or details.get("text") or "?").splitlines()[0] + where

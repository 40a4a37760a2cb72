"""A real headless Chromium for tests: load a page, collect console errors, inspect the DOM, screenshot.

    with Browser() as browser:
        page = browser.load("report.html", inspect="document.title", screenshot="shot.png")
        assert page.console_errors == [] and page.dom == "..."

Chromium is driven through the DevTools protocol over `--remote-debugging-pipe` (NUL-terminated
JSON on file descriptors 3 and 4), so there is no port, no websocket client and no third-party
driver: standard library only. `find_chromium()` looks for Debian's `chromium` /
`chromium-headless-shell` (or `$CHROMIUM`); `.ci/run` installs it.

Console errors are everything the page would show in red in DevTools: `console.error` calls,
uncaught exceptions, and browser log entries of level error (a blocked or failed resource load, a
Content-Security-Policy violation).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BINARIES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


def find_chromium() -> str | None:
    """Path of a Chromium binary: `$CHROMIUM`, else the first of `BINARIES` on PATH."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return shutil.which(explicit) or (explicit if os.access(explicit, os.X_OK) else None)
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    """What loading one page produced."""

    url: str
    console_errors: list[str] = field(default_factory=list)
    dom: Any = None  # the JSON value of the `inspect` expression
    screenshot: Path | None = None
    status: int | None = None  # the HTTP status of the page itself (http(s) URLs)


class DevToolsError(RuntimeError):
    """Chromium answered a command with an error, or did not answer in time."""


def _high_pipe() -> tuple[int, int]:
    """`os.pipe()` moved to fds >= 10 (close-on-exec), so the child can `dup2` them onto 3 and 4 in any order."""
    read, write = os.pipe()
    high = (fcntl.fcntl(read, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 10))
    os.close(read)
    os.close(write)
    return high


class _Pipe:
    """One browser process and its DevTools pipe (fd 3: commands in, fd 4: replies and events out)."""

    def __init__(self, binary: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        self._stderr = open(os.path.join(self.profile, "stderr.log"), "w+b")  # closed in close()
        to_browser_r, self._to_browser = _high_pipe()
        self._from_browser, from_browser_w = _high_pipe()

        def wire_fds() -> None:  # in the child: fd 3 reads our commands, fd 4 writes replies (both inheritable)
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        # no pass_fds: it would close 3 and 4 again after `wire_fds`; every other fd of ours is
        # close-on-exec (PEP 446), so only 0-4 reach Chromium
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            preexec_fn=wire_fds,
            close_fds=False,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DevToolsError(f"Chromium sent nothing for {self.timeout_s:g} s")
            ready, _, _ = select.select([self._from_browser], [], [], left)
            if ready:
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise DevToolsError(f"Chromium closed its DevTools pipe (exit code {self.proc.poll()})")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        """Send a command and wait for its reply, keeping the events that arrive meanwhile."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise DevToolsError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, session: str | None = None) -> dict[str, Any]:
        """The first event `method` (already received or arriving within the timeout)."""
        deadline = time.monotonic() + self.timeout_s
        seen = 0
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method and (session is None or event.get("sessionId") == session):
                    return event
            seen = len(self.events)
            self.events.append(self._read_message(deadline))

    def close(self) -> str:
        """Close the browser (politely, then by its pid) and return what it wrote to stderr."""
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close")
                except (DevToolsError, OSError):
                    pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self._stderr.seek(0)
            return self._stderr.read().decode(errors="replace")
        finally:
            self._stderr.close()
            for fd in (self._to_browser, self._from_browser):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            out.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            out.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip())
    return out


class Browser:
    """One headless Chromium for several page loads (each in its own tab); a context manager."""

    def __init__(self, binary: str | None = None, *, timeout_s: float = 60.0) -> None:
        binary = binary or find_chromium()
        if binary is None:
            raise FileNotFoundError("no Chromium found (apt-get install chromium, or set $CHROMIUM)")
        self._pipe = _Pipe(binary, timeout_s)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> str:
        """Close the browser; returns its stderr."""
        return self._pipe.close()

    def load(
        self,
        path: str | os.PathLike[str],
        *,
        inspect: str = "null",
        screenshot: str | os.PathLike[str] | None = None,
        width: int = 1200,
        cookies: list[dict[str, Any]] | None = None,
        wait_for: str | None = None,
    ) -> PageLoad:
        """Open the local file `path` (or an `http(s)://` URL) in a new tab and wait for its load event.

        `cookies` (DevTools `Network.setCookie` parameters, e.g. `{"name", "value", "url"}`) are set first.

        `wait_for` is a JavaScript expression polled (every 0.1 s, within the browser's timeout) after the load
        event until it is truthy: for pages a script renders after loading (Airflow's UI).

        `inspect` is a JavaScript expression evaluated in the loaded page; its JSON value is `dom`.
        `screenshot` (a .png path) gets a full-page screenshot `width` CSS pixels wide.
        """
        pipe = self._pipe
        text = os.fspath(path)
        url = text if text.startswith(("http://", "https://")) else Path(path).resolve().as_uri()
        result = PageLoad(url)
        first_event = len(pipe.events)
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.send(f"{domain}.enable", session=session)
            for cookie in cookies or ():
                pipe.send("Network.setCookie", cookie, session=session)
            pipe.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False},
                session=session,
            )
            pipe.send("Page.navigate", {"url": url}, session=session)
            pipe.wait_for("Page.loadEventFired", session)
            if wait_for is not None:
                deadline = time.monotonic() + pipe.timeout_s
                while True:
                    probe = pipe.send(
                        "Runtime.evaluate", {"expression": f"!!({wait_for})", "returnByValue": True}, session=session
                    )
                    if probe.get("result", {}).get("value") is True:
                        break
                    if time.monotonic() > deadline:
                        raise DevToolsError(f"{wait_for!r} still false after {pipe.timeout_s:g} s at {url}")
                    time.sleep(0.1)
            value = pipe.send(
                "Runtime.evaluate", {"expression": f"JSON.stringify({inspect})", "returnByValue": True}, session=session
            )
            if "exceptionDetails" in value:
                raise DevToolsError(f"inspect expression failed: {value['exceptionDetails']}")
            result.dom = json.loads(value["result"].get("value") or "null")
            if screenshot is not None:
                size = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
                shot = pipe.send(
                    "Page.captureScreenshot",
                    {"format": "png", "captureBeyondViewport": True, "clip": clip},
                    session=session,
                )
                result.screenshot = Path(screenshot)
                result.screenshot.parent.mkdir(parents=True, exist_ok=True)
                result.screenshot.write_bytes(base64.b64decode(shot["data"]))
            pipe.send("Runtime.evaluate", {"expression": "1"}, session=session)  # let stragglers arrive
        finally:
            try:
                pipe.send("Target.closeTarget", {"targetId": target})
            except (DevToolsError, OSError):
                pass  # the browser is gone: the error that got us here says why
        mine = [e for e in pipe.events[first_event:] if e.get("sessionId") == session]
        result.console_errors = _console_errors(mine)
        documents = [
            e["params"]["response"]["status"]
            for e in mine
            if e.get("method") == "Network.responseReceived" and e["params"].get("type") == "Document"
        ]
        result.status = documents[0] if documents else None
        return result

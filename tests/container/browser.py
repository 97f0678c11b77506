"""Headless Chromium over the DevTools protocol, enough to read a page behind HTTP basic auth.

Chromium refuses fetch() from a page whose URL carries credentials (`http://user:pass@host/`), and
MLflow's UI loads everything by fetch, so the Authorization header is set on the browser instead.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    def __init__(self, ws_url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=60)
        self.n = 0

    def call(self, method: str, **params: Any) -> dict:
        self.n += 1
        self.ws.send(json.dumps({"id": self.n, "method": method, "params": params}))
        while True:  # events arrive in between; keep the reply to this call
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.n:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def text(self) -> str:
        return self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                         returnByValue=True)["result"].get("value", "")


@contextlib.contextmanager
def chromium(user: str, password: str) -> Iterator[Page]:
    """A page of a fresh headless Chromium that sends basic-auth credentials with every request."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, "chromium missing: apt-get install chromium (.ci/run installs it)"
    port = _free_port()
    # Chromium's helper processes may still write the profile as it closes: no error on cleanup.
    with tempfile.TemporaryDirectory(prefix="fedcore-chromium-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                 f"--remote-debugging-port={port}", f"--user-data-dir={profile}",
                                 "--window-size=1400,900", "about:blank"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            targets = None
            for _ in range(100):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                        targets = [t for t in json.load(r) if t.get("type") == "page"]
                    if targets:
                        break
                except OSError:
                    pass
                time.sleep(0.2)
            assert targets, "headless Chromium did not open its DevTools port"
            page = Page(targets[0]["webSocketDebuggerUrl"])
            token = base64.b64encode(f"{user}:{password}".encode()).decode()
            page.call("Network.enable")
            page.call("Network.setExtraHTTPHeaders", headers={"Authorization": f"Basic {token}"})
            yield page
            page.ws.close()
        finally:  # the browser and its helper processes, as one group
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


def page_text(url: str, user: str, password: str, wait_for: tuple[str, ...], timeout: float = 60,
              screenshot: str | None = None) -> str:
    """The rendered text of `url` once every string of `wait_for` shows (or the timeout passes)."""
    with chromium(user, password) as page:
        page.call("Page.enable")
        page.call("Page.navigate", url=url)
        deadline, text = time.time() + timeout, ""
        while time.time() < deadline:
            text = page.text()
            if all(w in text for w in wait_for):
                break
            time.sleep(0.5)
        if screenshot:
            data = page.call("Page.captureScreenshot", format="png")["data"]
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(data))
        return text

"""How tracking calls reach their endpoints: bounded retries, and naming the endpoint that failed.

`MlflowTracker` sends every client call through `Transport.call`. A failure that may pass
(connection refused or reset, a timeout, HTTP 429 or 5xx) is retried with exponential backoff,
but the time spent retrying is capped per endpoint over the tracker's whole life: the MLflow
tracking server and the artifact store (S3, directly or behind the server) each get
`retry_seconds` (tracking.retry_seconds, else FEDCORE_TRACKING_RETRY_SECONDS, else 60).
An endpoint that has spent its budget is *down*: later calls to it fail at once with
`TrackingUnavailable`, which `fedcore.tracking.resilient` turns into degraded tracking with a
local journal. Refused credentials (HTTP 401/403 from an `mlflow server --app-name basic-auth`)
are `TrackingAuthError`, at once and with no retries: one line naming MLFLOW_TRACKING_USERNAME /
MLFLOW_TRACKING_PASSWORD. It is a kind of `TrackingUnavailable`, so a run whose credentials stop
working mid-way journals what MLflow refused instead of losing it, and `fedcore tracking sync`
keeps its journal when it is refused. Any other failure (a bad request, an unknown run) is a
plain `TrackingError`, at once.

MLflow's own HTTP retries (7, with exponential backoff: minutes per call) are off inside a
call, as this loop retries instead (and its retries would hide the server's 5xx answer behind a
reset connection); its 120 s timeout and botocore's attempts are turned down unless the user
set MLFLOW_HTTP_REQUEST_TIMEOUT / AWS_MAX_ATTEMPTS.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from fedcore.errors import TrackingError

T = TypeVar("T")
DEFAULT_RETRY_SECONDS = 60.0
RETRY_ENV = "FEDCORE_TRACKING_RETRY_SECONDS"
MLFLOW, ARTIFACTS = "mlflow", "artifacts"
FIX_HINT = "start the server or fix tracking.uri / MLFLOW_TRACKING_URI"
S3_HINT = "start the S3 server or fix MLFLOW_S3_ENDPOINT_URL and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
PROXY_HINT = "check the S3 endpoint and credentials the MLflow server was started with"
_UNREACHABLE = re.compile(r"Max retries exceeded|Failed to establish|timed out|Connection refused|Connection "
                          r"aborted|RemoteDisconnected|Connection reset|Read timed out|timeout", re.I)
_SERVER_ERROR = re.compile(r"(error code|status code|response code|too many) (429|5\d\d)\b", re.I)
_BOTO_TRANSIENT = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                   "ProxyConnectionError", "HTTPClientError")
_BOTO_TRANSIENT_CODES = ("500", "502", "503", "504", "SlowDown", "ServiceUnavailable", "RequestTimeout",
                         "InternalError", "Throttling")
AUTH_VARS = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
_AUTH_CODES = {"UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403}
_AUTH_TEXT = re.compile(r"error code (401|403)\b", re.I)
_FORCED_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
_DEFAULT_ENV = {"AWS_MAX_ATTEMPTS": "1"}


class TrackingUnavailable(TrackingError):
    """An endpoint stayed unreachable through its retry budget; `endpoint` names it."""

    def __init__(self, message: str, endpoint: Endpoint) -> None:
        super().__init__(message)
        self.endpoint = endpoint


class TrackingAuthError(TrackingUnavailable):
    """The MLflow server refused this client's credentials (401) or their user's rights (403)."""


def auth_status(exc: BaseException) -> int | None:
    """401 or 403 when `exc` is an MLflow server refusing the client's credentials, else None."""
    code = _AUTH_CODES.get(str(getattr(exc, "error_code", "")))
    if code:
        return code
    found = _AUTH_TEXT.search(str(exc))
    return int(found.group(1)) if found else None


def auth_message(uri: str, what: str, status: int) -> str:
    """The one line a refused credential gets: which variables to set, and to what."""
    if status == 401:
        return (f"MLflow at {uri} refused {what}: not authenticated (HTTP 401); set {AUTH_VARS} to a user of its "
                "basic-auth app (in the cluster they come from the fedcore-mlflow-client Secret)")
    return (f"MLflow at {uri} refused {what}: permission denied (HTTP 403); the user in MLFLOW_TRACKING_USERNAME "
            "needs EDIT on the experiment (MANAGE on a registered model); grant it as the admin, or set "
            f"{AUTH_VARS} to a user who has it")


@dataclass(frozen=True)
class Endpoint:
    key: str  # MLFLOW or ARTIFACTS: which budget it spends
    kind: str  # what a user should look at: "MLflow", "S3", "the S3 store behind the MLflow server"
    url: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.url}"


def retry_seconds(configured: float | None = None) -> float:
    """The retry budget: the config's value, else FEDCORE_TRACKING_RETRY_SECONDS, else 60 s."""
    if configured is not None:
        return float(configured)
    raw = os.environ.get(RETRY_ENV)
    try:
        value = float(raw) if raw else DEFAULT_RETRY_SECONDS
    except ValueError:
        raise TrackingError(f"{RETRY_ENV}='{raw}' is not a number of seconds; set e.g. 60, or unset it") from None
    if not value >= 0 or value == float("inf"):
        raise TrackingError(f"{RETRY_ENV}='{raw}' must be a finite number of seconds >= 0")
    return value


def one_line(exc: BaseException | str, limit: int = 240) -> str:
    text = re.sub(r"\s+", " ", str(exc)).strip() or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _s3_endpoint() -> str:
    for name in ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if os.environ.get(name):
            return os.environ[name]
    return "AWS S3"


def _is_boto(exc: BaseException) -> bool:
    return any(c.__module__.split(".")[0] in ("botocore", "boto3") for c in type(exc).__mro__)


@contextlib.contextmanager
def temp_env(overrides: dict[str, str]) -> Iterator[None]:
    """`overrides` in os.environ for the block; the old values (or their absence) after it."""
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _call_env(timeout: float) -> contextlib.AbstractContextManager[None]:
    """No inner MLflow retries, and a timeout within the budget unless the user set one."""
    defaults = {**_DEFAULT_ENV, "MLFLOW_HTTP_REQUEST_TIMEOUT": str(int(max(5.0, min(timeout, 30.0))))}
    return temp_env({**{k: v for k, v in defaults.items() if k not in os.environ}, **_FORCED_ENV})


class Transport:
    """Runs MLflow client calls for one tracker with bounded retries (see the module docstring).

    uri: the tracking URI. An upload the server answers with HTTP 5xx failed behind it, at its
    artifact store (S3 for a server started with `--artifacts-destination s3://...`).
    """

    def __init__(self, uri: str, retry_s: float | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        self.uri = uri
        self.budget = {MLFLOW: retry_seconds(retry_s), ARTIFACTS: retry_seconds(retry_s)}
        self.down: dict[str, TrackingUnavailable] = {}
        self._sleep = sleep
        self._patient = True

    def impatient(self) -> None:
        """One attempt per call from now on: the process is ending (failure, SIGTERM)."""
        self._patient = False

    def revive(self) -> None:
        """Give every down endpoint one more attempt (at the end of a run, before giving up)."""
        self.down.clear()

    def call(self, what: str, fn: Callable[..., T], *args: Any, artifact: bool = False, **kwargs: Any) -> T:
        key = ARTIFACTS if artifact else MLFLOW
        for dep in (MLFLOW, key):  # artifact calls need the tracking server too
            if dep in self.down:
                raise self.down[dep]
        attempt, spent = 0, 0.0
        while True:
            start = time.monotonic()
            try:
                with _call_env(self.budget[key] - spent if self._patient else 5.0):
                    return fn(*args, **kwargs)
            except Exception as exc:  # classified below; bugs (TypeError, ...) re-raise unchanged
                refused = auth_status(exc)
                if refused:  # retrying the same credentials cannot help
                    err = TrackingAuthError(auth_message(self.uri, what, refused), Endpoint(MLFLOW, "MLflow", self.uri))
                    if refused == 401:  # every later call would be refused too
                        self.down[MLFLOW] = err
                    raise err from None
                endpoint = self._transient(exc, artifact)
                if endpoint is None:
                    raise self._permanent(what, exc) from None
                spent += time.monotonic() - start
                wait = min(0.5 * 2**attempt, 10.0)
                left = self.budget[endpoint.key] - spent
                if not self._patient or left <= 0:
                    raise self._give_up(what, exc, endpoint, spent) from None
                self._sleep(min(wait, left))
                spent += min(wait, left)
                attempt += 1

    def _give_up(self, what: str, exc: BaseException, endpoint: Endpoint, spent: float) -> TrackingUnavailable:
        self.budget[endpoint.key] = max(0.0, self.budget[endpoint.key] - spent)
        hint = S3_HINT if endpoint.kind == "S3" else PROXY_HINT if endpoint.key == ARTIFACTS else FIX_HINT
        where = f"its S3 artifact store at {endpoint.url}" if endpoint.kind == "S3" else (
            f"the S3 artifact store behind the MLflow server at {endpoint.url} (the server answers, artifact "
            "uploads fail)" if endpoint.key == ARTIFACTS else endpoint.url)
        err = TrackingUnavailable(f"MLflow {what} failed on {where} after {spent:.0f} s of retries: "
                                  f"{one_line(exc, 160)}; {hint}", endpoint)
        self.down[endpoint.key] = err
        return err

    def _permanent(self, what: str, exc: BaseException) -> Exception:
        if _is_boto(exc):
            # Artifacts go straight from this client to an s3:// store: unreachable endpoints and
            # bad keys surface as boto errors.
            return TrackingError(f"MLflow {what} failed on its S3 artifact store at {_s3_endpoint()}: "
                                 f"{one_line(exc)}; {S3_HINT}")
        from mlflow.exceptions import MlflowException

        if isinstance(exc, MlflowException | OSError):
            return TrackingError(f"MLflow {what} failed on {self.uri}: {one_line(exc)}")
        return exc

    def _transient(self, exc: BaseException, artifact: bool) -> Endpoint | None:
        """The endpoint a passing failure came from, or None when retrying cannot help."""
        if _is_boto(exc):
            # boto3 wraps the cause of a failed upload (S3UploadFailedError): look down the chain.
            chain: list[BaseException] = []
            cur: BaseException | None = exc
            while cur is not None and len(chain) < 8:
                chain.append(cur)
                cur = cur.__cause__ or cur.__context__
            names = {c.__name__ for e in chain for c in type(e).__mro__}
            codes = {str((getattr(e, "response", None) or {}).get("Error", {}).get("Code", "")) for e in chain}
            if names & set(_BOTO_TRANSIENT) or codes & set(_BOTO_TRANSIENT_CODES) \
                    or "Could not connect to the endpoint" in str(exc):
                return Endpoint(ARTIFACTS, "S3", _s3_endpoint())
            return None
        from mlflow.exceptions import MlflowException

        if not isinstance(exc, MlflowException | OSError):
            return None
        text = str(exc)
        if _UNREACHABLE.search(text) and not _SERVER_ERROR.search(text):
            return Endpoint(MLFLOW, "MLflow", self.uri)
        if _SERVER_ERROR.search(text) and artifact:
            # The server answered (with 5xx), so it is up: its artifact store behind it is not.
            return Endpoint(ARTIFACTS, "the S3 store behind the MLflow server", self.uri)
        if _SERVER_ERROR.search(text) or isinstance(exc, OSError):
            return Endpoint(MLFLOW, "MLflow", self.uri)
        return None

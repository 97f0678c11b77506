"""How tracking calls reach their endpoints: MLflow's own retries, sized by fedcore's budget.

`MlflowTracker` sends every client call through `Transport.call`. MLflow's HTTP client retries
refused or reset connections, timeouts and HTTP 408/429/5xx with exponential backoff, for the
tracking server and the artifacts it proxies alike; fedcore only sizes that: the budget
(tracking.retry_seconds, else FEDCORE_TRACKING_RETRY_SECONDS) becomes the MLFLOW_HTTP_REQUEST_MAX_RETRIES
/ _BACKOFF_FACTOR schedule whose waits fit in it (`mlflow_retries`). With no budget set, a user's own
MLFLOW_HTTP_REQUEST_* variables stand, else the budget is 60 s. Uploads straight to an s3:// store
retry as botocore is set (AWS_MAX_ATTEMPTS, AWS_RETRY_MODE).

What MLflow cannot decide for a run that must not stall stays here: a call that fails through
the retries marks its endpoint *down* (`TrackingUnavailable`; `fedcore.tracking.resilient` then
journals), later calls to it fail at once, and it gets one attempt per call from then on (`revive`
at a run's end), as does every call of a process going down (`impatient`). Refused credentials
(HTTP 401/403, which MLflow never retries) are `TrackingAuthError`, a kind of `TrackingUnavailable`
whose one line names MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD: a run whose credentials stop
working journals what MLflow refused, and `fedcore tracking sync` keeps its journal. Any other
failure (a bad request, an unknown run) is a plain `TrackingError`, at once.
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
RETRIES_ENV, BACKOFF_ENV, TIMEOUT_ENV = ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR",
                                         "MLFLOW_HTTP_REQUEST_TIMEOUT")
# MLflow refuses more than 10 retries (_MLFLOW_HTTP_REQUEST_MAX_RETRIES_LIMIT) and urllib3 waits at
# most 120 s between two attempts, so no setting waits longer than 9 * 120 s for one call.
MAX_RETRIES, MAX_WAIT = 10, 120.0
MAX_RETRY_SECONDS = (MAX_RETRIES - 1) * MAX_WAIT
MLFLOW, ARTIFACTS = "mlflow", "artifacts"
FIX_HINT = "start the server or fix tracking.uri / MLFLOW_TRACKING_URI"
S3_HINT = "start the S3 server or fix MLFLOW_S3_ENDPOINT_URL and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"
PROXY_HINT = "check the S3 endpoint and credentials the MLflow server was started with"
UNREACHABLE = re.compile(r"Max retries exceeded|Failed to establish|timed out|Connection refused|Connection "
                         r"aborted|RemoteDisconnected|Connection reset|Read timed out|timeout", re.I)
_SERVER_ERROR = re.compile(r"(error code|status code|response code|too many) (408|429|5\d\d)\b", re.I)
_BOTO_TRANSIENT = ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError",
                   "ProxyConnectionError", "HTTPClientError")
_BOTO_TRANSIENT_CODES = ("500", "502", "503", "504", "SlowDown", "ServiceUnavailable", "RequestTimeout",
                         "InternalError", "Throttling")
AUTH_VARS = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD"
_AUTH_CODES = {"UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403}
_AUTH_TEXT = re.compile(r"error code (401|403)\b", re.I)


class TrackingUnavailable(TrackingError):
    """An endpoint stayed unreachable through MLflow's retries (or is down since); `endpoint` names it."""

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
    key: str  # MLFLOW or ARTIFACTS: which endpoint goes down
    kind: str  # what a user should look at: "MLflow", "S3", "the S3 store behind the MLflow server"
    url: str

    def __str__(self) -> str:
        return f"{self.kind} at {self.url}"


def retry_seconds(configured: float | None = None) -> float | None:
    """The retry budget of one call: the config's value, else FEDCORE_TRACKING_RETRY_SECONDS; None when
    neither is set (then MLflow's own variables as the user set them, else 60 s: see `Transport`)."""
    if configured is not None:
        value, source = float(configured), f"tracking.retry_seconds={configured}"
    else:
        raw = os.environ.get(RETRY_ENV)
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise TrackingError(f"{RETRY_ENV}='{raw}' is not a number of seconds; set e.g. 60, or unset it") from None
        source = f"{RETRY_ENV}='{raw}'"
    if not 0 <= value <= MAX_RETRY_SECONDS:  # also refuses nan
        raise TrackingError(f"{source} must be between 0 and {MAX_RETRY_SECONDS:.0f} seconds (MLflow retries a call "
                            f"at most {MAX_RETRIES} times, at most {MAX_WAIT:.0f} s apart)")
    return value


def backoff_waits(retries: int, factor: int) -> list[float]:
    """The seconds urllib3 waits before each of MLflow's `retries` (jitter aside): nothing before the
    first, then factor * 2**k, at most 120 s. MLflow adds up to MLFLOW_HTTP_REQUEST_BACKOFF_JITTER to each."""
    return [0.0 if k == 1 else min(MAX_WAIT, float(factor * 2 ** (k - 1))) for k in range(1, retries + 1)]


def mlflow_retries(budget: float) -> tuple[int, int]:
    """(MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR) for a budget of seconds.

    The schedule whose waits come closest to `budget` without passing it, and of those the one that
    tries most often: 0 s is a single attempt, 3 s is (2, 1) (waits 0, 2), 60 s is (5, 2) (waits 0,
    4, 8, 16, 32), 120 s is (5, 4). MLflow's factor is a whole number, so not every budget is met.
    """
    if budget <= 0:
        return 0, 1
    schedules = [(sum(backoff_waits(r, f)), r, -f)
                 for r in range(1, MAX_RETRIES + 1) for f in range(1, int(MAX_WAIT) + 1)]
    _, retries, factor = max(x for x in schedules if x[0] <= budget)
    return retries, -factor


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




class Transport:
    """Runs MLflow client calls for one tracker under MLflow's retry settings (module docstring).

    uri: the tracking URI. retry_s: the budget (None: tracking.retry_seconds was not set). An
    upload the server answers with HTTP 5xx failed behind it, at its artifact store (S3 for a
    server started with `--artifacts-destination s3://...`).
    """

    def __init__(self, uri: str, retry_s: float | None = None) -> None:
        self.uri = uri
        self.budget = retry_seconds(retry_s)
        if self.budget is None and not any(os.environ.get(k) for k in (RETRIES_ENV, BACKOFF_ENV)):
            self.budget = DEFAULT_RETRY_SECONDS
        self.down: dict[str, TrackingUnavailable] = {}
        self.spent: set[str] = set()  # endpoints that went down once: one attempt per call since
        self._patient = True

    def impatient(self) -> None:
        """One attempt per call from now on: the process is ending (failure, SIGTERM)."""
        self._patient = False

    def revive(self) -> None:
        """Give every down endpoint one more attempt per call (at the end of a run, before giving up)."""
        self.down.clear()

    def settings(self, key: str = MLFLOW) -> dict[str, str]:
        """The MLflow variables a call to endpoint `key` runs under."""
        if not self._patient or {MLFLOW, key} & self.spent:
            env, timeout = {RETRIES_ENV: "0"}, 5.0
        elif self.budget is None:  # the user's own MLFLOW_HTTP_REQUEST_MAX_RETRIES / _BACKOFF_FACTOR
            env, timeout = {}, 30.0
        else:
            retries, factor = mlflow_retries(self.budget)
            env, timeout = {RETRIES_ENV: str(retries), BACKOFF_ENV: str(factor)}, min(max(self.budget, 5.0), 30.0)
        if TIMEOUT_ENV not in os.environ:  # MLflow's default, 120 s an attempt, would outlast the budget
            env[TIMEOUT_ENV] = str(int(timeout))
        return env

    def call(self, what: str, fn: Callable[..., T], *args: Any, artifact: bool = False, **kwargs: Any) -> T:
        key = ARTIFACTS if artifact else MLFLOW
        for dep in (MLFLOW, key):  # artifact calls need the tracking server too
            if dep in self.down:
                raise self.down[dep]
        start = time.monotonic()
        try:
            with temp_env(self.settings(key)):
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
            raise self._give_up(what, exc, endpoint, time.monotonic() - start) from None

    def _give_up(self, what: str, exc: BaseException, endpoint: Endpoint, spent: float) -> TrackingUnavailable:
        hint = S3_HINT if endpoint.kind == "S3" else PROXY_HINT if endpoint.key == ARTIFACTS else FIX_HINT
        where = f"its S3 artifact store at {endpoint.url}" if endpoint.kind == "S3" else (
            f"the S3 artifact store behind the MLflow server at {endpoint.url} (the server answers, artifact "
            "uploads fail)" if endpoint.key == ARTIFACTS else endpoint.url)
        err = TrackingUnavailable(f"MLflow {what} failed on {where} after {spent:.0f} s of retries: "
                                  f"{one_line(exc, 160)}; {hint}", endpoint)
        self.down[endpoint.key] = err
        self.spent.add(endpoint.key)
        return err

    def _permanent(self, what: str, exc: BaseException) -> Exception:
        if _is_boto(exc):
            # Artifacts go straight from this client to an s3:// store: unreachable endpoints and
            # bad keys surface as boto errors.
            return TrackingError(f"MLflow {what} failed on its S3 artifact store at {_s3_endpoint()}: "
                                 f"{one_line(exc)}; {S3_HINT}")
        from mlflow.exceptions import MlflowException  # lazy: MLflow takes seconds; only where tracking talks to it

        if isinstance(exc, MlflowException | OSError):
            return TrackingError(f"MLflow {what} failed on {self.uri}: {one_line(exc)}")
        return exc

    def _transient(self, exc: BaseException, artifact: bool) -> Endpoint | None:
        """The endpoint a failure that outlasted the retries came from, or None when it is no outage."""
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
        from mlflow.exceptions import MlflowException  # lazy: MLflow takes seconds; only where tracking talks to it

        if not isinstance(exc, MlflowException | OSError):
            return None
        text = str(exc)
        if UNREACHABLE.search(text) and not _SERVER_ERROR.search(text):
            return Endpoint(MLFLOW, "MLflow", self.uri)
        if _SERVER_ERROR.search(text) and artifact:
            # The server answered (with 5xx), so it is up: its artifact store behind it is not.
            return Endpoint(ARTIFACTS, "the S3 store behind the MLflow server", self.uri)
        if _SERVER_ERROR.search(text) or isinstance(exc, OSError):
            return Endpoint(MLFLOW, "MLflow", self.uri)
        return None

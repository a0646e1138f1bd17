"""Unmodified DBOS executors of the TypeScript, Go and Java SDKs, run as Relay's integration tests run them.

Each SDK has one test application (tests/integration/ts_app, go_app, java_app) with the same control contract:
configured by environment (APP_NAME, CONDUCTOR_URL, CONDUCTOR_KEY, SYSTEM_DATABASE_URL, APP_VERSION,
CONTROL_PORT), it prints one line ``READY {"executor_id", "app_version", "control_port"}`` once launched and
serves, on loopback, POST /start /send /flags and GET /result/{id} /alerts; every alert Relay delivers is also
printed as a line ``ALERT {json}``. The same workflows (greet, gate, chatty, flaky, parent, and the scheduled
tick) exist in all three, so one test body drives any of them.

``make test-deps`` installs and builds the three apps (npm ci; go build; mvn package) once per change of pins.
"""

from __future__ import annotations

import base64
import binascii
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.ports import wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, ManagedProcess, RelayProcess, clean_env

HERE = Path(__file__).parent
ORG = "local"
TERMINAL = {"SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"}


@dataclass(frozen=True)
class Sdk:
    """One SDK's test application and what its executors report about themselves."""

    key: str  # short name: test ids, app names, queue and schedule names
    language: str  # the executor's `language` in executor_info
    version: str  # the pinned release, as the executor reports it in `dbos_version`
    tool: str  # the program that runs the app
    app_dir: Path
    artifact: Path  # what `make test-deps` produces; its absence fails the test with that hint
    cron: str  # the app's yearly schedule (Go and Java crons have a seconds field)
    argv: tuple[str, ...]

    @property
    def queue(self) -> str:
        return f"{self.key}_queue"

    @property
    def schedule(self) -> str:
        return f"{self.key}_yearly"

    def check_installed(self) -> None:
        if shutil.which(self.tool) is None:
            pytest.fail(f"`{self.tool}` is needed to run the {self.language} executor")
        if not self.artifact.exists():
            pytest.fail(f"{self.artifact} is missing: `make test-deps` builds the {self.language} test app")

    def installed_version(self) -> str:
        """The SDK release the app was really built with, read from what the build installed."""
        if self.key == "ts":
            return json.loads(self.artifact.read_text())["version"]
        if self.key == "go":
            for line in (self.app_dir / "go.mod").read_text().splitlines():
                if "github.com/dbos-inc/dbos-transact-golang " in line:
                    return line.split()[-1]
            raise AssertionError("go.mod does not require dbos-transact-golang")
        jars = sorted(p.name for p in (self.app_dir / "target" / "lib").glob("transact-*.jar"))
        assert len(jars) == 1, jars
        return jars[0].removeprefix("transact-").removesuffix(".jar")


TS_DIR = HERE / "ts_app"
GO_DIR = HERE / "go_app"
JAVA_DIR = HERE / "java_app"
TYPESCRIPT = Sdk("ts", "typescript", "5.2.11", "node", TS_DIR,
                 TS_DIR / "node_modules" / "@dbos-inc" / "dbos-sdk" / "package.json", "0 0 1 1 *",
                 ("node", str(TS_DIR / "app.mjs")))  # fmt: skip
GO = Sdk("go", "go", "v1.6.0", "go", GO_DIR, GO_DIR / "bin" / "relay-go-app", "0 0 0 1 1 *",
         (str(GO_DIR / "bin" / "relay-go-app"),))  # fmt: skip
JAVA_JAR = JAVA_DIR / "target" / "relay-java-app.jar"
# A small heap collector: a test runs up to three JVM executors at once on a 2-core machine.
JAVA = Sdk("java", "java", "1.1.0-m6", "java", JAVA_DIR, JAVA_JAR, "0 0 0 1 1 *",
           ("java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", str(JAVA_JAR)))  # fmt: skip
SDKS = (TYPESCRIPT, GO, JAVA)

# The Python executors: one app file (executor_apps/skew_app.py) run by dbos 3.2.0 (the suite's own interpreter)
# or by the older release pinned in tests/integration/requirements/dbos2.txt (its own virtualenv).
OLD_VENV = REPO_ROOT / ".venv-dbos2"
OLD_PYTHON = OLD_VENV / "bin" / "python"
SKEW_APP = HERE / "executor_apps" / "skew_app.py"


class OldSdkExecutor(ExecutorProcess):
    """A Python app run by the older SDK's interpreter."""

    def command(self) -> list[str]:
        return [str(OLD_PYTHON), "-u", str(self.script), *self.args]


def ready_info(process: ManagedProcess, timeout: float = 90) -> dict[str, Any]:
    """The JSON of the ``READY`` line every test app (Python, TypeScript, Go, Java) prints once launched."""
    process.wait_for_log("READY ", timeout=timeout)
    return json.loads(process.log_text().split("READY ", 1)[1].splitlines()[0])


class SdkExecutorProcess(ManagedProcess):
    """One executor of an SDK's test app in its own process."""

    def __init__(self, sdk: Sdk, env: dict[str, str], cwd: Path, name: str) -> None:
        self.sdk = sdk
        self.name = name
        self.env = env
        cwd.mkdir(parents=True, exist_ok=True)
        super().__init__(cwd / f"{name}.log")

    def command(self) -> list[str]:
        return list(self.sdk.argv)

    def environment(self) -> dict[str, str]:
        return clean_env(self.env)

    def workdir(self) -> Path:
        return self.sdk.app_dir


    def alert_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line.split("ALERT ", 1)[1]) for line in self.log_text().splitlines() if "ALERT {" in line]


@dataclass
class SdkApp:
    """One application on Relay with executors of one SDK; ``api`` talks to Relay, ``control`` to the app."""

    sdk: Sdk | None  # None: the app's executors are Python ones, started by the test itself
    relay: RelayProcess
    name: str
    key: str
    db_url: str
    workdir: Path
    executors: list[SdkExecutorProcess] = field(default_factory=list)
    ready: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"/v2/orgs/{ORG}/apps/{self.name}"

    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        return self.relay.api(method, self.base + path, timeout=30, **kwargs)

    def ok(self, method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        response = self.api(method, path, **kwargs)
        assert response.status_code == status, f"{method} {path}: {response.status_code} {response.text[:800]}"
        return response.json() if response.content else None

    def raw(self, executor_id: str, request: dict[str, Any]) -> requests.Response:
        """One request of any type sent as it is to one executor (Relay's raw endpoint)."""
        path = f"/relay/v1/orgs/{ORG}/apps/{self.name}/executors/{executor_id}/requests"
        return self.relay.api("POST", path, json=request, timeout=60)

    def launch(self, version: str, name: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
        """Start one more executor of the app, running application version ``version``; wait until HEALTHY."""
        assert self.sdk is not None, "launch() starts TypeScript/Go/Java executors"
        name = name or f"{self.sdk.key}-{version}-{len(self.executors)}"
        process = SdkExecutorProcess(
            self.sdk,
            {"APP_NAME": self.name, "CONDUCTOR_URL": self.relay.ws_url, "CONDUCTOR_KEY": self.key,
             "SYSTEM_DATABASE_URL": self.db_url, "APP_VERSION": version, "CONTROL_PORT": "0", **(env or {})},
            self.workdir / name, name,
        )  # fmt: skip
        process.start()
        self.executors.append(process)
        try:
            info = ready_info(process)
        except Exception as exc:
            raise AssertionError(f"{name} never became READY:\n{process.log_tail()}") from exc
        self.ready.append(info)

        def healthy() -> bool:
            executors = self.ok("GET", "/executors")
            return any(e["executorId"] == info["executor_id"] and e["status"] == "HEALTHY" for e in executors)

        wait_until(healthy, 30, message=f"executor {info['executor_id']} never HEALTHY:\n{process.log_tail()}")
        return info

    def control(self, method: str, path: str, body: dict[str, Any] | None = None, index: int = 0) -> Any:
        port = self.ready[index]["control_port"]
        response = requests.request(method, f"http://127.0.0.1:{port}{path}", json=body, timeout=30)
        assert response.status_code == 200, f"control {path}: {response.status_code} {response.text}"
        return response.json()

    def start(self, workflow: str, *args: Any, workflow_id: str | None = None, queue: str | None = None) -> str:
        body: dict[str, Any] = {"workflow": workflow, "args": list(args)}
        if workflow_id:
            body["workflowId"] = workflow_id
        if queue:
            body["queueName"] = queue
        return self.control("POST", "/start", body)["workflowId"]

    def send(self, workflow_id: str, message: str, topic: str, index: int = 0) -> None:
        self.control("POST", "/send", {"destination": workflow_id, "message": message, "topic": topic}, index)

    def workflow(self, workflow_id: str) -> dict[str, Any]:
        return self.ok("GET", f"/workflows/{workflow_id}")

    def wait_status(self, workflow_id: str, statuses: set[str] | str, timeout: float = 30) -> dict[str, Any]:
        wanted = {statuses} if isinstance(statuses, str) else statuses

        def reached() -> dict[str, Any] | None:
            response = self.api("GET", f"/workflows/{workflow_id}")
            if response.status_code != 200:
                return None
            found = response.json()
            return found if found["status"] in wanted else None

        return wait_until(reached, timeout, interval=0.1, message=f"{workflow_id} never reached {wanted}")

    def stop(self) -> None:
        for process in self.executors:
            process.stop()


def new_app(relay: RelayProcess, sdk: Sdk | None, name: str, db_url: str, workdir: Path) -> SdkApp:
    """A fresh application on Relay and an API key for it (no executor yet)."""
    assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{name}", json={}).status_code == 204
    created = relay.api("POST", f"/v2/orgs/{ORG}/tokens/{name}-key", json={"appNames": [name]})
    assert created.status_code == 201, created.text
    return SdkApp(sdk, relay, name, created.json()["token"], db_url, workdir)


def readable(text: str | None) -> str:
    """A value as an SDK stored it and, when it is base64 (Go's DBOS_JSON, Python's pickles), what that decodes to:
    the data plane shows stored text (never unpickled), which tests compare loosely."""
    try:
        decoded = base64.b64decode(text or "", validate=True).decode("utf-8", "replace")
    except (binascii.Error, ValueError):
        decoded = ""
    return f"{text or ''}\n{decoded}"

"""A real client of the Conductor API v2 against Relay: the MIT-licensed ``dbos-mcp`` MCP server, unmodified.

``dbos-mcp`` (pinned in the Makefile, installed in ``.venv-mcp``) has no setting for its base URL: its
``client.py`` calls ``https://cloud.dbos.dev/conductor/v2/orgs/{organization}/...`` and reads the bearer
token and organization from ``~/.dbos-mcp/credentials`` (written by its ``login`` tool). So it is pointed
at Relay by configuration alone, the way any HTTPS client is pointed at a gateway:

- ``HOME`` is a temp dir whose ``.dbos-mcp/credentials`` holds a Relay API key and organization ``local``
  (what the login tool would have stored; the Auth0 login itself is never called);
- ``HTTPS_PROXY``/``ALL_PROXY`` name a proxy on 127.0.0.1 that accepts ``CONNECT cloud.dbos.dev:443`` only,
  terminates TLS with a certificate from a throwaway CA, and forwards ``/conductor/v2/...`` to Relay's
  ``/v2/...`` (anything else is refused: no request leaves the machine);
- ``SSL_CERT_FILE`` is that throwaway CA (httpx, which dbos-mcp uses, honours it).

The test talks to ``dbos-mcp`` as an MCP client does: the MCP stdio transport (JSON-RPC, one message per
line): ``initialize``, ``tools/list``, ``tools/call``. The application is a real DBOS 3.2.0 executor
(executor_apps/mcp_app.py) connected to a real ``relay serve``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.ports import wait_until
from tests.support.procs import REPO_ROOT, ExecutorProcess, RelayProcess
from tests.support.readme_blocks import check_block

pytestmark = pytest.mark.integration

MCP_VENV = REPO_ROOT / ".venv-mcp"
MCP_SERVER = MCP_VENV / "bin" / "dbos-mcp"
APP_SCRIPT = Path(__file__).parent / "executor_apps" / "mcp_app.py"
ORG = "local"
APP = "mcp-app"
APP_VERSION = "mcp-v1"
CLOUD_HOST = "cloud.dbos.dev"
CLOUD_PREFIX = "/conductor/v2/"
MCP_PROTOCOL_VERSION = "2025-11-25"
CALL_TIMEOUT_S = 40.0
EXPECTED_TOOLS = {
    "list_applications", "list_executors", "list_workflows", "get_workflow", "list_steps",
    "cancel_workflow", "resume_workflow", "fork_workflow", "delete_workflow", "get_workflow_events",
    "get_workflow_notifications", "get_workflow_aggregates", "list_application_versions",
    "set_latest_application_version", "bulk_delete_workflows", "list_schedules",
}  # fmt: skip


# ------------------------------------------------------------------ TLS gateway for cloud.dbos.dev


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for cloud.dbos.dev signed by it: (ca.pem, leaf.pem, leaf.key)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=Relay test CA", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)  # fmt: skip
    _openssl("req", *ec, "-keyout", "leaf.key", "-out", "leaf.csr", "-subj", f"/CN={CLOUD_HOST}", cwd=directory)
    (directory / "leaf.ext").write_text(
        f"subjectAltName=DNS:{CLOUD_HOST}\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext", cwd=directory)  # fmt: skip
    return directory / "ca.pem", directory / "leaf.pem", directory / "leaf.key"


class CloudGateway:
    """An HTTP proxy on 127.0.0.1 standing in for https://cloud.dbos.dev/conductor/v2 in front of Relay.

    ``calls`` records ``(method, path, status)`` of every request forwarded, as the client sent it.
    """

    def __init__(self, relay_base_url: str, cert: Path, key: Path, http: requests.Session) -> None:
        self.relay_base_url = relay_base_url
        self.calls: list[tuple[str, str, int]] = []
        self.failures: list[str] = []  # "METHOD path -> status body" of every answer >= 400, for messages
        self.refused: list[str] = []
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert, key)
        self.http = http  # RelayProcess.http_session(): no keep-alive reuse at Relay's idle deadline
        self.http.trust_env = False  # straight to Relay on loopback, whatever the environment says
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._proxy_handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="cloud-gateway", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> CloudGateway:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.http.close()

    def forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else None
        if not handler.path.startswith(CLOUD_PREFIX):
            self.refused.append(f"{handler.command} {handler.path}")
            self._reply(handler, 404, b'{"detail": "not a Conductor API v2 path"}', "application/json")
            return
        target = f"{self.relay_base_url}/v2/{handler.path[len(CLOUD_PREFIX):]}"
        headers = {k: v for k in ("Authorization", "Content-Type", "Accept") if (v := handler.headers.get(k))}
        response = self.http.request(handler.command, target, data=body, headers=headers, timeout=CALL_TIMEOUT_S)
        self.calls.append((handler.command, handler.path, response.status_code))
        if response.status_code >= 400:
            self.failures.append(f"{handler.command} {handler.path} -> {response.status_code} {response.text[:500]}")
        content_type = response.headers.get("Content-Type", "application/json")
        self._reply(handler, response.status_code, response.content, content_type)

    @staticmethod
    def _reply(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
        handler.send_response(status)
        if status not in (204, 304):
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if status not in (204, 304):
            handler.wfile.write(body)

    def _proxy_handler(self) -> type[BaseHTTPRequestHandler]:
        gateway = self

        class Forwarder(BaseHTTPRequestHandler):
            """Requests inside the TLS tunnel, as cloud.dbos.dev would receive them."""

            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                gateway.forward(self)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Proxy(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_CONNECT(self) -> None:
                if self.path != f"{CLOUD_HOST}:443":
                    gateway.refused.append(f"CONNECT {self.path}")
                    self.send_error(403, "this proxy only reaches the Relay under test")
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                try:
                    tunnel = gateway.tls.wrap_socket(self.connection, server_side=True)
                except (ssl.SSLError, OSError):
                    self.close_connection = True
                    return
                with contextlib.suppress(OSError):
                    Forwarder(tunnel, self.client_address, self.server)
                with contextlib.suppress(OSError):
                    tunnel.close()
                self.close_connection = True

            def _refuse(self) -> None:
                gateway.refused.append(f"{self.command} {self.path}")
                self.send_error(403, "this proxy only tunnels to cloud.dbos.dev")

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _refuse

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Proxy


# ------------------------------------------------------------------------------- MCP over stdio


class McpToolError(AssertionError):
    """A tool call that the MCP server answered with ``isError``."""


class McpStdioClient:
    """A minimal MCP client: JSON-RPC 2.0 over the server's stdin/stdout, one message per line."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, gateway: CloudGateway) -> None:
        self.log_path = log_path
        self.gateway = gateway
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env,
            cwd=env["HOME"], start_new_session=True,
        )  # fmt: skip
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 0
        # Every tool call that succeeded, with the HTTP calls it made: the README's dbos-mcp block.
        self.exercised: list[tuple[str, list[tuple[str, str, int]]]] = []
        self._reader = threading.Thread(target=self._read, name="mcp-stdout", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                self._messages.put(json.loads(line))
        self._messages.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    def request(self, method: str, params: dict[str, Any] | None = None, timeout: float = CALL_TIMEOUT_S) -> Any:
        self._next_id += 1
        request_id = self._next_id
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"MCP {method} unanswered after {timeout:g} s:\n{self.log_tail()}")
            try:
                message = self._messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if message is None:
                raise AssertionError(f"dbos-mcp exited ({self.proc.poll()}) during {method}:\n{self.log_tail()}")
            if message.get("id") != request_id or "method" in message:
                continue  # notifications (logging, progress) and anything else not ours
            if "error" in message:
                raise AssertionError(f"MCP {method} failed: {message['error']}")
            return message["result"]

    def initialize(self) -> dict[str, Any]:
        result = self.request("initialize", {
            "protocolVersion": MCP_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "relay-integration-tests", "version": "1.0"},
        })  # fmt: skip
        self.notify("notifications/initialized")
        return result

    def tools(self) -> dict[str, dict[str, Any]]:
        return {tool["name"]: tool for tool in self.request("tools/list")["tools"]}

    def call(self, tool: str, /, **arguments: Any) -> Any:
        """Call a tool; return its result (structured content, else the JSON of its text); raise on isError."""
        calls_before = len(self.gateway.calls)
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        text = "\n".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")
        if result.get("isError"):
            last = self.gateway.failures[-1] if self.gateway.failures else "no failed HTTP call"
            raise McpToolError(f"{tool}({arguments}) -> {text} [last failed call: {last}]")
        self.exercised.append((tool, self.gateway.calls[calls_before:]))
        if result.get("structuredContent") is not None:
            structured = result["structuredContent"]
            # Tools returning a bare value are wrapped as {"result": value}.
            return structured.get("result", structured) if set(structured) == {"result"} else structured
        return json.loads(text) if text else None

    def call_error(self, tool: str, /, **arguments: Any) -> str:
        """Call a tool that must fail; return the failed HTTP call behind it ("METHOD path -> status body")."""
        failed_before = len(self.gateway.failures)
        try:
            self.call(tool, **arguments)
        except McpToolError as error:
            assert len(self.gateway.failures) > failed_before, f"{error}: no HTTP call failed"
            return self.gateway.failures[-1]
        raise AssertionError(f"{tool}({arguments}) succeeded; it should have failed")

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)
        self._log.close()


def mcp_environment(home: Path, proxy_url: str, ca_file: Path) -> dict[str, str]:
    """The process environment of dbos-mcp: ours without proxy/TLS settings, then the gateway's."""
    dropped = ("HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
    env = {
        k: v for k, v in os.environ.items()
        if not k.lower().endswith("_proxy") and k not in dropped and not k.startswith(("RELAY_", "DBOS_"))
    }  # fmt: skip
    env.update({
        "HOME": str(home),
        "HTTPS_PROXY": proxy_url, "https_proxy": proxy_url,
        "ALL_PROXY": proxy_url, "all_proxy": proxy_url,
        "SSL_CERT_FILE": str(ca_file),
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    return env


# ------------------------------------------------------------------------------------- fixtures


def require_mcp_venv() -> None:
    if not MCP_SERVER.exists():
        pytest.fail(f"{MCP_SERVER} is missing: `make test-deps` installs dbos-mcp into {MCP_VENV.name}")
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make the throwaway CA for the cloud.dbos.dev gateway")


@pytest.fixture
def stack(tmp_path: Path, pg_url: str) -> Iterator[dict[str, Any]]:
    """Relay, a DBOS 3.2.0 executor of APP (scenario run), the gateway, and dbos-mcp initialized over stdio."""
    require_mcp_venv()
    with RelayProcess(tmp_path / "relay-data") as relay:
        assert relay.api("PUT", f"/v2/orgs/{ORG}/apps/{APP}", json={}).status_code == 204
        created = relay.api("POST", f"/v2/orgs/{ORG}/tokens/mcp-key", json={"appNames": [APP]})
        assert created.status_code == 201, created.text
        key = created.json()["token"]

        prefix = f"mcp-{os.getpid()}-{int(time.time())}"
        executor = ExecutorProcess(
            APP_SCRIPT, name="mcp-app", cwd=tmp_path / "app",
            env={"APP_NAME": APP, "CONDUCTOR_URL": relay.ws_url, "CONDUCTOR_KEY": key,
                 "SYSTEM_DATABASE_URL": pg_url, "APP_VERSION": APP_VERSION, "SCENARIO_PREFIX": prefix},
        )  # fmt: skip
        with executor:
            executor.wait_for_log("READY ", timeout=60)
            ready = json.loads(executor.log_text().split("READY ", 1)[1].splitlines()[0])

            certs = tmp_path / "certs"
            certs.mkdir()
            ca, leaf, leaf_key = make_certificates(certs)
            home = tmp_path / "home"
            (home / ".dbos-mcp").mkdir(parents=True)
            (home / ".dbos-mcp" / "credentials").write_text(
                json.dumps({"token": key, "userName": "relay-tests", "organization": ORG})
            )
            with CloudGateway(relay.base_url, leaf, leaf_key, relay.http_session()) as gateway:
                client = McpStdioClient([str(MCP_SERVER)], mcp_environment(home, gateway.url, ca),
                                        tmp_path / "dbos-mcp.log", gateway)
                try:
                    init = client.initialize()
                    yield {"relay": relay, "executor": executor, "ready": ready, "client": client,
                           "gateway": gateway, "init": init, "pg_url": pg_url, "prefix": prefix}
                finally:
                    client.close()
                assert not gateway.refused, f"dbos-mcp tried to reach something other than Relay: {gateway.refused}"


def _workflow(client: McpStdioClient, workflow_id: str) -> dict[str, Any]:
    return client.call("get_workflow", application_name=APP, workflow_id=workflow_id)


def _wait_status(client: McpStdioClient, workflow_id: str, statuses: set[str], timeout: float = 30) -> dict:
    def reached() -> dict | None:
        workflow = _workflow(client, workflow_id)
        return workflow if workflow["status"] in statuses else None

    return wait_until(reached, timeout, interval=0.2, message=f"{workflow_id} never reached {statuses}",
                      ignore=(McpToolError,))


def _send(pg_url: str, workflow_id: str, message: str, topic: str) -> None:
    """Send a DBOS message to a workflow the way another process of the application would (DBOSClient)."""
    code = (
        "import sys\nfrom dbos import DBOSClient\n"
        "client = DBOSClient(system_database_url=sys.argv[1])\n"
        "client.send(sys.argv[2], sys.argv[3], topic=sys.argv[4])\nclient.destroy()\n"
    )
    subprocess.run([sys.executable, "-c", code, pg_url, workflow_id, message, topic],
                   check=True, capture_output=True, timeout=60)  # fmt: skip


# ----------------------------------------------------------------------------------------- tests


def test_dbos_mcp_inspects_and_manages_workflows_through_relay(stack: dict[str, Any]) -> None:
    client: McpStdioClient = stack["client"]
    gateway: CloudGateway = stack["gateway"]
    ready = stack["ready"]
    ids = ready["workflows"]

    assert stack["init"]["serverInfo"]["name"] == "dbos-conductor"
    tools = client.tools()
    assert set(tools) >= EXPECTED_TOOLS, sorted(EXPECTED_TOOLS - set(tools))

    # -- applications and executors, from Relay's own store
    apps = client.call("list_applications")
    mine = [a for a in apps["applications"] if a["name"] == APP]
    assert apps["count"] == len(apps["applications"]) and len(mine) == 1
    assert mine[0]["status"] == "AVAILABLE" and mine[0]["language"] == "python"

    executors = client.call("list_executors", application_name=APP)["executors"]
    healthy = [e for e in executors if e["status"] == "HEALTHY"]
    assert [e["executorId"] for e in healthy] == [ready["executor_id"]]
    assert healthy[0]["language"] == "python" and healthy[0]["dbosVersion"] == "3.2.0"
    assert healthy[0]["appVersion"] == APP_VERSION

    # -- workflows, served by the executor through Relay
    listed = client.call("list_workflows", application_name=APP, workflow_id_prefix=stack["prefix"])
    by_id = {w["workflowId"]: w for w in listed["workflows"]}
    assert set(by_id) == set(ids.values()), listed
    assert by_id[ids["greet"]]["status"] == "SUCCESS"
    assert by_id[ids["chatty"]]["status"] == "SUCCESS"
    assert by_id[ids["gate"]]["status"] == "PENDING"
    assert listed["count"] == 3

    succeeded = client.call("list_workflows", application_name=APP, status="SUCCESS",
                            workflow_id_prefix=stack["prefix"])  # fmt: skip
    assert {w["workflowId"] for w in succeeded["workflows"]} == {ids["greet"], ids["chatty"]}
    named = client.call("list_workflows", application_name=APP, workflow_name="greet", load_output=True)
    assert [w["workflowId"] for w in named["workflows"]] == [ids["greet"]]
    assert "HELLO MCP!" in (named["workflows"][0]["output"] or "")

    greet = _workflow(client, ids["greet"])
    assert greet["workflowId"] == ids["greet"] and greet["status"] == "SUCCESS"
    assert greet["workflowName"].endswith("greet")
    assert greet["appVersion"] == APP_VERSION and greet["executorId"] == ready["executor_id"]
    assert "HELLO MCP!" in (greet["output"] or "")

    steps = client.call("list_steps", application_name=APP, workflow_id=ids["greet"])
    assert steps["count"] == 2 and steps["workflow_id"] == ids["greet"]
    step_ids = [s["stepId"] for s in steps["steps"]]
    assert step_ids == [step_ids[0], step_ids[0] + 1]  # the Python SDK numbers them from 1, TypeScript from 0
    assert [s["stepName"].rsplit(".", 1)[-1] for s in steps["steps"]] == ["shout", "exclaim"]
    assert "HELLO MCP" in (steps["steps"][0]["output"] or "")
    paged = client.call("list_steps", application_name=APP, workflow_id=ids["greet"], limit=1, offset=1)
    assert [s["stepId"] for s in paged["steps"]] == step_ids[1:]

    events = client.call("get_workflow_events", application_name=APP, workflow_id=ids["chatty"])
    assert [e["key"] for e in events["events"]] == ["progress"]
    assert "done mcp" in events["events"][0]["value"]
    notifications = client.call("get_workflow_notifications", application_name=APP, workflow_id=ids["chatty"])
    [note] = notifications["notifications"]
    assert note["topic"] == "ping" and "pong" in note["message"] and note["consumed"] is True

    # -- management: cancel, resume (then let it finish), fork, delete
    assert client.call("cancel_workflow", application_name=APP, workflow_id=ids["gate"])["workflow_id"] == ids["gate"]
    _wait_status(client, ids["gate"], {"CANCELLED"})
    client.call("resume_workflow", application_name=APP, workflow_id=ids["gate"])
    _wait_status(client, ids["gate"], {"PENDING", "ENQUEUED"})
    _send(stack["pg_url"], ids["gate"], "go", "go")
    finished = _wait_status(client, ids["gate"], {"SUCCESS"})
    assert "mcp:go" in (finished["output"] or "")

    # Fork from the second step: the first one's recorded output is reused, the second runs again.
    forked = client.call("fork_workflow", application_name=APP, workflow_id=ids["greet"], start_step=step_ids[1])
    fork_id = forked["workflow_id"]
    assert fork_id and fork_id != ids["greet"] and forked["forked_from"] == ids["greet"]
    fork = _wait_status(client, fork_id, {"SUCCESS"})
    assert fork["forkedFrom"] == ids["greet"] and "HELLO MCP!" in (fork["output"] or "")
    fork_steps = client.call("list_steps", application_name=APP, workflow_id=fork_id)["steps"]
    assert [s["stepId"] for s in fork_steps] == step_ids
    assert _workflow(client, ids["greet"])["wasForkedFrom"] is True

    custom = client.call("fork_workflow", application_name=APP, workflow_id=ids["greet"], start_step=step_ids[0],
                         new_workflow_id=f"{stack['prefix']}-custom-fork")  # fmt: skip
    assert custom["workflow_id"] == f"{stack['prefix']}-custom-fork"
    _wait_status(client, custom["workflow_id"], {"SUCCESS"})

    client.call("delete_workflow", application_name=APP, workflow_id=custom["workflow_id"])
    assert " -> 404 " in client.call_error("get_workflow", application_name=APP, workflow_id=custom["workflow_id"])
    second = client.call("fork_workflow", application_name=APP, workflow_id=ids["greet"], start_step=step_ids[0],
                         new_workflow_id=f"{stack['prefix']}-second-fork")["workflow_id"]  # fmt: skip
    _wait_status(client, second, {"SUCCESS"})
    assert client.call("bulk_delete_workflows", application_name=APP, workflow_ids=[second])["count"] == 1
    assert " -> 404 " in client.call_error("get_workflow", application_name=APP, workflow_id=second)

    # -- aggregates and versions
    rows = client.call("get_workflow_aggregates", application_name=APP, group_by_status=True, select_count=True,
                       workflow_id_prefix=[stack["prefix"]])  # fmt: skip
    counts = {row["group"]["status"]: row["count"] for row in rows["aggregates"]}
    assert counts == {"SUCCESS": 3}, rows  # greet, chatty, gate (the forks have IDs of their own)
    rows = client.call("get_workflow_aggregates", application_name=APP, group_by_name=True, select_count=True,
                       name=["greet"])  # fmt: skip
    assert [(r["group"], r["count"]) for r in rows["aggregates"]] == [({"workflowName": "greet"}, 2)], rows

    versions = client.call("list_application_versions", application_name=APP)
    assert APP_VERSION in [v["versionName"] for v in versions["versions"]]
    latest = client.call("set_latest_application_version", application_name=APP, version_name=APP_VERSION)
    assert latest["version_name"] == APP_VERSION
    assert client.call("list_schedules", application_name=APP)["count"] == 0  # the app declares none

    # -- errors reach the client as errors
    assert " -> 404 " in client.call_error("get_workflow", application_name=APP, workflow_id="no-such-workflow")
    # The key is scoped to APP: another application is refused, as Conductor refuses it.
    assert " -> 403 " in client.call_error("list_executors", application_name="other-app")

    # What dbos-mcp actually called: Conductor v2 paths under the organization, all answered by Relay.
    paths = {(method, path.split("?")[0]) for method, path, _ in gateway.calls}
    base = f"{CLOUD_PREFIX}orgs/{ORG}/apps/{APP}"
    assert ("POST", f"{base}/workflows/search") in paths
    assert ("GET", f"{base}/workflows/{ids['greet']}/steps") in paths
    assert ("POST", f"{base}/workflows/{ids['gate']}/cancel") in paths
    assert ("POST", f"{base}/workflows/{ids['greet']}/fork") in paths
    assert all(status < 500 for _, _, status in gateway.calls), gateway.calls
    check_block("dbos-mcp-operations", render_exercised(client.exercised))


def render_exercised(exercised: list[tuple[str, list[tuple[str, str, int]]]]) -> str:
    """The tools that succeeded and the Conductor v2 operations each called (paths as templates), as a table."""
    names = {f"/apps/{APP}": "/apps/{appName}", f"orgs/{ORG}/": "orgs/{orgName}/"}
    by_tool: dict[str, set[str]] = {}
    for tool, calls in exercised:
        assert calls and all(status < 400 for _, _, status in calls), (tool, calls)
        for method, path, _status in calls:
            template = "/v2/" + path.split("?")[0].removeprefix(CLOUD_PREFIX)
            for value, name in names.items():
                template = template.replace(value, name)
            template = re.sub(r"/workflows/(?!search|aggregates|bulk-)[^/]+", "/workflows/{workflowId}", template)
            by_tool.setdefault(tool, set()).add(f"`{method} {template}`")
    lines = ["| dbos-mcp tool | Conductor API v2 operations it called (all answered by Relay) |", "|---|---|"]
    lines += [f"| `{tool}` | {', '.join(sorted(ops))} |" for tool, ops in sorted(by_tool.items())]
    return "\n".join(lines) + "\n"

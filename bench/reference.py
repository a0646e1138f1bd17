"""The reference for Relay's request path: the same relay path done as simply as Python allows.

HTTP request → frame to a connected executor → its response → HTTP reply, with one asyncio process: the
`websockets` package for the executors' sockets (it speaks first with ``executor_info``, pings every 10 s,
correlates answers by ``request_id``) and a plain HTTP/1.1 server on asyncio streams (keep-alive,
Content-Length bodies only). It checks the bearer token and the executor key by comparing strings, keeps no
store, no events, no logs: the floor for this path in Python, which Relay's figures are divided by.

Routes (the same paths as Relay's):
- ``POST /relay/v1/orgs/{org}/apps/{app}/executors/{executorId}/requests`` body ``{"type": T, ...}``: the
  frame goes to that executor; the reply is its answer, as JSON.
- ``GET /v2/orgs/{org}/apps/{app}/workflows/{workflowId}``: ``get_workflow`` to the most recently connected
  executor (Relay's routing picks that one too); the reply is the record it answered (untranslated).
- ``GET /healthz``.

``python -m bench.reference --ws-port P --http-port Q --token T --key K`` prints ``ready`` when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

REQUEST_TIMEOUT_S = 30.0
MAX_BODY = 64 * 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 502: "Bad Gateway",
            503: "Service Unavailable", 504: "Gateway Timeout"}


class Executor:
    def __init__(self, ws: ServerConnection, executor_id: str) -> None:
        self.ws = ws
        self.executor_id = executor_id
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}


class Reference:
    def __init__(self, token: str, key: str, max_seconds: float) -> None:
        self.token = token
        self.key = key
        self.max_seconds = max_seconds
        self.executors: dict[tuple[str, str], Executor] = {}  # (app, executor_id)
        self.latest: dict[str, Executor] = {}  # app -> the most recently connected

    # -- executors ------------------------------------------------------------------------------
    async def executor_socket(self, ws: ServerConnection) -> None:
        parts = ws.request.path.split("/") if ws.request is not None else []
        if len(parts) < 4 or parts[1] != "websocket" or "/".join(parts[3:]) != self.key:
            await ws.close(1008, "refused")
            return
        app = parts[2]
        request_id = uuid.uuid4().hex
        await ws.send(json.dumps({"type": "executor_info", "request_id": request_id}))
        try:
            info = json.loads(await asyncio.wait_for(ws.recv(), 10))
        except (TimeoutError, ConnectionClosed, ValueError):
            await ws.close(1008, "executor_info not answered")
            return
        executor = Executor(ws, str(info.get("executor_id")))
        self.executors[(app, executor.executor_id)] = executor
        self.latest[app] = executor
        try:
            async for message in ws:
                with contextlib.suppress(ValueError, AttributeError):
                    frame = json.loads(message)
                    future = executor.pending.pop(frame.get("request_id"), None)
                    if future is not None and not future.done():
                        future.set_result(frame)
        except ConnectionClosed:
            pass
        finally:
            if self.executors.get((app, executor.executor_id)) is executor:
                del self.executors[(app, executor.executor_id)]
            if self.latest.get(app) is executor:
                others = [e for (a, _), e in self.executors.items() if a == app]
                if others:
                    self.latest[app] = others[-1]
                else:
                    del self.latest[app]
            for future in executor.pending.values():
                if not future.done():
                    future.set_exception(ConnectionError("executor disconnected"))

    async def ask(self, executor: Executor, frame: dict[str, Any]) -> dict[str, Any]:
        request_id = uuid.uuid4().hex
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        executor.pending[request_id] = future
        try:
            await executor.ws.send(json.dumps({**frame, "request_id": request_id}))
            return await asyncio.wait_for(future, REQUEST_TIMEOUT_S)
        finally:
            executor.pending.pop(request_id, None)

    # -- HTTP -----------------------------------------------------------------------------------
    async def http_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request_line = await reader.readline()
                if not request_line:
                    return
                method, target, version = request_line.decode("latin-1").split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length") or 0)
                if length > MAX_BODY:
                    return
                body = await reader.readexactly(length) if length else b""
                status, payload = await self.route(method, target.split("?", 1)[0], headers, body)
                data = json.dumps(payload).encode()
                keep_alive = headers.get("connection", "").lower() != "close" and version.startswith("HTTP/1.1")
                closing = "" if keep_alive else "Connection: close\r\n"
                writer.write(
                    f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(data)}\r\n{closing}\r\n".encode()
                    + data
                )
                await writer.drain()
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            writer.close()

    async def route(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if path == "/healthz":
            return 200, {"status": "ok"}
        if headers.get("authorization") != f"Bearer {self.token}":
            return 401, {"detail": "unauthorized"}
        parts = path.split("/")
        try:
            # /relay/v1/orgs/{org}/apps/{app}/executors/{id}/requests
            if method == "POST" and len(parts) == 10 and parts[1] == "relay" and parts[9] == "requests":
                executor = self.executors.get((parts[6], parts[8]))
                if executor is None:
                    return 404, {"detail": "no such executor"}
                request = json.loads(body)
                return 200, await self.ask(executor, request)
            # /v2/orgs/{org}/apps/{app}/workflows/{id}
            if method == "GET" and len(parts) == 8 and parts[1] == "v2" and parts[6] == "workflows":
                executor = self.latest.get(parts[5])
                if executor is None:
                    return 503, {"detail": "no executor connected"}
                frame = {"type": "get_workflow", "workflow_id": parts[7], "load_input": True, "load_output": True}
                answer = await self.ask(executor, frame)
                if answer.get("error_message") or answer.get("output") is None:
                    return 502, {"detail": answer.get("error_message") or "not found"}
                return 200, answer["output"]
        except ValueError:
            return 400, {"detail": "bad body"}
        except ConnectionError:
            return 502, {"detail": "executor disconnected"}
        except TimeoutError:
            return 504, {"detail": "executor did not answer"}
        return 404, {"detail": "no such resource"}

    async def run(self, host: str, ws_port: int, http_port: int) -> None:
        http = await asyncio.start_server(self.http_client, host, http_port, backlog=4096)
        async with serve(self.executor_socket, host, ws_port, compression=None, ping_interval=10,
                         ping_timeout=25, max_size=MAX_BODY, backlog=4096):
            print("ready", flush=True)
            async with http:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.Event().wait(), self.max_seconds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--ws-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--token", required=True, help="the bearer token HTTP callers must send")
    parser.add_argument("--key", required=True, help="the key executors put in their URL")
    parser.add_argument("--max-seconds", type=float, default=4 * 3600.0, help="exit after this long")
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        parser.error("the reference listens on loopback only")
    asyncio.run(Reference(args.token, args.key, args.max_seconds).run(args.host, args.ws_port, args.http_port))
    return 0


if __name__ == "__main__":
    sys.exit(main())

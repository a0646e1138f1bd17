"""A stopping instance (issue 32): the HTTP side drains (web/transport/draining.py), the directory starts no actor,
and RELAY_DRAIN_S is checked."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gevent
import pytest

from relay.actors.configuration.settings import ConfigError, Settings
from relay.actors.directory import Directory
from relay.actors.errors import InstanceStoppingError
from relay.web.transport.draining import Draining


class _Started:
    def __init__(self) -> None:
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive


def test_a_closed_directory_starts_no_application_actor_but_finds_the_live_ones() -> None:
    started: list[tuple[str, str]] = []

    def start(org: str, app: str) -> Any:
        started.append((org, app))
        return _Started()

    directory = Directory(start)
    live = directory.application("local", "shop")
    directory.close()
    assert directory.application("local", "shop") is live
    with pytest.raises(InstanceStoppingError, match="stopping"):
        directory.application("local", "other")
    live.alive = False  # stopped with the others: not started again either
    with pytest.raises(InstanceStoppingError):
        directory.application("local", "shop")
    assert started == [("local", "shop")]


def _app(gate: gevent.event.Event) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/slow":
            gate.wait(5)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Connection", "keep-alive")])
        return [b"ok"]

    return app


def test_requests_in_flight_are_counted_and_answers_close_their_connection_once_stopping() -> None:
    gate = gevent.event.Event()
    draining = Draining(_app(gate))
    headers: list[list[tuple[str, str]]] = []

    def start_response(status: str, response_headers: list[tuple[str, str]], *_: object) -> None:
        headers.append(response_headers)

    assert draining(({"PATH_INFO": "/"}), start_response) == [b"ok"]
    assert ("Connection", "keep-alive") in headers[-1]
    slow = gevent.spawn(draining, {"PATH_INFO": "/slow"}, start_response)
    gevent.sleep(0)
    assert draining.in_flight == 1
    assert not draining.wait_idle(0.05)
    draining.stopping = True
    gate.set()
    assert draining.wait_idle(2)
    slow.join(2)
    assert draining.in_flight == 0
    assert ("Connection", "close") in headers[-1] and ("Connection", "keep-alive") not in headers[-1]


@pytest.mark.parametrize("value", ["-1", "301", "nan", "soon"])
def test_a_drain_outside_0_to_300_seconds_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Any,
                                                     value: str) -> None:
    monkeypatch.setenv("RELAY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RELAY_DRAIN_S", value)
    with pytest.raises(ConfigError, match="RELAY_DRAIN_S"):
        Settings.from_env()


def test_the_drain_defaults_to_none(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("RELAY_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("RELAY_DRAIN_S", raising=False)
    assert Settings.from_env().drain_s == 0.0
    monkeypatch.setenv("RELAY_DRAIN_S", "2.5")
    assert Settings.from_env().drain_s == 2.5

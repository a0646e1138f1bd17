"""Issue 32: the backup stream of `relay store export|import` (projections/store/backup.py) and how the store
commands keep a database password out of what they print (web/cli/store.py)."""

from __future__ import annotations

import io
import json
from uuid import UUID

import pytest
from eventsourcing.persistence import Notification

from relay.actors.configuration.settings import Settings
from relay.projections.store.backup import FORMAT_VERSION, BackupError, Header, read_backup, write_backup
from relay.web.cli.store import _clean, _password

ID = UUID("5b0c0a8e-9f51-4f3c-8d7e-1a2b3c4d5e6f")
OTHER = UUID("0f9e8d7c-6b5a-4c3d-9e2f-1a0b9c8d7e6f")
STATES = (
    b'{"name":"acme","at":{"_type_":"datetime_iso","_data_":"2026-12-03T12:00:00+00:00"}}',  # as stored: JSON
    b'{"b": 1, "a": 2}',  # JSON, but not as json.dumps would write it: kept byte for byte as base64
    b"\x80\x04\x95binary",  # not JSON at all
    '{"name":"café ☕"}'.encode(),  # JSON with non-ASCII text
    b"null",
)


def _events() -> list[Notification]:
    # Positions with a gap (3 is missing), as a PostgreSQL log has after a rolled-back append.
    return [Notification(id=position, originator_id=ID if position < 5 else OTHER, originator_version=version,
                         topic=f"relay.events.organization:Organization.E{position}", state=state)
            for (position, version), state in zip(((1, 1), (2, 2), (4, 3), (5, 1), (6, 2)), STATES, strict=True)]


def _stream(events: list[Notification] | None = None) -> str:
    events = _events() if events is None else events
    header = Header("0.2.0", len(events), events[-1].id if events else 0)
    return "".join(write_backup(header, events))


def _read(text: str) -> list[Notification]:
    return list(read_backup(io.StringIO(text, newline="\n")))


def test_a_stream_gives_back_every_event_byte_for_byte_in_order() -> None:
    text = _stream()
    assert _read(text) == _events()
    lines = text.split("\n")[:-1]
    assert lines[0].startswith('{"format":"relay-event-log"')
    header, *events, trailer = (json.loads(line) for line in lines)
    assert header == {"format": "relay-event-log", "format_version": FORMAT_VERSION, "relay_version": "0.2.0",
                      "events": 5, "last_position": 6}
    assert [e["position"] for e in events] == [1, 2, 4, 5, 6]
    # A state is readable JSON only when writing it back gives the stored bytes; else base64.
    assert [("state" in e, "state_b64" in e) for e in events] == [
        (True, False), (False, True), (False, True), (True, False), (True, False)]
    assert events[0]["state"]["name"] == "acme"
    assert list(events[0]["state"]) == ["name", "at"]  # the stored key order, not sorted
    assert set(trailer) == {"sha256", "events"} and trailer["events"] == 5


def test_an_empty_log_makes_a_valid_stream() -> None:
    assert _read(_stream([])) == []


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda t: t.replace('"acme"', '"acne"'), "checksum mismatch"),
    (lambda t: t.replace('"originator_version":2', '"originator_version":7'), "checksum mismatch"),
    (lambda t: "\n".join(t.split("\n")[:-2]) + "\n", "truncated"),  # the checksum line lost
    (lambda t: t[: len(t) // 2], "cut short"),  # cut in the middle of a line
    (lambda t: _drop_line(t, 2), "checksum mismatch"),  # an event lost, checksum line kept
    (lambda t: _swap_lines(t, 1, 2), "out of order"),
    (lambda t: t + '{"extra": 1}\n', "after the checksum"),
    (lambda t: t.replace('"format":"relay-event-log"', '"format":"other"'), "not a Relay backup"),
    (lambda t: t.replace(f'"format_version":{FORMAT_VERSION}', '"format_version":99'), "format version 99"),
    (lambda t: "", "empty file"),
    (lambda t: t.replace('{"position"', "{garbage", 1), "not JSON"),
])
def test_a_damaged_stream_is_refused(damage: object, reason: str) -> None:
    with pytest.raises(BackupError, match=reason):
        _read(damage(_stream()))  # type: ignore[operator]


def test_a_recomputed_checksum_does_not_hide_a_changed_count() -> None:
    events = _events()
    text = "".join(write_backup(Header("0.2.0", 5, 6), events))
    lines = text.split("\n")[:-1]
    forged = json.dumps({**json.loads(lines[0]), "events": 4}, separators=(",", ":"))
    with pytest.raises(BackupError, match="checksum mismatch"):
        _read("\n".join([forged, *lines[1:]]) + "\n")


def test_writing_refuses_a_wrong_count_or_order() -> None:
    events = _events()
    with pytest.raises(BackupError, match="announced 9"):
        "".join(write_backup(Header("0.2.0", 9, 6), events))
    with pytest.raises(BackupError, match="positions must rise"):
        "".join(write_backup(Header("0.2.0", 5, 6), [events[1], events[0], *events[2:]]))


def _drop_line(text: str, index: int) -> str:
    lines = text.split("\n")
    return "\n".join(lines[:index] + lines[index + 1:])


def _swap_lines(text: str, a: int, b: int) -> str:
    lines = text.split("\n")
    lines[a], lines[b] = lines[b], lines[a]
    return "\n".join(lines)


# -- passwords ----------------------------------------------------------------------------------------------------
def test_a_password_is_taken_from_a_url_decoded() -> None:
    assert _password("postgresql://relay:s%40cret-Pw@db:5432/relay") == "s@cret-Pw"
    assert _password("postgresql://relay@db/relay") is None
    assert _password(None) is None


def test_error_texts_lose_every_password_and_url_credentials() -> None:
    settings = Settings(database_url="postgresql://src:Source-Pw-1@a:5432/relay")
    target = "postgresql://dst:Target%2FPw-2@b:5432/other"
    text = ('connection to postgresql://dst:Target/Pw-2@b:5432/other failed: password "Target/Pw-2" refused; '
            "source Source-Pw-1")
    cleaned = _clean(text, settings, target)
    assert "Target/Pw-2" not in cleaned and "Source-Pw-1" not in cleaned and "Target%2FPw-2" not in cleaned
    assert "failed" in cleaned and "b:5432/other" in cleaned
    assert Settings(database_url=target).store.describe() == "postgresql://b:5432/other (schema public)"

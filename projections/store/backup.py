"""The backup stream of `relay store export|import`: the event log as JSON Lines a person can keep and read.

    {"format": "relay-event-log", "format_version": 1, "relay_version": "0.2.0", "events": 3, "last_position": 4}
    {"position": 1, "originator_id": "5b0c...", "originator_version": 1, "topic": "relay.events...:App.Registered",
     "state": {...}}                                  (or "state_b64": "...": a state that is not JSON text)
    ...
    {"sha256": "<hex>", "events": 3}

The header comes first, one line per stored event in notification order (`position` is its notification id,
gaps kept), and the last line holds the SHA-256 of every byte before it (each line with its "\\n"). A state is
written as JSON only when writing it back gives the very bytes stored; otherwise it goes as base64. Pure: text
in, text out; reading and writing files is the caller's.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Notification

FORMAT = "relay-event-log"
FORMAT_VERSION = 1


class BackupError(ValueError):
    """A backup stream that cannot be trusted: corrupted, truncated, or not a Relay backup."""


@dataclass(frozen=True)
class Header:
    relay_version: str
    events: int
    last_position: int


def _line(value: object) -> str:
    # Keys in the order given, never sorted: a state's keys keep their stored order (its bytes are kept).
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n"


def _state_as_json(state: bytes) -> tuple[bool, object]:
    """(True, the state as a JSON value) when writing that value back gives `state` exactly; else (False, None)."""
    try:
        value = json.loads(state)
    except ValueError:  # not UTF-8, or not JSON
        return False, None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() == state, value


def header_line(header: Header) -> str:
    return _line({"format": FORMAT, "format_version": FORMAT_VERSION, "relay_version": header.relay_version,
                  "events": header.events, "last_position": header.last_position})


def event_line(notification: Notification) -> str:
    state = bytes(notification.state)
    exact, value = _state_as_json(state)
    payload = {"state": value} if exact else {"state_b64": base64.b64encode(state).decode()}
    return _line({"position": notification.id, "originator_id": str(notification.originator_id),
                  "originator_version": notification.originator_version, "topic": notification.topic, **payload})


def trailer_line(digest: str, events: int) -> str:
    return _line({"sha256": digest, "events": events})


def write_backup(header: Header, notifications: Iterable[Notification]) -> Iterator[str]:
    """The stream's lines (each ending in "\\n"): header, events, checksum. Refuses events that do not match the
    header's count, or positions that do not rise."""
    digest = hashlib.sha256()
    count, previous = 0, 0
    line = header_line(header)
    digest.update(line.encode())
    yield line
    for notification in notifications:
        if notification.id <= previous:
            raise BackupError(f"positions must rise: {notification.id} after {previous}")
        previous = notification.id
        line = event_line(notification)
        digest.update(line.encode())
        count += 1
        yield line
    if count != header.events:
        raise BackupError(f"the header announced {header.events} events, {count} were written")
    yield trailer_line(digest.hexdigest(), count)


def parse_event(row: dict[str, Any], number: int) -> Notification:
    """One event line's object as the stored event it holds; BackupError naming the line when it is not one."""
    try:
        if "state" in row:
            state = json.dumps(row["state"], separators=(",", ":"), ensure_ascii=False).encode()
        else:
            state = base64.b64decode(row["state_b64"], validate=True)
        position, version, topic = row["position"], row["originator_version"], row["topic"]
        if not (isinstance(position, int) and isinstance(version, int) and isinstance(topic, str)) \
                or isinstance(position, bool) or position < 1:
            raise BackupError(f"line {number}: bad position, version or topic")
        return Notification(id=position, originator_id=UUID(row["originator_id"]), originator_version=version,
                            topic=topic, state=state)
    except BackupError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise BackupError(f"line {number} is not an event of a Relay backup ({error.__class__.__name__})") from None


def parse_header(line: str) -> Header:
    try:
        row = json.loads(line)
        if row.get("format") != FORMAT:
            raise BackupError(f"not a Relay backup (its first line has no \"format\": \"{FORMAT}\")")
        if row.get("format_version") != FORMAT_VERSION:
            raise BackupError(f"backup format version {row.get('format_version')!r} is not one this Relay reads "
                              f"({FORMAT_VERSION})")
        return Header(relay_version=str(row["relay_version"]), events=int(row["events"]),
                      last_position=int(row["last_position"]))
    except BackupError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BackupError("not a Relay backup (its first line is not its header)") from None


def read_backup(lines: Iterable[str]) -> Iterator[Notification]:
    """The events of a backup stream, in order, checked as they come: the header first, rising positions, and
    at the end the count and the checksum. A consumer must not keep what it read until the iterator is exhausted
    without a BackupError (a corrupted or truncated stream raises at its end, if not before)."""
    digest = hashlib.sha256()
    header: Header | None = None
    count, previous = 0, 0
    trailer: dict[str, Any] | None = None
    for number, line in enumerate(lines, start=1):
        if trailer is not None:
            raise BackupError(f"line {number}: text after the checksum line")
        if not line.endswith("\n"):
            raise BackupError(f"line {number} is cut short (truncated file?)")
        if header is None:
            header = parse_header(line)
            digest.update(line.encode())
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise BackupError(f"line {number} is not JSON (a damaged file?)") from None
        if isinstance(row, dict) and "sha256" in row:
            trailer = row
        else:
            if not isinstance(row, dict):
                raise BackupError(f"line {number} is not an event of a Relay backup")
            event = parse_event(row, number)
            if event.id <= previous:
                raise BackupError(f"line {number}: position {event.id} after {previous} (events out of order)")
            previous = event.id
            count += 1
            digest.update(line.encode())
            yield event
    if header is None:
        raise BackupError("empty file: not a Relay backup")
    if trailer is None:
        raise BackupError("no checksum line at the end: the file is truncated")
    _check_trailer(trailer, digest.hexdigest(), count, header)


def _check_trailer(row: dict[str, Any], digest: str, count: int, header: Header) -> None:
    try:
        expected, announced = str(row["sha256"]), int(row["events"])
    except (ValueError, KeyError, TypeError):
        raise BackupError("the checksum line is damaged") from None
    if expected != digest:
        raise BackupError("checksum mismatch: the file was changed or damaged after it was written")
    if not count == announced == header.events:
        raise BackupError(f"{count} events read, the file announces {header.events} (truncated file?)")

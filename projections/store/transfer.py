"""Moving a whole event log: copied to another store, or exported to (and imported from) a backup stream.

Each event keeps its notification id, originator id and version, topic and state, byte for byte. A target must
hold no event: everything is written in one transaction, so a failed copy or import leaves it as empty as it was.
The views are not copied: the caller rebuilds them on the target (projections/replay.py `rebuild`). Whether a
server is writing to a store is the caller's to check (the instances table, actors/heartbeats.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice

from eventsourcing.persistence import Notification

from relay.projections.eventsourcing_recorders import append_to_empty_log, count_notifications
from relay.projections.store.backup import Header, read_backup, write_backup
from relay.projections.store.log import RelayLog

PAGE = 1000


class TargetNotEmptyError(Exception):
    """The target store already holds events: nothing was written."""


class SourceChangedError(Exception):
    """The source log grew while it was copied (a server started on it): nothing was written."""


@dataclass(frozen=True)
class Snapshot:
    """The log as it stands: how many events, up to which notification id (ids may have gaps)."""

    events: int
    last_position: int


def snapshot(log: RelayLog) -> Snapshot:
    last = log.recorder.max_notification_id() or 0
    return Snapshot(events=count_notifications(log.recorder, last) if last else 0, last_position=last)


def pages(log: RelayLog, stop: int, progress: Callable[[int], None] = lambda _: None) -> Iterator[list[Notification]]:
    """The log's events up to `stop`, in notification order, a page at a time."""
    start = 0
    while start < stop:
        page = list(log.recorder.select_notifications(start=start, limit=PAGE, stop=stop, inclusive_of_start=False))
        if not page:
            return
        start = page[-1].id
        progress(start)
        yield page


def _batched(events: Iterable[Notification]) -> Iterator[list[Notification]]:
    iterator = iter(events)
    while batch := list(islice(iterator, PAGE)):
        yield batch


def copy_log(source: RelayLog, target: RelayLog, progress: Callable[[int], None] = lambda _: None) -> Snapshot:
    """Copy every event of `source` into the empty `target`, in one transaction of the target's."""
    taken = snapshot(source)

    def unchanged() -> None:  # checked before the target commits: a late writer to the source undoes the copy
        if (source.recorder.max_notification_id() or 0) != taken.last_position:
            raise SourceChangedError("the source store received events during the copy")

    written = append_to_empty_log(target.recorder, pages(source, taken.last_position, progress), unchanged)
    if written is None:
        raise TargetNotEmptyError("the target store already holds events")
    if written != taken.events:
        raise SourceChangedError(f"{written} events read from the source, {taken.events} expected")
    return taken


def export_lines(source: RelayLog, relay_version: str,
                 progress: Callable[[int], None] = lambda _: None) -> tuple[Snapshot, Iterator[str]]:
    """The backup stream of `source` as it stands now (events appended meanwhile are left out, so it is safe
    beside a running server): its snapshot, and its lines (projections/store/backup.py)."""
    taken = snapshot(source)
    events = (n for page in pages(source, taken.last_position, progress) for n in page)
    return taken, write_backup(Header(relay_version, taken.events, taken.last_position), events)


def verify_backup(lines: Iterable[str]) -> int:
    """Read a backup stream through, checking it (header, order, count, checksum); its event count."""
    return sum(1 for _ in read_backup(lines))


def import_lines(lines: Iterable[str], target: RelayLog) -> int:
    """Write the events of a backup stream into the empty `target`, in one transaction, which a damaged or
    truncated stream rolls back (its checksum is checked before the commit). Check the stream first with
    `verify_backup`, before opening the target, so that a damaged file touches no store."""
    written = append_to_empty_log(target.recorder, _batched(read_backup(lines)))
    if written is None:
        raise TargetNotEmptyError("the target store already holds events")
    return written

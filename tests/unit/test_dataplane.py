"""The data plane's own logic (issue 15): its settings as events, references, the schema rule, scrubbing,
and values loaded without running an application's code. The client itself runs against real system databases
in tests/integration/test_dataplane_*.py."""

from __future__ import annotations

import base64
import os
import pickle
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from relay.actors.adapters.dataplane.client import DataPlane, scrub
from relay.actors.adapters.dataplane.pickle_shape import MAX_TUPLE_NESTING
from relay.actors.adapters.dataplane.reference import (
    MAX_REFERENCE_FILE_BYTES,
    UnsafeReference,
    UnusableReference,
    resolve_url,
)
from relay.actors.adapters.dataplane.schema import MIN_SCHEMA_VERSION, judge
from relay.actors.adapters.dataplane.values import (
    RefusedGlobalError,
    UnsafeShapeError,
    as_text,
    dump_pickle,
    load_plain_pickle,
)
from relay.actors.configuration.settings import ConfigError, Settings
from relay.actors.errors import DataPlaneFailedError, DataPlaneTimedOutError, DataPlaneUnavailableError
from relay.actors.policies.dataplane_aggregates import AggregateRequestError, aggregate
from relay.events.application import App
from relay.events.data_plane import check_data_plane, check_reference_allowed, parse_allowed_references
from relay.events.errors import IllegalTransitionError, InvalidValueError
from relay.wire import client_records

AT = datetime(2026, 12, 4, tzinfo=UTC)
URL = "postgresql://app_user:s3cr3t-pw@db.internal:5432/app_sys"


# -- settings, as events -------------------------------------------------------------------------------------------
def test_defaults_are_filled_in_and_a_reference_is_required() -> None:
    assert check_data_plane({"systemDatabaseUrlFrom": "env:APP_DB"}) == {
        "systemDatabaseUrlFrom": "env:APP_DB", "mode": "read", "statementTimeoutMs": 10_000, "poolSize": 2,
        "schema": "dbos",
    }
    with pytest.raises(InvalidValueError, match="required"):
        check_data_plane({"mode": "read"})


@pytest.mark.parametrize("body", [
    {"systemDatabaseUrlFrom": "env:1BAD"}, {"systemDatabaseUrlFrom": "file:relative/path"},
    {"systemDatabaseUrlFrom": "env:A", "mode": "write"}, {"systemDatabaseUrlFrom": "env:A", "poolSize": 0},
    {"systemDatabaseUrlFrom": "env:A", "statementTimeoutMs": True}, {"systemDatabaseUrlFrom": "env:A", "x": 1},
    {"systemDatabaseUrlFrom": "env:A", "schema": "a;drop"},
])
def test_bad_settings_are_refused_naming_the_field(body: dict) -> None:
    with pytest.raises(InvalidValueError):
        check_data_plane(body)


def test_a_url_given_instead_of_a_reference_is_refused_without_repeating_it() -> None:
    with pytest.raises(InvalidValueError) as refused:
        check_data_plane({"systemDatabaseUrlFrom": URL})
    assert "s3cr3t" not in str(refused.value) and "db.internal" not in str(refused.value)
    assert "env:NAME" in str(refused.value)


def test_the_app_records_a_change_once_and_a_removal() -> None:
    app = App.register("local", "dp-app", AT)
    app.configure_data_plane({"systemDatabaseUrlFrom": "file:/run/secrets/db"}, AT, by="admin")
    app.configure_data_plane({"systemDatabaseUrlFrom": "file:/run/secrets/db"}, AT, by="admin")  # no change
    app.remove_data_plane(AT, by="admin")
    app.remove_data_plane(AT, by="admin")  # nothing to remove
    kinds = [type(e).__name__ for e in app.collect_events()]
    assert kinds == ["Registered", "DataPlaneConfigured", "DataPlaneRemoved"]
    assert app.data_plane is None


def test_a_deleted_app_takes_no_data_plane() -> None:
    app = App.register("local", "dp-app", AT)
    app.delete(AT)
    with pytest.raises(IllegalTransitionError):
        app.configure_data_plane({"systemDatabaseUrlFrom": "env:A"}, AT)


# -- the URL: resolved late, never shown -------------------------------------------------------------------------
def test_a_reference_resolves_from_the_environment_or_a_small_regular_file(tmp_path: Path) -> None:
    assert resolve_url("env:APP_DB", {"APP_DB": f" {URL}\n"}) == URL
    secret = tmp_path / "db-url"
    secret.write_text(URL + "\n")
    assert resolve_url(f"file:{secret}", {}) == URL
    with pytest.raises(UnusableReference, match="APP_DB of the Relay server is not set"):
        resolve_url("env:APP_DB", {})
    with pytest.raises(UnusableReference, match="cannot read"):
        resolve_url(f"file:{tmp_path / 'missing'}", {})
    # Relay's own secrets are not a reference's to read: its settings, its data directory (the admin token).
    with pytest.raises(InvalidValueError, match="RELAY_"):
        resolve_url("env:RELAY_ADMIN_TOKEN", {"RELAY_ADMIN_TOKEN": "t"})
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "admin_token").write_text("t")
    with pytest.raises(UnsafeReference, match="data directory"):
        resolve_url(f"file:{tmp_path / 'data' / '..' / 'data' / 'admin_token'}", {}, (tmp_path / "data",))
    # Nothing but a small regular file is read: not a device, not a FIFO (opening one would wait for a writer).
    with pytest.raises(UnsafeReference, match="not a regular file"):
        resolve_url("file:/dev/zero", {})
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeReference, match="not a regular file"):
        resolve_url(f"file:{fifo}", {})
    large = tmp_path / "large"
    large.write_text("x" * (MAX_REFERENCE_FILE_BYTES + 1))
    with pytest.raises(UnsafeReference, match="larger than"):
        resolve_url(f"file:{large}", {})


def test_the_operator_binds_references_to_applications() -> None:
    allowed = parse_allowed_references(" local/alpha=env:ALPHA_SYSDB,local/alpha=file:/run/a\nlocal/my_app=env:M ")
    assert allowed == {("local", "alpha"): frozenset({"env:ALPHA_SYSDB", "file:/run/a"}),
                       ("local", "my_app"): frozenset({"env:M"})}
    check_reference_allowed("env:ALPHA_SYSDB", "local", "alpha", allowed)
    for reference, org, app in (("env:ALPHA_SYSDB", "local", "bravo"), ("env:M", "local", "my-app"),
                                ("env:ALPHA_SYSDB", "other", "alpha"), ("env:B_SYSDB", "local", "alpha")):
        with pytest.raises(InvalidValueError, match="RELAY_DATA_PLANE_REFERENCES"):
            check_reference_allowed(reference, org, app, allowed)
    assert parse_allowed_references("") == {}
    for bad in ("alpha=env:A", "local/alpha", "local/Alpha=env:A", "local/alpha=postgresql://u:p@h/d",
                "local/alpha=env:RELAY_ADMIN_TOKEN", "local/alpha=env:A local/bravo=env:A"):
        with pytest.raises(InvalidValueError) as refused:
            parse_allowed_references(bad)
        assert "u:p@" not in str(refused.value)
    # A bad list stops `relay serve` at start, naming the setting and the entry, not its text.
    with pytest.raises(ConfigError, match=r"RELAY_DATA_PLANE_REFERENCES: entry 2 .*bound to local/alpha"):
        Settings.from_env({"RELAY_DATA_PLANE_REFERENCES": "local/alpha=env:A local/bravo=env:A"})
    assert Settings.from_env({"RELAY_DATA_PLANE_REFERENCES": "local/alpha=env:A"}).data_plane_references == {
        ("local", "alpha"): frozenset({"env:A"})}


def test_scrub_removes_the_url_its_password_and_any_credentials() -> None:
    text = f'connection to "{URL}" failed: password "s3cr3t-pw" rejected; retry postgresql://u:p@h/db password=x'
    cleaned = scrub(text, URL)
    assert "s3cr3t" not in cleaned and URL not in cleaned and "u:p@" not in cleaned and "password=x" not in cleaned


BOUND = {("local", "dp-app"): frozenset({"env:APP_DB", "env:A"})}


def test_an_unset_reference_is_reported_as_unresolved_and_retried_later() -> None:
    now = [0.0]
    environ: dict[str, str] = {}
    plane = DataPlane("local", "dp-app", check_data_plane({"systemDatabaseUrlFrom": "env:APP_DB"}), environ,
                      clock=lambda: now[0], allowed=BOUND)
    state = plane.state()
    assert (state.status, state.schema_version) == ("unresolved", None)
    assert "APP_DB" not in state.detail  # whether a variable is set is not the caller's to learn
    environ["APP_DB"] = "sqlite:////nonexistent/dir/sys.sqlite"
    assert plane.state().status == "unresolved"  # not retried before RETRY_AFTER_FAILURE_S
    now[0] = 60.0
    with pytest.raises(DataPlaneUnavailableError) as failed:  # the API's 503 (web/problems.py)
        plane.client()
    assert "Relay's log says why" in failed.value.detail
    assert not Path("/nonexistent/dir/sys.sqlite").exists()


# -- the schema rule ---------------------------------------------------------------------------------------------
def test_the_schema_rule() -> None:
    assert judge(MIN_SCHEMA_VERSION, 125, "3.4.0").ok
    assert judge(125, 125, "3.4.0").ok
    older = judge(MIN_SCHEMA_VERSION - 1, 125, "3.4.0")
    assert not older.ok and "dbos migrate" in older.detail and "never migrates" in older.detail
    newer = judge(126, 125, "3.4.0")
    assert not newer.ok and "upgrade Relay" in newer.detail and "3.4.0" in newer.detail
    assert not judge(0, 125, "3.4.0").ok


# -- values: plain data loads, code does not ---------------------------------------------------------------------
class Boom:
    def __reduce__(self) -> tuple:
        return (print, ("pwned",))


def test_plain_data_loads_and_code_is_refused() -> None:
    value = {"args": (1, "x", datetime(2026, 1, 1, tzinfo=UTC)), "kwargs": {"n": {1, 2}}}
    assert load_plain_pickle(dump_pickle(value)) == value
    assert isinstance(load_plain_pickle(dump_pickle(ValueError("bad"))), ValueError)
    with pytest.raises(RefusedGlobalError, match=r"builtins\.print"):
        load_plain_pickle(base64.b64encode(pickle.dumps(Boom())).decode())
    with pytest.raises(RefusedGlobalError, match=r"builtins\.eval"):
        load_plain_pickle(base64.b64encode(b"cbuiltins\neval\n(S'1+1'\ntR.").decode())


def test_values_as_the_api_shows_them() -> None:
    assert as_text({"args": (20,), "kwargs": {}}) == '{"args": [20], "kwargs": {}}'
    assert as_text(41) == "41"
    assert as_text("stored text") == "stored text"
    assert as_text(ValueError("bad")) == "ValueError: bad"
    assert as_text(None) is None


def test_client_records_are_the_executors_wire_records() -> None:
    status = SimpleNamespace(
        workflow_id="wf", status="SUCCESS", name="greet", class_name=None, config_name=None, authenticated_user=None,
        assumed_role=None, authenticated_roles=["a"], input={"args": (1,), "kwargs": {}}, output=2, error=None,
        created_at=1764806400000, updated_at=1764806400500, queue_name="q", app_version="v1", executor_id="e1",
        workflow_timeout_ms=None, workflow_deadline_epoch_ms=None, deduplication_id=None, priority=0,
        queue_partition_key=None, forked_from=None, was_forked_from=True, parent_workflow_id=None, dequeued_at=None,
        delay_until_epoch_ms=None, completed_at=1764806400500, attributes={"k": 1}, schedule_name=None,
        application_name="dp-app",
    )
    record = client_records.workflow(status, as_text)
    assert record["WorkflowUUID"] == "wf" and record["CreatedAt"] == "1764806400000"
    assert record["Input"] == '{"args": [1], "kwargs": {}}' and record["Output"] == "2"
    assert record["AuthenticatedRoles"] == '["a"]' and record["Attributes"] == '{"k": 1}'
    assert record["WasForkedFrom"] is True
    info = {"function_id": 1, "function_name": "s", "output": 3, "error": None, "child_workflow_id": None,
            "started_at_epoch_ms": 5, "completed_at_epoch_ms": 6}
    step = client_records.step(info, as_text)
    assert step == {"function_id": 1, "function_name": "s", "output": "3", "error": None, "child_workflow_id": None,
                    "started_at_epoch_ms": "5", "completed_at_epoch_ms": "6"}


# -- aggregates folded from the workflow list ---------------------------------------------------------------------
def _wf(status: str, name: str, created: int, dequeued: int | None = None, completed: int | None = None) -> object:
    return SimpleNamespace(status=status, name=name, queue_name=None, executor_id="e", app_version="v1",
                           application_name="a", created_at=created, dequeued_at=dequeued, completed_at=completed)


def test_workflow_aggregates_group_and_measure_like_an_executor() -> None:
    rows = [_wf("SUCCESS", "a", 1_000, 1_010, 1_100), _wf("SUCCESS", "a", 2_500, None, 2_600),
            _wf("ERROR", "a", 3_000), _wf("SUCCESS", "b", 500, 700, 900)]
    body = SimpleNamespace(group_by_status=True, group_by_name=True, time_bucket_size_ms=None, select_count=True,
                           select_min_created_at=True, select_max_queue_wait_ms=True,
                           select_max_total_latency_ms=True)
    out = {tuple(r["group"].values()): r for r in aggregate(rows, body)}
    assert out[("SUCCESS", "a")] == {"group": {"status": "SUCCESS", "name": "a"}, "count": 2, "min_created_at": 1_000,
                                     "max_queue_wait_ms": 10, "max_total_latency_ms": 100}
    assert out[("ERROR", "a")]["max_total_latency_ms"] is None
    bucketed = SimpleNamespace(group_by_status=False, time_bucket_size_ms=1_000, select_count=True)
    counts = {r["group"]["time_bucket"]: r["count"] for r in aggregate(rows, bucketed)}
    assert counts == {"1000": 1, "2000": 1, "3000": 1, "0": 1}
    with pytest.raises(AggregateRequestError):
        aggregate(rows, SimpleNamespace(time_bucket_size_ms=None, select_count=True))
    with pytest.raises(AggregateRequestError):
        aggregate(rows, SimpleNamespace(group_by_status=True, time_bucket_size_ms=None))


def test_client_failures_map_to_the_api() -> None:
    """As domain errors: timed out (the API's 504), unavailable (503), failed (502); web/problems.py maps them."""
    plane = DataPlane("local", "dp-app", check_data_plane({"systemDatabaseUrlFrom": "env:A"}), {}, allowed=BOUND)

    class OperationalError(Exception):
        pass

    class QueryCanceled(OperationalError):
        pass

    timed_out = plane.failure(QueryCanceled("canceling statement due to statement timeout"))
    assert isinstance(timed_out, DataPlaneTimedOutError) and "10000 ms" in timed_out.detail
    gone = plane.failure(OperationalError(f"connection to {URL} failed: server closed the connection"))
    assert isinstance(gone, DataPlaneUnavailableError)
    assert "s3cr3t" not in gone.detail and "cannot be reached" in gone.detail
    other = plane.failure(RuntimeError("something else"))
    assert isinstance(other, DataPlaneFailedError)


class _Allocates:
    def __reduce__(self) -> tuple[object, tuple[int]]:
        return (bytearray, (10**12,))


def _nested_tuple_key(depth: int) -> str:
    """A dict whose key is `depth` 1-tuples inside each other: PROTO 4, EMPTY_DICT, EMPTY_TUPLE, TUPLE1 x depth,
    NONE, SETITEM, STOP. Plain data only, yet hashing the key recurses in C with no depth check: at 500,000 levels
    `pickle.loads` crashes the process (never run here)."""
    return base64.b64encode(b"\x80\x04})" + b"\x85" * depth + b"Ns.").decode()


def test_the_plain_data_loader_refuses_a_pickle_shaped_to_crash_it() -> None:
    with pytest.raises(UnsafeShapeError):
        load_plain_pickle(_nested_tuple_key(500_000))
    with pytest.raises(pickle.UnpicklingError):  # a declared length that is not there
        load_plain_pickle(base64.b64encode(b"\x80\x04\x8d\xff\xff\xff\x7f\x00\x00\x00\x00.").decode())
    with pytest.raises(pickle.UnpicklingError):
        load_plain_pickle(base64.b64encode(b"not a pickle").decode())
    with pytest.raises(RefusedGlobalError):  # bytearray(n) would allocate n bytes
        load_plain_pickle(base64.b64encode(pickle.dumps(_Allocates(), protocol=2)).decode())
    assert load_plain_pickle(dump_pickle(bytearray(b"ok"))) == bytearray(b"ok")  # protocol 5: its own opcode
    shallow = load_plain_pickle(_nested_tuple_key(MAX_TUPLE_NESTING - 1))
    assert isinstance(shallow, dict) and len(shallow) == 1

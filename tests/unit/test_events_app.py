"""App aggregate: registration, settings (and their validation), deletion, registering again, rebuild."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from relay.events.application import DEFAULT_SETTINGS, App, check_settings
from relay.events.errors import DomainError, IllegalTransitionError, InvalidValueError
from relay.events.ids import app_id
from relay.events.names import check_app_name
from relay.projections.store.log import RelayLog

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(seconds=1)
T2 = T0 + timedelta(seconds=2)
T3 = T0 + timedelta(seconds=3)
T4 = T0 + timedelta(seconds=4)

DEFAULTS = {
    "executorTimeoutSecs": 60,
    "gcRowsThreshold": None,
    "gcTimeThresholdMs": None,
    "globalTimeoutMs": None,
    "privateMode": False,
}

_ENVELOPE = {"originator_id", "originator_version", "timestamp", "originator_topic"}


def payload(event: object) -> dict:
    return {k: v for k, v in vars(event).items() if k not in _ENVELOPE}


def single_event(aggregate: App, kind: type) -> object:
    events = aggregate.collect_events()
    assert [type(e) for e in events] == [kind]
    return events[0]


def live_app(at: datetime = T0) -> App:
    app = App.register("acme", "shop", at)
    app.collect_events()
    return app


def deleted_app() -> App:
    app = live_app()
    app.change_settings({"privateMode": True, "executorTimeoutSecs": 5}, T1)
    app.delete(T2)
    app.collect_events()
    return app


def replay(events: list) -> App:
    aggregate = None
    for e in events:
        aggregate = e.mutate(aggregate)
    assert isinstance(aggregate, App)
    return aggregate


def test_default_settings_are_the_documented_ones():
    assert DEFAULT_SETTINGS == DEFAULTS


# -- application names -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["abc", "a" * 30, "my-app", "my_app", "app-2_b", "---", "123"])
def test_valid_app_names_are_returned_unchanged(name):
    assert check_app_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "ab", "a" * 31, "MyApp", "my app", "my.app", "my/app", "appé", "app\n", "\napp", " app", None, 42],
)
def test_invalid_app_names_are_refused(name):
    with pytest.raises(InvalidValueError, match=r"application name must be 3-30 characters of \[a-z0-9-_\]"):
        check_app_name(name)


# -- settings validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"executorTimeoutSecs": 1},
        {"executorTimeoutSecs": 3600},
        {"gcRowsThreshold": 1000},
        {"gcRowsThreshold": None},
        {"gcTimeThresholdMs": 86_400_000},
        {"gcTimeThresholdMs": None},
        {"globalTimeoutMs": 1},
        {"globalTimeoutMs": None},
        {"privateMode": True},
        {"privateMode": False},
        dict(DEFAULTS),
    ],
)
def test_check_settings_accepts_valid_changes_and_returns_them(changes):
    assert check_settings(changes) is changes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"executorTimeout": 60}, "unknown setting 'executorTimeout'"),
        ({"executor_timeout_secs": 60}, "unknown setting 'executor_timeout_secs'"),
        ({"privateMode": 1}, "setting 'privateMode' must be a boolean"),
        ({"privateMode": "true"}, "setting 'privateMode' must be a boolean"),
        ({"privateMode": None}, "setting 'privateMode' must be a boolean"),
        ({"executorTimeoutSecs": None}, "setting 'executorTimeoutSecs' cannot be cleared"),
        ({"executorTimeoutSecs": 0}, "setting 'executorTimeoutSecs' must be a positive integer"),
        ({"executorTimeoutSecs": -5}, "setting 'executorTimeoutSecs' must be a positive integer"),
        ({"executorTimeoutSecs": 1.5}, "setting 'executorTimeoutSecs' must be a positive integer"),
        ({"executorTimeoutSecs": 60.0}, "setting 'executorTimeoutSecs' must be a positive integer"),
        ({"executorTimeoutSecs": "60"}, "setting 'executorTimeoutSecs' must be a positive integer"),
        ({"executorTimeoutSecs": True}, "setting 'executorTimeoutSecs' must be a positive integer"),
        ({"gcRowsThreshold": 0}, "setting 'gcRowsThreshold' must be a positive integer"),
        ({"gcRowsThreshold": False}, "setting 'gcRowsThreshold' must be a positive integer"),
        ({"gcTimeThresholdMs": -1}, "setting 'gcTimeThresholdMs' must be a positive integer"),
        ({"gcTimeThresholdMs": [1]}, "setting 'gcTimeThresholdMs' must be a positive integer"),
        ({"globalTimeoutMs": 0}, "setting 'globalTimeoutMs' must be a positive integer"),
        ({"globalTimeoutMs": "1000"}, "setting 'globalTimeoutMs' must be a positive integer"),
        ({"privateMode": True, "bogus": 1}, "unknown setting 'bogus'"),
    ],
)
def test_check_settings_refuses_invalid_changes_naming_the_field(changes, message):
    with pytest.raises(InvalidValueError) as caught:
        check_settings(changes)
    assert str(caught.value) == message
    assert isinstance(caught.value, DomainError)


# -- registration ------------------------------------------------------------------------------


def test_register_records_registered_with_org_name_and_time():
    app = App.register("acme", "shop", T0)

    event = single_event(app, App.Registered)
    assert payload(event) == {"org": "acme", "name": "shop", "at": T0, "by": "relay"}
    assert event.originator_id == app_id("acme", "shop")
    assert event.originator_version == 1

    assert app.id == app_id("acme", "shop")
    assert app.version == 1
    assert app.org == "acme"
    assert app.name == "shop"
    assert app.created_at == T0
    assert app.updated_at == T0
    assert app.deleted is False
    assert app.settings == DEFAULTS


def test_the_same_names_always_give_the_same_id():
    assert App.register("acme", "shop", T0).id == App.register("acme", "shop", T3).id
    assert App.register("acme", "shop", T0).id != App.register("acme", "cart", T0).id
    assert App.register("acme", "shop", T0).id != App.register("other", "shop", T0).id


def test_an_app_has_its_own_copy_of_the_default_settings():
    app = live_app()
    app.change_settings({"executorTimeoutSecs": 5, "privateMode": True}, T1)
    app.settings["gcRowsThreshold"] = 7
    assert DEFAULT_SETTINGS == DEFAULTS
    assert live_app().settings == DEFAULTS


@pytest.mark.parametrize(
    ("org", "name"), [("ab", "shop"), ("ACME", "shop"), ("my-org", "shop"), ("acme\n", "shop")]
)
def test_register_refuses_an_invalid_org_name(org, name):
    with pytest.raises(InvalidValueError, match="organization name"):
        App.register(org, name, T0)


@pytest.mark.parametrize("name", ["ab", "Shop", "my shop", "shop\n", "a" * 31])
def test_register_refuses_an_invalid_app_name(name):
    with pytest.raises(InvalidValueError, match="application name"):
        App.register("acme", name, T0)


# -- settings changes --------------------------------------------------------------------------


def test_change_settings_records_the_changes_and_applies_them():
    app = live_app()

    app.change_settings({"executorTimeoutSecs": 5, "privateMode": True}, T1)

    event = single_event(app, App.SettingsChanged)
    assert payload(event) == {"changes": {"executorTimeoutSecs": 5, "privateMode": True}, "at": T1, "by": "relay"}
    assert event.originator_version == 2
    assert app.settings == {**DEFAULTS, "executorTimeoutSecs": 5, "privateMode": True}
    assert app.updated_at == T1
    assert app.created_at == T0


def test_change_settings_records_only_the_values_that_change():
    app = live_app()

    app.change_settings({"executorTimeoutSecs": 60, "privateMode": False, "gcRowsThreshold": 500}, T1)

    event = single_event(app, App.SettingsChanged)
    assert event.changes == {"gcRowsThreshold": 500}
    assert app.settings == {**DEFAULTS, "gcRowsThreshold": 500}


def test_change_settings_that_changes_nothing_records_nothing():
    app = live_app()

    app.change_settings({"executorTimeoutSecs": 60, "privateMode": False, "globalTimeoutMs": None}, T1)
    app.change_settings({}, T2)

    assert app.collect_events() == []
    assert app.updated_at == T0
    assert app.version == 1


def test_optional_settings_can_be_cleared_again():
    app = live_app()
    app.change_settings({"gcRowsThreshold": 10, "gcTimeThresholdMs": 20, "globalTimeoutMs": 30}, T1)
    app.collect_events()

    app.change_settings({"gcRowsThreshold": None, "gcTimeThresholdMs": None, "globalTimeoutMs": None}, T2)

    event = single_event(app, App.SettingsChanged)
    assert event.changes == {"gcRowsThreshold": None, "gcTimeThresholdMs": None, "globalTimeoutMs": None}
    assert app.settings == DEFAULTS
    assert app.updated_at == T2


def test_successive_changes_accumulate():
    app = live_app()
    app.change_settings({"executorTimeoutSecs": 5}, T1)
    app.change_settings({"executorTimeoutSecs": 10, "privateMode": True}, T2)

    events = app.collect_events()
    assert [type(e) for e in events] == [App.SettingsChanged, App.SettingsChanged]
    assert [e.changes for e in events] == [
        {"executorTimeoutSecs": 5},
        {"executorTimeoutSecs": 10, "privateMode": True},
    ]
    assert app.settings["executorTimeoutSecs"] == 10
    assert app.settings["privateMode"] is True
    assert app.version == 3


@pytest.mark.parametrize(
    "changes",
    [
        {"executorTimeoutSecs": 0},
        {"executorTimeoutSecs": None},
        {"privateMode": "yes"},
        {"nope": 1},
        {"privateMode": True, "executorTimeoutSecs": -1},
    ],
)
def test_an_invalid_settings_change_is_refused_whole(changes):
    app = live_app()

    with pytest.raises(InvalidValueError):
        app.change_settings(changes, T1)

    assert app.collect_events() == []
    assert app.settings == DEFAULTS
    assert app.updated_at == T0


def test_change_settings_of_a_deleted_app_is_an_illegal_transition():
    app = deleted_app()
    settings = dict(app.settings)

    with pytest.raises(IllegalTransitionError) as caught:
        app.change_settings({"executorTimeoutSecs": 30}, T3)

    assert str(caught.value) == "application 'shop' is deleted: cannot change its settings"
    assert caught.value.what == "application 'shop'"
    assert caught.value.state == "deleted"
    assert caught.value.command == "change its settings"
    assert app.collect_events() == []
    assert app.settings == settings


def test_a_deleted_app_refuses_settings_before_validating_them():
    app = deleted_app()
    with pytest.raises(IllegalTransitionError, match="is deleted: cannot change its settings"):
        app.change_settings({"bogus": object()}, T3)
    assert app.collect_events() == []


# -- deletion ----------------------------------------------------------------------------------


def test_delete_records_deleted_and_keeps_the_settings():
    app = live_app()
    app.change_settings({"privateMode": True}, T1)
    app.collect_events()

    app.delete(T2)

    event = single_event(app, App.Deleted)
    assert payload(event) == {"at": T2, "by": "relay"}
    assert event.originator_version == 3
    assert app.deleted is True
    assert app.updated_at == T2
    assert app.settings["privateMode"] is True
    assert app.name == "shop"
    assert app.created_at == T0


def test_deleting_a_deleted_app_is_an_illegal_transition():
    app = deleted_app()

    with pytest.raises(IllegalTransitionError) as caught:
        app.delete(T3)

    assert str(caught.value) == "application 'shop' is deleted: cannot delete it"
    assert caught.value.state == "deleted"
    assert caught.value.command == "delete it"
    assert app.collect_events() == []
    assert app.updated_at == T2


# -- registering again -------------------------------------------------------------------------


def test_register_again_revives_a_deleted_app_with_default_settings():
    app = deleted_app()
    assert app.settings != DEFAULTS

    app.register_again(T3)

    event = single_event(app, App.Reregistered)
    assert payload(event) == {"at": T3, "by": "relay"}
    assert event.originator_version == 4
    assert app.deleted is False
    assert app.settings == DEFAULTS
    assert app.updated_at == T3
    assert app.created_at == T0
    assert app.id == app_id("acme", "shop")


def test_a_revived_app_accepts_commands_again():
    app = deleted_app()
    app.register_again(T3)
    app.change_settings({"executorTimeoutSecs": 9}, T4)
    app.delete(T4)

    assert [type(e) for e in app.collect_events()] == [App.Reregistered, App.SettingsChanged, App.Deleted]
    assert app.deleted is True


def test_register_again_of_a_live_app_is_an_illegal_transition():
    app = live_app()

    with pytest.raises(IllegalTransitionError) as caught:
        app.register_again(T1)

    assert str(caught.value) == "application 'shop' is registered: cannot register it again"
    assert caught.value.state == "registered"
    assert caught.value.command == "register it again"
    assert app.collect_events() == []
    assert app.deleted is False
    assert app.updated_at == T0


# -- rebuild -----------------------------------------------------------------------------------


def _history() -> App:
    app = App.register("acme", "shop", T0)
    app.change_settings({"executorTimeoutSecs": 5, "gcRowsThreshold": 100}, T1)
    app.change_settings({"privateMode": True, "gcRowsThreshold": None}, T2)
    app.delete(T3)
    app.register_again(T4)
    app.change_settings({"globalTimeoutMs": 1000}, T4)
    return app


def test_replaying_the_events_rebuilds_the_same_app():
    app = _history()
    events = app.collect_events()
    assert [type(e).__name__ for e in events] == [
        "Registered",
        "SettingsChanged",
        "SettingsChanged",
        "Deleted",
        "Reregistered",
        "SettingsChanged",
    ]

    rebuilt = replay(events)

    assert rebuilt == app
    assert rebuilt.settings == {**DEFAULTS, "globalTimeoutMs": 1000}
    assert rebuilt.version == 6


def test_replaying_a_prefix_rebuilds_the_state_at_that_point():
    events = _history().collect_events()

    at_deletion = replay(events[:4])

    assert at_deletion.deleted is True
    assert at_deletion.updated_at == T3
    assert at_deletion.settings == {**DEFAULTS, "executorTimeoutSecs": 5, "privateMode": True}


@pytest.mark.parametrize("module", ["eventsourcing.popo", "eventsourcing.sqlite"])
def test_an_app_saved_and_loaded_is_identical(module, tmp_path):
    env = {"PERSISTENCE_MODULE": module}
    if module == "eventsourcing.sqlite":
        env["SQLITE_DBNAME"] = str(tmp_path / "relay.db")
    log = RelayLog(env=env)
    app = _history()
    log.save(app)

    loaded = log.repository.get(app_id("acme", "shop"))

    assert loaded == app
    assert loaded is not app
    assert loaded.settings == app.settings
    assert loaded.created_at == T0


def test_who_asked_is_recorded_on_every_app_event():
    app = App.register("acme", "shop", T0, by="api_key:deployer")
    app.change_settings({"executorTimeoutSecs": 9}, T1, by="admin")
    app.delete(T2, by="cli")
    app.register_again(T3, by="admin")
    assert [e.by for e in app.collect_events()] == ["api_key:deployer", "admin", "cli", "admin"]

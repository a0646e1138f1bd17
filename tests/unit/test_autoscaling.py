"""Autoscaling (issue 17): the policy's validation, the recommendation computed from a backlog (pure), the policy as
App events folded into the applications view, and replay: a rebuilt view equals the live one."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from relay.actors import metrics
from relay.actors.application import register_app
from relay.actors.autoscale import Recommendations, gather, versions_newest_first
from relay.actors.policies.autoscaling import queue_problem, recommend
from relay.actors.policies.dataplane_aggregates import count_by_version
from relay.events.application import App
from relay.events.autoscaling import PolicyError, check_policy
from relay.events.errors import IllegalTransitionError
from relay.events.refs import app_ref
from relay.projections import replay
from relay.projections.backend import StoreConfig
from relay.projections.store.log import RelayLog
from relay.projections.views import Views
from tests.unit.store_cases import at

QUEUE = {"name": "work", "worker_concurrency": 2, "partition_queue": False, "concurrency": None}


# -- the policy body


def test_a_policy_keeps_its_queue_and_the_rollout_fields_given() -> None:
    assert check_policy({"queue": "work"}) == {"queue": "work"}
    assert check_policy({"$schema": "x", "queue": "work", "rollout": {"maxOldApplicationVersions": 2}}) == {
        "queue": "work", "rollout": {"maxOldApplicationVersions": 2}}
    assert check_policy({"queue": "work", "rollout": {"maxExecutorsForOldApplicationVersions": 0}}) == {
        "queue": "work", "rollout": {"maxExecutorsForOldApplicationVersions": 0}}


@pytest.mark.parametrize(("body", "location"), [
    ({}, "body.queue"),
    ({"queue": ""}, "body.queue"),
    ({"queue": 3}, "body.queue"),
    ({"queue": "bad\nname"}, "body.queue"),
    ({"queue": "x" * 1025}, "body.queue"),
    ({"queue": "work", "extra": 1}, "body.extra"),
    ({"queue": "work", "rollout": []}, "body.rollout"),
    ({"queue": "work", "rollout": {"maxOld": 1}}, "body.rollout.maxOld"),
    ({"queue": "work", "rollout": {"maxOldApplicationVersions": -1}}, "body.rollout.maxOldApplicationVersions"),
    ({"queue": "work", "rollout": {"maxExecutorsForOldApplicationVersions": 1.5}},
     "body.rollout.maxExecutorsForOldApplicationVersions"),
    ({"queue": "work", "rollout": {"maxOldApplicationVersions": True}}, "body.rollout.maxOldApplicationVersions"),
    ([], "body"),
])
def test_a_bad_policy_names_the_field(body: object, location: str) -> None:
    with pytest.raises(PolicyError) as raised:
        check_policy(body)
    assert raised.value.location == location


def test_only_an_existing_unpartitioned_queue_with_worker_concurrency_drives_a_policy() -> None:
    assert queue_problem("work", QUEUE) is None
    assert "does not exist" in (queue_problem("work", None) or "")
    assert "partitioned" in (queue_problem("work", {**QUEUE, "partition_queue": True}) or "")
    assert "worker_concurrency" in (queue_problem("work", {**QUEUE, "worker_concurrency": None}) or "")


# -- the recommendation


def test_the_backlog_is_counted_per_version() -> None:
    rows = [{"group": {"application_version": "v2"}, "count": 3},
            {"group": {"application_version": "v1"}, "count": "4"},
            {"group": {"application_version": "v2"}, "count": 2}, {"group": {}, "count": 9}, "junk"]
    assert count_by_version(rows) == {"v2": 5, "v1": 4}


def test_the_latest_version_alone_by_default_sized_by_worker_concurrency() -> None:
    entries = recommend({"queue": "work"}, ["v3", "v2", "v1"], {"v3": 5, "v2": 7}, QUEUE, 1234)
    assert entries == [{"applicationVersion": "v3", "isLatest": True, "desiredExecutors": 3, "queueDepth": 5,
                        "observedAt": 1234, "queueName": "work"}]


def test_an_empty_backlog_still_wants_one_executor() -> None:
    [entry] = recommend({"queue": "work"}, ["v1"], {}, QUEUE, 0)
    assert (entry["desiredExecutors"], entry["queueDepth"]) == (1, 0)


def test_old_versions_newest_first_up_to_the_rollout_count_and_capped() -> None:
    policy = {"queue": "work", "rollout": {"maxOldApplicationVersions": 1, "maxExecutorsForOldApplicationVersions": 2}}
    entries = recommend(policy, ["v3", "v2", "v1"], {"v3": 9, "v2": 11, "v1": 40}, QUEUE, 7)
    assert [(e["applicationVersion"], e["isLatest"], e["desiredExecutors"], e["queueDepth"]) for e in entries] == [
        ("v3", True, 5, 9), ("v2", False, 2, 11)]


def test_a_cap_of_zero_scales_old_versions_to_nothing_but_never_the_latest() -> None:
    policy = {"queue": "work", "rollout": {"maxOldApplicationVersions": 5, "maxExecutorsForOldApplicationVersions": 0}}
    entries = recommend(policy, ["v2", "v1"], {"v1": 3}, QUEUE, 7)
    assert [(e["applicationVersion"], e["desiredExecutors"]) for e in entries] == [("v2", 1), ("v1", 0)]


def test_without_a_cap_old_versions_are_sized_to_their_own_backlog() -> None:
    policy = {"queue": "work", "rollout": {"maxOldApplicationVersions": 1}}
    entries = recommend(policy, ["v2", "v1"], {"v1": 7}, QUEUE, 7)
    assert [e["desiredExecutors"] for e in entries] == [1, 4]


def test_a_queue_no_longer_usable_leaves_the_queue_name_out_and_asks_for_one() -> None:
    [entry] = recommend({"queue": "work"}, ["v1"], {"v1": 10}, None, 7)
    assert "queueName" not in entry
    assert (entry["desiredExecutors"], entry["queueDepth"]) == (1, 10)


# -- the App aggregate


def test_the_policy_is_set_changed_and_cleared_as_events() -> None:
    app = App.register("acme", "shop", at(0))
    app.set_autoscaling_policy({"queue": "work"}, at(1), by="admin")
    app.set_autoscaling_policy({"queue": "work"}, at(2))  # the same: nothing recorded
    app.set_autoscaling_policy({"queue": "work", "rollout": {"maxOldApplicationVersions": 1}}, at(3))
    app.clear_autoscaling_policy(at(4))
    app.clear_autoscaling_policy(at(5))  # absent: succeeds, nothing recorded
    kinds = [type(e).__name__ for e in app.collect_events()]
    assert kinds == ["Registered", "AutoscalingPolicySet", "AutoscalingPolicySet", "AutoscalingPolicyCleared"]
    assert app.autoscaling_policy is None


def test_a_deleted_app_takes_no_policy_and_registering_again_forgets_it() -> None:
    app = App.register("acme", "shop", at(0))
    app.set_autoscaling_policy({"queue": "work"}, at(1))
    app.delete(at(2))
    with pytest.raises(IllegalTransitionError):
        app.set_autoscaling_policy({"queue": "work"}, at(3))
    app.register_again(at(4))
    assert app.autoscaling_policy is None


def test_the_aggregate_refuses_a_bad_policy() -> None:
    app = App.register("acme", "shop", at(0))
    with pytest.raises(PolicyError):
        app.set_autoscaling_policy({"queue": "work", "rollout": {"maxOldApplicationVersions": -2}}, at(1))


# -- the view, and replay


def _policy_history(relay_log: RelayLog) -> None:
    register_app(relay_log, "acme", "shop", at(1))
    register_app(relay_log, "acme", "billing", at(2))
    relay_log.change(app_ref("acme", "shop"),
                     lambda application: application.set_autoscaling_policy({"queue": "work"}, at(3), "admin"))
    relay_log.change(app_ref("acme", "billing"),
                     lambda application: application.set_autoscaling_policy({"queue": "bills"}, at(4)))
    relay_log.change(app_ref("acme", "shop"),
                     lambda application: application.set_autoscaling_policy(
                         {"queue": "work", "rollout": {"maxOldApplicationVersions": 2}}, at(5), "admin"))
    relay_log.change(app_ref("acme", "billing"), lambda application: application.clear_autoscaling_policy(at(6)))


def test_the_applications_view_holds_the_policy_and_a_replay_rebuilds_it(
    store_config: StoreConfig, relay_log: RelayLog,
) -> None:
    _policy_history(relay_log)
    views = Views(store_config, relay_log)
    try:
        views.catch_up()
        shop = views.applications.app("acme", "shop")
        billing = views.applications.app("acme", "billing")
        assert shop is not None and billing is not None
        assert shop["settings"]["autoscalingPolicy"] == {"queue": "work", "rollout": {"maxOldApplicationVersions": 2}}
        assert billing["settings"]["autoscalingPolicy"] is None

        report = replay.verify(store_config, relay_log, lambda _n: None)
        assert (report.verified, report.differences) == (True, [])
        rebuilt = replay.rebuild(store_config, relay_log, lambda _n: None)
        assert rebuilt.events > 0
        again = views.applications.app("acme", "shop")
        assert again is not None and again["settings"]["autoscalingPolicy"] == shop["settings"]["autoscalingPolicy"]
    finally:
        views.close()


# -- what is asked of the executors, and the gauges


class _Answer:
    def __init__(self, output: object) -> None:
        self.output = output


def test_gather_asks_the_queue_the_versions_and_the_backlog_on_the_policy_queue() -> None:
    asked: list[object] = []
    answers = {
        "get_queue": QUEUE,
        "list_application_versions": [{"version_name": "v1", "version_timestamp": 10},
                                      {"version_name": "v3", "version_timestamp": "30"},
                                      {"version_name": "v2", "version_timestamp": 20}],
        "get_workflow_aggregates": [{"group": {"application_version": "v3"}, "count": 4},
                                    {"group": {"application_version": "v2"}, "count": 1}],
    }

    def ask(request: object) -> _Answer:
        asked.append(request)
        return _Answer(answers[str(request.type.value)])  # type: ignore[attr-defined]

    policy = {"queue": "work", "rollout": {"maxOldApplicationVersions": 1}}
    entries = gather(policy, ask, lambda: at(0))
    assert [(e["applicationVersion"], e["isLatest"], e["queueDepth"], e["desiredExecutors"]) for e in entries] == [
        ("v3", True, 4, 2), ("v2", False, 1, 1)]
    assert {e["observedAt"] for e in entries} == {int(at(0).timestamp() * 1000)}
    backlog = asked[-1].body  # type: ignore[attr-defined]
    assert (backlog.group_by_application_version, backlog.select_count, backlog.status, backlog.queue_name) == (
        True, True, ["ENQUEUED", "PENDING"], ["work"])
    assert versions_newest_first([{"version_name": 3}, "junk", {"version_name": "a", "version_timestamp": "x"}]) == [
        "a"]


def test_the_gauges_show_what_was_published_and_nothing_once_withdrawn() -> None:
    recommendations = Recommendations()
    recommendations.publish("acme", "shop", "work", recommend({"queue": "work"}, ["v1"], {"v1": 5}, QUEUE, 1))
    samples = {(s.name, s.labels["version"], s.labels["queue"]): s.value
               for family in recommendations.collect() for s in family.samples}
    assert samples == {("relay_autoscale_desired_executors", "v1", "work"): 3,
                       ("relay_autoscale_queue_depth", "v1", "work"): 5}
    recommendations.withdraw("acme", "shop")
    assert [s for family in recommendations.collect() for s in family.samples] == []
    assert b"relay_autoscale_desired_executors" in generate_latest(metrics.REGISTRY)  # registered with Relay's own

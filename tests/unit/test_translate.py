"""web/shapes/wire_to_api.py, api_to_wire.py and values.py: wire records → v2 schemas, and v2 inputs →
protocol requests.

Records are made by the real SDK's own classes (dbos 3.2.0, ``dbos._conductor.protocol``) and sent through
JSON as the SDK sends them; every translation is checked against the schema of Conductor's reference
document. Requests are encoded by Relay and parsed back by the SDK's receive-loop parser.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import dbos._conductor.protocol as sdk
import pytest

from relay.web.problems import ApiError
from relay.web.shapes import api_to_wire, wire_to_api
from relay.web.shapes.values import parse_time, time_from_wire
from relay.wire.codec import decode_response
from relay.wire.requests import encode_request
from tests.support.openapi_ref import check, reference

CREATED_MS = 1712345678901  # 2024-04-05T19:34:38.901Z
CREATED = "2024-04-05T19:34:38.901Z"


def wire(obj: Any) -> dict[str, Any]:
    """An SDK output dataclass as it arrives: through JSON."""
    return json.loads(json.dumps(dataclasses.asdict(obj)))


def conforms(schema_name: str, value: Any) -> None:
    errors = check(reference(), {"$ref": f"#/components/schemas/{schema_name}"}, value)
    assert not errors, errors


def refused(call: Any, *args: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args)
    assert caught.value.status == 422, caught.value.detail
    return caught.value


def location(call: Any, *args: Any) -> str:
    return refused(call, *args).errors[0]["location"]


def sdk_parse(request: Any, cls: type) -> Any:
    """What the Python SDK's receive loop makes of the frame Relay sends."""
    return cls.from_json(encode_request(request))


# ------------------------------------------------------------------------------------------- times


@pytest.mark.parametrize(("value", "expected"), [
    (CREATED_MS, CREATED),
    (str(CREATED_MS), CREATED),
    (float(CREATED_MS), CREATED),
    ("2024-04-05T19:34:38.901+00:00", CREATED),
    ("2024-04-05T21:34:38.901+02:00", CREATED),
    ("2024-04-05T19:34:38.901", CREATED),  # naive ISO: the SDKs mean UTC
    ("2024-01-02T00:00:00Z", "2024-01-02T00:00:00.000Z"),
    (0, "1970-01-01T00:00:00.000Z"),
    (None, None),
    (True, None),
    ("soon", None),
    (10**20, None),
])
def test_time_from_wire(value: Any, expected: str | None) -> None:
    assert time_from_wire(value) == expected


def test_parse_time_requires_rfc3339_with_an_offset() -> None:
    assert parse_time("q", "2024-01-01T00:00:00Z") == datetime(2024, 1, 1, tzinfo=UTC)
    assert parse_time("q", "2024-01-01T02:00:00+02:00") == datetime(2024, 1, 1, tzinfo=UTC)
    for bad in ("2024-01-01T00:00:00", "2024-01-01", "yesterday", "2024-13-01T00:00:00Z", 1704067200, None):
        error = refused(parse_time, "query.startTime", bad)
        assert error.errors[0]["location"] == "query.startTime"


# ----------------------------------------------------------------------------------- out: records


def sdk_workflow(**overrides: Any) -> dict[str, Any]:
    fields = {f.name: None for f in dataclasses.fields(sdk.WorkflowsOutput)}
    fields.update(
        WorkflowUUID="wf-1", Status="SUCCESS", WorkflowName="greet", Input="{'args': ('x',)}", Output="'X'",
        CreatedAt=str(CREATED_MS), UpdatedAt=str(CREATED_MS + 99), QueueName="q", ApplicationVersion="v1",
        ExecutorID="ex-1", WorkflowTimeoutMS="5000", WorkflowDeadlineEpochMS=str(CREATED_MS + 5000),
        Priority="3", WasForkedFrom=True, DequeuedAt=str(CREATED_MS + 10), CompletedAt=str(CREATED_MS + 99),
        Attributes='{"team": "a"}', ScheduleName="nightly", ApplicationName="app", DelayUntilEpochMS=None,
    )
    fields.update(overrides)
    return wire(sdk.WorkflowsOutput(**fields))


def test_workflow() -> None:
    out = wire_to_api.workflow(sdk_workflow())
    conforms("Workflow", out)
    assert out["workflowId"] == "wf-1" and out["status"] == "SUCCESS" and out["workflowName"] == "greet"
    assert (out["createdAt"], out["updatedAt"]) == (CREATED, "2024-04-05T19:34:39.000Z")
    assert (out["timeoutMs"], out["priority"], out["wasForkedFrom"]) == (5000, 3, True)
    assert out["deadline"] == "2024-04-05T19:34:43.901Z"
    assert (out["dequeuedAt"], out["completedAt"], out["delayUntil"]) == (
        "2024-04-05T19:34:38.911Z", "2024-04-05T19:34:39.000Z", None)
    assert (out["appVersion"], out["executorId"], out["queueName"]) == ("v1", "ex-1", "q")
    assert (out["input"], out["output"], out["attributes"]) == ("{'args': ('x',)}", "'X'", '{"team": "a"}')
    assert (out["scheduleName"], out["applicationName"]) == ("nightly", "app")


def test_workflow_from_an_older_sdk_with_fields_missing() -> None:
    old = {"WorkflowUUID": "wf-2", "Status": "PENDING", "CreatedAt": CREATED_MS, "UpdatedAt": None}
    out = wire_to_api.workflow(old)
    conforms("Workflow", out)
    assert (out["createdAt"], out["updatedAt"], out["priority"], out["wasForkedFrom"]) == (CREATED, CREATED, 0,
                                                                                          False)
    assert out["applicationName"] is None and out["timeoutMs"] is None


def test_step() -> None:
    record = wire(sdk.WorkflowSteps(function_id=2, function_name="shout", output="'HI'", error=None,
                                    child_workflow_id=None, started_at_epoch_ms=str(CREATED_MS),
                                    completed_at_epoch_ms=str(CREATED_MS + 1)))
    out = wire_to_api.step(record)
    conforms("Step", out)
    assert out == {"stepId": 2, "stepName": "shout", "output": "'HI'", "error": None, "childWorkflowId": None,
                   "startedAt": CREATED, "completedAt": "2024-04-05T19:34:38.902Z"}
    pending = wire_to_api.step({"function_id": 1, "function_name": "s", "started_at_epoch_ms": None})
    conforms("Step", pending)
    assert pending["startedAt"] is None and pending["completedAt"] is None


def test_queue() -> None:
    record = wire(sdk.QueueOutput(name="q", concurrency=4, worker_concurrency=2, rate_limit_max=10,
                                  rate_limit_period_sec=1.5, priority_enabled=True, partition_queue=False,
                                  polling_interval_sec=1.0, application_name="app", partition_concurrency=3))
    out = wire_to_api.queue(record)
    conforms("Queue", out)
    assert out == {"name": "q", "concurrency": 4, "workerConcurrency": 2, "rateLimitMax": 10,
                   "rateLimitPeriodSecs": 1.5, "priorityEnabled": True, "partitionQueue": False,
                   "pollingIntervalSecs": 1.0, "applicationName": "app"}


def test_schedule() -> None:
    record = wire(sdk.ScheduleOutput(schedule_id="s-1", schedule_name="nightly", workflow_name="job",
                                     workflow_class_name=None, schedule="0 0 0 * * *", status="PAUSED",
                                     context="ctx", last_fired_at="2024-01-02T00:00:00+00:00",
                                     automatic_backfill=True, cron_timezone="Europe/Paris", queue_name="q",
                                     application_name="app"))
    out = wire_to_api.schedule(record)
    conforms("Schedule", out)
    assert out == {"scheduleId": "s-1", "scheduleName": "nightly", "workflowName": "job", "workflowClass": None,
                   "cronExpression": "0 0 0 * * *", "status": "PAUSED", "context": "ctx",
                   "lastFiredAt": "2024-01-02T00:00:00.000Z", "automaticBackfill": True,
                   "cronTimezone": "Europe/Paris", "applicationName": "app"}


def test_application_versions_latest_first() -> None:
    records = [wire(sdk.ApplicationVersionOutput(version_id=f"id-{n}", version_name=n, version_timestamp=ts,
                                                 created_at=CREATED_MS))
               for n, ts in (("v1", CREATED_MS + 5), ("v2", CREATED_MS + 9), ("v0", CREATED_MS))]
    out = wire_to_api.application_versions(records)
    for version in out:
        conforms("ApplicationVersion", version)
    assert [v["versionName"] for v in out] == ["v2", "v1", "v0"]
    assert out[0] == {"versionId": "id-v2", "versionName": "v2", "versionTimestamp": "2024-04-05T19:34:38.910Z",
                      "createdAt": CREATED}


def test_workflow_and_step_aggregates() -> None:
    row = wire(sdk.WorkflowAggregateOutput(
        group={"status": "SUCCESS", "name": "greet", "application_version": "v1", "queue_name": None,
               "executor_id": "e", "application_name": "app", "time_bucket": CREATED_MS},
        count=7, min_created_at=CREATED_MS, max_queue_wait_ms=None, max_total_latency_ms=42))
    out = wire_to_api.workflow_aggregate(row)
    conforms("WorkflowAggregate", out)
    assert out == {"group": {"status": "SUCCESS", "workflowName": "greet", "appVersion": "v1", "queueName": None,
                             "executorId": "e", "applicationName": "app", "timeBucket": CREATED},
                   "count": 7, "minCreatedAt": CREATED, "maxTotalLatencyMs": 42}
    step_row = wire(sdk.StepAggregateOutput(group={"function_name": "shout", "status": "ERROR"}, count=3,
                                            max_duration_ms=12))
    out = wire_to_api.step_aggregate(step_row)
    conforms("StepAggregate", out)
    assert out == {"group": {"stepName": "shout", "status": "ERROR"}, "count": 3, "maxDurationMs": 12}


def test_events_notifications_streams() -> None:
    event = wire_to_api.event(wire(sdk.EventOutput(key="progress", value="42")))
    conforms("Event", event)
    assert event == {"key": "progress", "value": "42"}
    note = wire_to_api.notification(wire(sdk.NotificationOutput(topic=None, message="hi",
                                                              created_at_epoch_ms=CREATED_MS, consumed=False)))
    conforms("Notification", note)
    assert note == {"topic": None, "message": "hi", "createdAt": CREATED, "consumed": False}
    stream = wire_to_api.stream_entry(wire(sdk.StreamEntryOutput(key="chunks", values=["a", "b"])))
    conforms("StreamEntry", stream)
    assert stream == {"key": "chunks", "values": ["a", "b"]}


def test_metric() -> None:
    start, end = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, 1, tzinfo=UTC)
    out = wire_to_api.metric(wire(sdk.MetricData(metric_type="workflow_count", metric_name="greet", value=5)),
                           "app-id", (start, end))
    conforms("Metric", out)
    assert out == {"appId": "app-id", "metricType": "workflow_count", "metricName": "greet", "granularity": 3600,
                   "timeBucket": "2024-01-01T00:00:00.000Z", "value": 5}


# ------------------------------------------------------------------------------ in: GET workflows


def test_list_workflows_query() -> None:
    request = api_to_wire.list_workflows_request({
        "status": "ERROR", "workflowName": "greet", "limit": "50", "offset": "10", "sortDesc": "true",
        "loadInput": "1", "loadOutput": "false", "unknownParam": "ignored",
    })
    parsed = sdk_parse(request, sdk.ListWorkflowsRequest)
    body = parsed.body
    assert (body["status"], body["workflow_name"], body["limit"], body["offset"]) == ("ERROR", "greet", 50, 10)
    assert (body["sort_desc"], body["load_input"], body["load_output"]) == (True, True, False)
    default = sdk_parse(api_to_wire.list_workflows_request({}), sdk.ListWorkflowsRequest).body
    assert (default["load_input"], default["load_output"], default["limit"]) == (False, False, 100)


def test_every_workflow_list_has_a_default_and_a_maximum_page() -> None:
    """Issue 34: no limit asks for a page of DEFAULT_LIMIT (not every workflow); above MAX_LIMIT, MAX_LIMIT."""
    assert api_to_wire.list_workflows_request({}).body.limit == 100
    assert api_to_wire.list_workflows_request({"limit": "10001"}).body.limit == 10_000
    assert api_to_wire.list_workflows_request({"limit": str(2**62)}).body.limit == 10_000
    assert api_to_wire.search_workflows_request({}).body.limit == 100
    assert api_to_wire.search_workflows_request({"limit": 50_000, "queuesOnly": True}).body.limit == 10_000
    assert api_to_wire.list_steps_request("wf", {}).limit == 100
    assert api_to_wire.list_steps_request("wf", {"limit": "99999"}).limit == 10_000


@pytest.mark.parametrize(("args", "where"), [
    ({"limit": "0"}, "query.limit"),
    ({"limit": str(2**63)}, "query.limit"),
    ({"limit": "ten"}, "query.limit"),
    ({"limit": "1.5"}, "query.limit"),
    ({"offset": "-1"}, "query.offset"),
    ({"status": "FINISHED"}, "query.status"),
    ({"status": "success"}, "query.status"),
    ({"sortDesc": "maybe"}, "query.sortDesc"),
    ({"loadInput": "yes please"}, "query.loadInput"),
])
def test_list_workflows_bad_query(args: dict[str, str], where: str) -> None:
    assert location(api_to_wire.list_workflows_request, args) == where


# --------------------------------------------------------------------------------- in: JSON bodies


def test_search_body() -> None:
    request = api_to_wire.search_workflows_request({
        "$schema": "ignored", "workflowIds": ["a", "b"], "workflowName": ["greet"], "status": ["SUCCESS", "ERROR"],
        "user": ["u"], "appVersion": ["v1", "v2"], "executorId": ["e"], "queueName": ["q"],
        "workflowIdPrefix": ["r-"], "forkedFrom": ["f"], "parentWorkflowId": ["p"], "scheduleName": ["s"],
        "startTime": "2024-01-01T00:00:00Z", "endTime": "2024-01-02T02:00:00+02:00",
        "completedAfter": "2024-01-01T00:00:00Z", "dequeuedBefore": "2024-01-03T00:00:00Z",
        "wasForkedFrom": False, "hasParent": True, "attributes": {"team": "a"}, "limit": 5, "offset": 0,
        "sortDesc": True, "loadInput": True, "loadOutput": True, "queuesOnly": True,
        "completedBefore": "2024-01-04T00:00:00Z", "dequeuedAfter": "2024-01-01T00:00:00Z",
    })
    body = sdk_parse(request, sdk.ListWorkflowsRequest).body
    assert body["workflow_uuids"] == ["a", "b"]
    assert body["workflow_name"] == "greet"  # one value: a string, understood by every SDK release
    assert body["status"] == ["SUCCESS", "ERROR"] and body["application_version"] == ["v1", "v2"]
    assert body["authenticated_user"] == "u" and body["parent_workflow_id"] == "p"
    assert body["start_time"] == "2024-01-01T00:00:00+00:00" and body["end_time"] == "2024-01-02T00:00:00+00:00"
    assert datetime.fromisoformat(body["dequeued_before"]) == datetime(2024, 1, 3, tzinfo=UTC)
    assert (body["was_forked_from"], body["has_parent"], body["attributes"]) == (False, True, {"team": "a"})
    assert (body["limit"], body["offset"], body["sort_desc"], body["queues_only"]) == (5, 0, True, True)


def test_empty_filters_mean_no_filter() -> None:
    body = sdk_parse(api_to_wire.search_workflows_request({"status": [], "workflowName": None}),
                     sdk.ListWorkflowsRequest).body
    assert body["status"] is None and body["workflow_name"] is None


@pytest.mark.parametrize(("body", "where"), [
    ({"status": "SUCCESS"}, "body.status"),
    ({"status": ["SUCCESS", "DONE"]}, "body.status[1]"),
    ({"workflowIds": ["a", ""]}, "body.workflowIds[1]"),
    ({"workflowName": [3]}, "body.workflowName[0]"),
    ({"startTime": "2024-01-01"}, "body.startTime"),
    ({"endTime": 1704067200000}, "body.endTime"),
    ({"limit": 0}, "body.limit"),
    ({"limit": True}, "body.limit"),
    ({"limit": 10.0}, "body.limit"),
    ({"offset": -3}, "body.offset"),
    ({"sortDesc": "true"}, "body.sortDesc"),
    ({"loadInput": None}, "body.loadInput"),
    ({"attributes": ["a"]}, "body.attributes"),
    ({"applicationName": ["x"]}, "body.applicationName"),
    ({"nope": 1}, "body.nope"),
])
def test_search_bad_body(body: dict[str, Any], where: str) -> None:
    assert location(api_to_wire.search_workflows_request, body) == where


def test_workflow_aggregates_body() -> None:
    request = api_to_wire.workflow_aggregates_request({
        "groupByStatus": True, "groupByWorkflowName": True, "groupByAppVersion": True, "groupByQueueName": False,
        "selectCount": True, "selectMaxTotalLatencyMs": True, "timeBucketSizeMs": 60000,
        "workflowName": ["greet"], "appVersion": ["v1"], "user": ["u"], "workflowIds": ["a"],
        "status": ["PENDING"], "startTime": "2024-01-01T00:00:00Z",
    })
    body = sdk_parse(request, sdk.GetWorkflowAggregatesRequest).body
    assert (body["group_by_status"], body["group_by_name"], body["group_by_application_version"]) == (
        True, True, True)
    assert (body["name"], body["app_version"], body["user"], body["workflow_ids"]) == (
        ["greet"], ["v1"], ["u"], ["a"])  # lists only, on this wire
    assert (body["select_count"], body["select_max_total_latency_ms"], body["time_bucket_size_ms"]) == (
        True, True, 60000)
    assert body["status"] == ["PENDING"] and body["start_time"] == "2024-01-01T00:00:00+00:00"
    only_buckets = api_to_wire.workflow_aggregates_request({"timeBucketSizeMs": 1000})
    assert only_buckets.body.time_bucket_size_ms == 1000
    assert location(api_to_wire.workflow_aggregates_request, {"selectCount": True}) == "body"
    assert location(api_to_wire.workflow_aggregates_request, {"groupByStatus": True, "timeBucketSizeMs": 0}) == (
        "body.timeBucketSizeMs")
    assert location(api_to_wire.workflow_aggregates_request, {"groupByStatus": True, "limit": 3}) == "body.limit"


def test_step_aggregates_body() -> None:
    request = api_to_wire.step_aggregates_request({
        "groupByFunctionName": True, "selectMaxDurationMs": True, "stepName": ["shout"], "status": ["WHATEVER"],
        "workflowIdPrefix": ["r-"], "completedAfter": "2024-01-01T00:00:00Z",
    })
    body = sdk_parse(request, sdk.GetStepAggregatesRequest).body
    assert (body["group_by_function_name"], body["function_name"], body["status"]) == (
        True, ["shout"], ["WHATEVER"])  # step statuses are not an enum
    assert body["workflow_id_prefix"] == ["r-"] and body["select_max_duration_ms"] is True
    assert location(api_to_wire.step_aggregates_request, {}) == "body"
    assert location(api_to_wire.step_aggregates_request, {"groupByStatus": "yes"}) == "body.groupByStatus"


def test_fork_body() -> None:
    parsed = sdk_parse(api_to_wire.fork_request("wf-1", {}), sdk.ForkWorkflowRequest).body
    assert parsed == {"workflow_id": "wf-1", "start_step": 0, "new_workflow_id": None, "application_version": None}
    parsed = sdk_parse(api_to_wire.fork_request("wf-1", {
        "startStep": 3, "newWorkflowId": "wf-2", "appVersion": "v2", "queueName": "q", "queuePartitionKey": "k",
    }), sdk.ForkWorkflowRequest).body
    assert parsed == {"workflow_id": "wf-1", "start_step": 3, "new_workflow_id": "wf-2", "application_version": "v2",
                      "queue_name": "q", "queue_partition_key": "k"}
    assert location(api_to_wire.fork_request, "wf-1", {"startStep": -1}) == "body.startStep"
    assert location(api_to_wire.fork_request, "wf-1", {"startStep": "2"}) == "body.startStep"
    assert location(api_to_wire.fork_request, "wf-1", {"newWorkflowId": ""}) == "body.newWorkflowId"


def test_one_workflow_actions() -> None:
    cancel = sdk_parse(api_to_wire.cancel_request("wf-1", {"cancelChildren": True}), sdk.CancelRequest)
    assert (cancel.workflow_id, cancel.cancel_children, cancel.workflow_ids) == ("wf-1", True, None)
    resume = sdk_parse(api_to_wire.resume_request("wf-1", {"queueName": "q"}), sdk.ResumeRequest)
    assert (resume.workflow_id, resume.queue_name) == ("wf-1", "q")
    delete = sdk_parse(api_to_wire.delete_request("wf-1", {"deleteChildren": "true"}), sdk.DeleteRequest)
    assert (delete.workflow_id, delete.delete_children) == ("wf-1", True)
    assert sdk_parse(api_to_wire.delete_request("wf-1", {}), sdk.DeleteRequest).delete_children is False
    export = sdk_parse(api_to_wire.export_request("wf-1", {"exportChildren": "1"}), sdk.ExportWorkflowRequest)
    assert (export.workflow_id, export.export_children) == ("wf-1", True)
    steps = sdk_parse(api_to_wire.list_steps_request("wf-1", {"limit": "5", "offset": "2"}), sdk.ListStepsRequest)
    assert (steps.workflow_id, steps.limit, steps.offset, steps.load_output) == ("wf-1", 5, 2, True)
    assert location(api_to_wire.cancel_request, "wf-1", {"cancelChildren": "no"}) == "body.cancelChildren"
    assert location(api_to_wire.resume_request, "wf-1", {"queue": "q"}) == "body.queue"
    assert location(api_to_wire.delete_request, "wf-1", {"deleteChildren": "maybe"}) == "query.deleteChildren"
    assert location(api_to_wire.list_steps_request, "wf-1", {"limit": "0"}) == "query.limit"
    export = "H4sIAAAAAAAC/wMAAAAAAAAAAAA="  # base64 of an empty gzip member, as every SDK exports
    imported = sdk_parse(api_to_wire.import_request({"serializedWorkflow": export}), sdk.ImportWorkflowRequest)
    assert imported.serialized_workflow == export
    # Not base64, or not gzip under it: refused before any frame.
    assert location(api_to_wire.import_request, {"serializedWorkflow": "abc="}) == "body.serializedWorkflow"
    assert location(api_to_wire.import_request, {"serializedWorkflow": "not an export"}) == "body.serializedWorkflow"
    assert location(api_to_wire.import_request, {}) == "body.serializedWorkflow"
    assert location(api_to_wire.import_request, {"serializedWorkflow": 5}) == "body.serializedWorkflow"


def test_bulk_actions() -> None:
    cancel = sdk_parse(api_to_wire.bulk_cancel_request({"workflowIds": ["a", "b"], "cancelChildren": True}),
                       sdk.CancelRequest)
    assert (cancel.workflow_id, cancel.workflow_ids, cancel.cancel_children) == ("a", ["a", "b"], True)
    resume = sdk_parse(api_to_wire.bulk_resume_request({"workflowIds": ["a"], "queueName": "q"}), sdk.ResumeRequest)
    assert (resume.workflow_id, resume.workflow_ids, resume.queue_name) == ("a", None, "q")  # one: workflow_id
    delete = sdk_parse(api_to_wire.bulk_delete_request({"workflowIds": ["a", "b", "c"]}), sdk.DeleteRequest)
    assert (delete.workflow_ids, delete.delete_children) == (["a", "b", "c"], False)
    for build in (api_to_wire.bulk_cancel_request, api_to_wire.bulk_resume_request, api_to_wire.bulk_delete_request):
        assert location(build, {}) == "body.workflowIds"
        assert location(build, {"workflowIds": []}) == "body.workflowIds"
        assert location(build, {"workflowIds": "a"}) == "body.workflowIds"
        assert location(build, {"workflowIds": ["a", 2]}) == "body.workflowIds[1]"
    assert location(api_to_wire.bulk_cancel_request, {"workflowIds": ["a"], "x": 1}) == "body.x"


def test_bulk_fork_from_failure_needs_exactly_one_mode() -> None:
    parsed = sdk_parse(api_to_wire.bulk_fork_from_failure_request({
        "workflowIds": ["a", "b"], "fromLastFailure": True, "appVersion": "v1", "queueName": "q",
    }), sdk.ForkFromFailureRequest).body
    assert parsed["workflow_ids"] == ["a", "b"] and parsed["from_last_failure"] is True
    assert (parsed["application_version"], parsed["queue_name"]) == ("v1", "q")
    by_step = api_to_wire.bulk_fork_from_failure_request({"workflowIds": ["a"], "fromStep": 0})
    assert by_step.body.from_step == 0
    by_name = api_to_wire.bulk_fork_from_failure_request({"workflowIds": ["a"], "fromStepName": "shout"})
    assert by_name.body.from_step_name == "shout"
    for body in ({"workflowIds": ["a"]}, {"workflowIds": ["a"], "fromLastFailure": False},
                 {"workflowIds": ["a"], "fromLastStep": True, "fromStep": 2}):
        assert location(api_to_wire.bulk_fork_from_failure_request, body) == "body"
    assert location(api_to_wire.bulk_fork_from_failure_request, {"fromLastStep": True}) == "body.workflowIds"


def test_schedules_backfill_versions_metrics() -> None:
    schedules = sdk_parse(api_to_wire.list_schedules_request({"status": "ANYTHING", "workflowName": "w",
                                                            "scheduleNamePrefix": "n", "loadContext": "false"}),
                          sdk.ListSchedulesRequest).body
    assert schedules == {"status": "ANYTHING", "workflow_name": "w", "schedule_name_prefix": "n",
                         "load_context": False}
    assert location(api_to_wire.list_schedules_request, {"loadContext": "x"}) == "query.loadContext"

    backfill = sdk_parse(api_to_wire.backfill_request("nightly", {
        "startTime": "2024-01-01T00:00:00Z", "endTime": "2024-01-05T14:00:00+02:00"}), sdk.BackfillScheduleRequest)
    assert backfill.schedule_name == "nightly"
    # The SDK parses them with datetime.fromisoformat.
    assert datetime.fromisoformat(backfill.start) == datetime(2024, 1, 1, tzinfo=UTC)
    assert datetime.fromisoformat(backfill.end) == datetime(2024, 1, 5, 12, tzinfo=UTC)
    assert location(api_to_wire.backfill_request, "n", {"startTime": "2024-01-01T00:00:00Z"}) == "body.endTime"
    assert location(api_to_wire.backfill_request, "n", {"startTime": "2024-01-02T00:00:00Z",
                                                      "endTime": "2024-01-01T00:00:00Z"}) == "body.endTime"
    assert location(api_to_wire.backfill_request, "n", {"startTime": "Monday",
                                                      "endTime": "2024-01-01T00:00:00Z"}) == "body.startTime"

    assert api_to_wire.latest_version_name({"versionName": "v2"}) == "v2"
    assert location(api_to_wire.latest_version_name, {}) == "body.versionName"
    assert location(api_to_wire.latest_version_name, {"versionName": ""}) == "body.versionName"

    window = api_to_wire.metrics_window({"startTime": "2024-01-01T00:00:00Z", "endTime": "2024-01-01T01:00:00Z"})
    metrics = sdk_parse(api_to_wire.metrics_request(window), sdk.GetMetricsRequest)
    assert metrics.metric_class == "workflow_step_count"
    assert datetime.fromisoformat(metrics.end_time) == datetime(2024, 1, 1, 1, tzinfo=UTC)
    assert location(api_to_wire.metrics_window, {"startTime": "2024-01-01T00:00:00Z"}) == "query.endTime"
    assert location(api_to_wire.metrics_window, {"endTime": "2024-01-01T00:00:00Z"}) == "query.startTime"
    assert location(api_to_wire.metrics_window, {"startTime": "2024-01-01T00:00:00Z",
                                               "endTime": "2024-01-01T00:00:00Z"}) == "query.endTime"


def test_raw_requests_and_responses() -> None:
    request = api_to_wire.raw_request({"type": "rewind_workflow", "body": {"workflow_id": "a", "start_step": 2}})
    frame = json.loads(encode_request(request))
    assert frame == {"type": "rewind_workflow", "request_id": request.request_id,
                     "body": {"workflow_id": "a", "start_step": 2}}
    assert location(api_to_wire.raw_request, {}) == "body.type"
    assert location(api_to_wire.raw_request, {"type": ""}) == "body.type"
    assert location(api_to_wire.raw_request, {"type": "x", "request_id": "mine"}) == "body.request_id"

    typed = decode_response(json.dumps({"type": "get_workflow", "request_id": "r", "output": {"A": 1},
                                                 "extra": "dropped"}))
    assert api_to_wire.raw_response(typed) == {"type": "get_workflow", "request_id": "r", "error_message": None,
                                             "output": {"A": 1}}
    raw = decode_response(json.dumps({"type": "new_thing", "request_id": "r", "answer": [1, 2]}))
    assert api_to_wire.raw_response(raw) == {"type": "new_thing", "request_id": "r", "error_message": None,
                                           "answer": [1, 2]}


def test_record_shapes_are_declared_once_for_translation_and_the_document() -> None:
    from relay.web.api.openapi_schemas import COMPONENTS
    from relay.web.shapes import wire_to_api

    for name, shape in {"Workflow": wire_to_api.WORKFLOW, "Step": wire_to_api.STEP, "Queue": wire_to_api.QUEUE,
                        "Schedule": wire_to_api.SCHEDULE, "Event": wire_to_api.EVENT,
                        "Notification": wire_to_api.NOTIFICATION, "StreamEntry": wire_to_api.STREAM_ENTRY,
                        "ApplicationVersion": wire_to_api.APPLICATION_VERSION}.items():
        assert COMPONENTS[name] == shape.schema(), name
        assert list(shape.read({})) == list(COMPONENTS[name]["properties"]) == COMPONENTS[name]["required"]


def test_epoch_milliseconds_read_fast_as_the_general_path_reads_them() -> None:
    """time_from_wire formats plain epoch milliseconds (ints, digit strings) without datetime: the same text."""
    import random

    from relay.web.shapes import values as api_values

    def general(ms: int) -> str:
        return api_values.format_time(datetime.fromtimestamp(float(ms) / 1000, UTC))

    picks = random.Random(16)
    limit = api_values._FAST_MS_LIMIT
    for ms in [0, 1, 999, 1000, 1_700_000_000_123, limit - 1, limit, 10**13,
               *(picks.randrange(limit) for _ in range(20_000))]:
        assert api_values.time_from_wire(ms) == api_values.time_from_wire(str(ms)) == general(ms)
        assert api_values.time_from_wire(f" {ms} ") == general(ms)

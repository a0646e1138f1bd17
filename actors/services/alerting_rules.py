"""Creating and deleting an application's alerting rules: the one way the HTTP API (web/api/alerting.py) and the
console's Alerts tab (web/console/alerts.py) change them. The rule's metadata is checked by the domain
(events/alerting.py `check_rule_metadata`, run again by `AlertingRule.create`); the body's other fields here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from relay.actors.errors import InvalidFieldError, NotAllowedError
from relay.actors.services.commands import run_command
from relay.events.alerting import RULE_TYPES, check_renotify_interval, check_rule_metadata
from relay.events.errors import InvalidValueError, NotFoundError
from relay.events.names import APP_NAME
from relay.projections.identity import Principal

if TYPE_CHECKING:
    from relay.actors.runtime import Runtime

WRITE = "application.write"
MAX_INTERVAL_SECS = 2**31


class AlertingRules:
    """An application's alerting rules, changed through its actor."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def check_body(self, org: str, body: dict[str, Any]) -> dict[str, Any]:
        """A ``CreateAlertInputBody``, checked (InvalidFieldError naming the field otherwise)."""
        for name in ("ruleType", "ruleMetadata"):
            if name not in body:
                raise InvalidFieldError(f"body.{name}", "is required", None)
        if body["ruleType"] not in RULE_TYPES:
            raise InvalidFieldError("body.ruleType", f"must be one of {', '.join(RULE_TYPES)}", body["ruleType"])
        if not isinstance(body["ruleMetadata"], dict):
            raise InvalidFieldError("body.ruleMetadata", "must be an object", body["ruleMetadata"])
        try:  # the domain's own check (AlertingRule.create runs it again), here to name the field
            check_rule_metadata(body["ruleType"], body["ruleMetadata"])
        except InvalidValueError as error:
            raise InvalidFieldError("body.ruleMetadata", str(error), body["ruleMetadata"]) from None
        interval = body.get("minIntervalSecs")
        if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)
                                     or not 0 <= interval < MAX_INTERVAL_SECS):
            raise InvalidFieldError("body.minIntervalSecs", "must be an integer between 0 and 2147483647", interval)
        renotify = body.get("renotifyIntervalSecs")  # Relay's extension (issue 32): repeats of an open incident
        if renotify is not None:
            try:
                check_renotify_interval(renotify)
            except InvalidValueError as error:
                raise InvalidFieldError("body.renotifyIntervalSecs", str(error), renotify) from None
        receiver = body.get("receivingAppName")
        if receiver is not None and (not isinstance(receiver, str) or not APP_NAME.fullmatch(receiver)
                                     or self.rt.views.applications.app(org, receiver) is None):
            raise InvalidFieldError("body.receivingAppName", f"no such application in organization '{org}'",
                                    receiver)
        return body

    def create(self, org: str, app: str, body: dict[str, Any], who: Principal) -> dict[str, Any]:
        """Create the rule of a checked body (`check_body`); its view row. Its alerts go to the receiving
        application's executors, so the caller must be able to write to that application too (issue 34: an
        alpha key cannot send alert frames to bravo's executors)."""
        receiver = body.get("receivingAppName")
        if receiver is not None and not who.allows(WRITE, org, receiver):
            raise NotAllowedError(f"this token lacks '{WRITE}' for the receiving application")
        actor = self.rt.directory.application_proxy(org, app)
        rule = run_command(self.rt, lambda: actor.create_alerting_rule(
            body["ruleType"], body["ruleMetadata"], receiver, body.get("minIntervalSecs"), who.display,
            renotify_interval_secs=body.get("renotifyIntervalSecs"),
        ))
        row: dict[str, Any] | None = self.rt.views.alerting.rule(org, app, rule.rule_id)
        if row is None:
            raise NotFoundError(f"alerting rule '{rule.rule_id}' is not visible yet; list the rules again")
        return row

    def delete(self, org: str, app: str, rule_id: str, by: str) -> None:
        actor = self.rt.directory.application_proxy(org, app)
        run_command(self.rt, lambda: actor.delete_alerting_rule(rule_id, by))

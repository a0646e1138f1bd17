"""The incidents on the console's Alerts tab (issue 32), over a real (not served) Relay app and store: listed with
state and duration; acknowledged, silenced and unsilenced with a confirmation each; refused for a key that only
reads, and for a resolved incident. (Their audit entries need a started instance: tests/integration/test_incidents.py
checks the API's.)"""

from __future__ import annotations

from flask.testing import FlaskClient

from relay.actors.incidents import open_incident
from relay.actors.runtime import Runtime
from relay.events.refs import incident_ref
from tests.unit.store_cases import at
from tests.unit.test_console_alerts import OTHER_KEY, _csrf, login, served

__all__ = ["served"]  # the fixture, shared with the alerts page's tests

PAGE = "/orgs/acme/apps/shop/alerts"


def _incidents(client: FlaskClient) -> str:
    html = client.get(PAGE).get_data(as_text=True)
    return html.split('data-testid="incidents"', 1)[1].split("</table>", 1)[0]


def test_incidents_are_listed_acknowledged_silenced_and_unsilenced(served: tuple[Runtime, FlaskClient]) -> None:
    rt, client = served
    assert 'data-testid="no-incidents"' in client.get(PAGE).get_data(as_text=True)
    incident = open_incident(rt.log, "acme", "shop", "rule-fail", "1 workflow named 'checkout' failed",
                             {"failed_workflow_count": "1"}, "relay-a", at(100))
    rt.views.catch_up()
    rows = _incidents(client)
    assert f'data-incident="{incident.id}"' in rows and 'data-state="open"' in rows
    assert "1 workflow named &#39;checkout&#39; failed" in rows and "Acknowledge…" in rows and "Silence…" in rows

    base = f"/orgs/acme/apps/shop/incidents/{incident.id}"
    token = _csrf(client, PAGE)
    asked = client.post(f"{base}/acknowledge", data={"csrf_token": token}).get_data(as_text=True)
    assert "Acknowledge this incident?" in asked and "Leave it open" in asked
    done = client.post(f"{base}/acknowledge", data={"csrf_token": token, "confirmed": "yes"}, follow_redirects=True)
    assert "Incident acknowledged." in done.get_data(as_text=True)
    rt.views.catch_up()
    rows = _incidents(client)
    assert 'data-state="acknowledged"' in rows and "acknowledged by admin" in rows and "Acknowledge…" not in rows

    asked = client.post(f"{base}/silence", data={"csrf_token": token, "seconds": "3600"}).get_data(as_text=True)
    assert "Silence this incident for 1 hour?" in asked
    client.post(f"{base}/silence", data={"csrf_token": token, "seconds": "3600", "confirmed": "yes"})
    rt.views.catch_up()
    rows = _incidents(client)
    assert 'data-state="silenced"' in rows and "silenced until" in rows and "Unsilence…" in rows
    odd = client.post(f"{base}/silence", data={"csrf_token": token, "seconds": "17"}, follow_redirects=True)
    assert "choose how long" in odd.get_data(as_text=True)
    client.post(f"{base}/unsilence", data={"csrf_token": token, "confirmed": "yes"})
    rt.views.catch_up()
    assert 'data-state="acknowledged"' in _incidents(client)


    rt.log.change(incident_ref("acme", "shop", "rule-fail", 1), lambda i: i.resolve("relay-a", at(500)))
    rt.views.catch_up()
    rows = _incidents(client)
    assert 'data-state="resolved"' in rows and "Silence…" not in rows
    refused = client.post(f"{base}/acknowledge", data={"csrf_token": token, "confirmed": "yes"},
                          follow_redirects=True).get_data(as_text=True)
    assert "Incident not acknowledged" in refused and "resolved" in refused

    reader = client.application.test_client()
    login(reader, OTHER_KEY)  # application.read on another application only
    assert reader.post(f"{base}/acknowledge", data={"csrf_token": _csrf(reader, "/orgs/acme/apps/empty/alerts"),
                                                    "confirmed": "yes"}).status_code == 403

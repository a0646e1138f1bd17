"""actors/pykka_gevent.py QuietRefusals (issue 29, point 9b): an expected outcome an actor hands back to the
caller of an ask (a DomainError: the API's 404/409/422) is not logged with its traceback by pykka; any other
exception still is."""

from __future__ import annotations

import logging

import pykka
import pytest

from relay.actors import pykka_gevent
from relay.events.errors import NotFoundError


class Refuser(pykka.ThreadingActor):
    def refuse(self) -> None:
        raise NotFoundError("no active API key named 'nokey' in 'local'")

    def fail(self) -> None:
        raise RuntimeError("a bug")


def test_pykka_logs_no_traceback_for_a_refusal_returned_to_the_caller(caplog: pytest.LogCaptureFixture) -> None:
    pykka_gevent.install()
    caplog.set_level(logging.DEBUG, logger="pykka")
    ref = Refuser.start()
    try:
        with pytest.raises(NotFoundError):
            ref.proxy().refuse().get(timeout=5)
        with pytest.raises(RuntimeError):
            ref.proxy().fail().get(timeout=5)
    finally:
        ref.stop()
    returned = [r for r in caplog.records if r.name == "pykka" and r.getMessage().startswith("Exception returned")]
    assert [type(r.exc_info[1]) for r in returned if r.exc_info] == [RuntimeError]

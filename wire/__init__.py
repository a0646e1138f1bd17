"""The executor wire format: frames, their codec and what each SDK release supports. Pure: no I/O.

DBOS executors connect to Relay and answer the requests Relay sends them. The SDKs are the authority on
the format (PROTOCOL.md); these are the releases this package was written against and is tested with:
``dbos`` 3.2.0 (``dbos/_conductor/protocol.py``, ``conductor.py``) and ``@dbos-inc/dbos-sdk`` 5.2.11
(``dist/src/conductor/protocol.js``, ``conductor.js``); the Go (v1.6.0) and Java (1.1.0-m6) SDKs' answers are
pinned by the frames they really sent (tests/unit/sdk_frames/). Notes on how they parse what we send:

- The Python SDK builds a dataclass from every request; a request that lacks a field without a default
  (or a body key it indexes with ``body["..."]``) raises inside its receive loop, which drops the
  connection and reconnects. So every request here always carries the fields the SDKs require.
- The TypeScript SDK treats JSON ``null`` and an absent key differently for some filters
  (``was_forked_from``/``has_parent`` are compared with ``!== undefined``), so optional fields are left
  out when unset, except the few the Python SDK needs present (those are sent as ``null``, which both
  SDKs treat as "unset").
- The TypeScript and Go SDKs drop empty fields from their answers (``JSON.stringify``, ``omitempty``), so a
  response may lack optional fields, ``error_message`` included; the Python SDK sends them as ``null``, and
  Java sends ``null`` for every empty field of a record but leaves ``error_message`` out.

Workflow, step, schedule, queue... records inside responses are kept as the plain dicts the executor
sent, with its keys (``WorkflowUUID``, ``Status``, ...), never renamed.

Import each name from the module that defines it (there is no facade): messages.py (types, limits, request
ids), fields.py, requests.py, workflow_requests.py, catalog_requests.py, responses.py, codec.py (decoding
frames), support.py (SDK releases) and errors.py.
"""

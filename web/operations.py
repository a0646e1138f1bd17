"""What a view of the HTTP API declares about itself for the OpenAPI document (web/api/openapi.py builds the
document from it) and for the check of undeclared query parameters: `@operation(...)` below the route decorator.
Its own module, below the API's blueprints and the transport's /websocket route that both use it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from relay.web.shapes.json_schema import Schema
from relay.wire.json_types import JSONObject

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class Param:
    """A query parameter."""

    name: str
    schema: Schema
    required: bool = False
    description: str | None = None

    def doc(self) -> JSONObject:
        out: JSONObject = {"name": self.name, "in": "query", "explode": False, "schema": self.schema}
        if self.required:
            out["required"] = True
        if self.description:
            out["description"] = self.description
        return out


def query(name: str, kind: str, fmt: str | None = None, *, required: bool = False,
          description: str | None = None) -> Param:
    schema: Schema = {"type": kind}
    if fmt:
        schema["format"] = fmt
    return Param(name, schema, required, description)


@dataclass(frozen=True)
class Operation:
    """What the URL map cannot tell about an operation.

    ``returns``: a component name (``"Workflow"``), a list of them (``"Workflow[]"``), an inline schema, or
    None for a response without content. ``path_names`` overrides PATH_NAMES for this route.
    ``requires_oauth``: the operation exists only with OAuth on (web/wsgi.py registers its blueprint then).
    """

    operation_id: str
    summary: str
    tag: str
    status: int = 200
    returns: str | Schema | None = None
    query: Sequence[Param] = ()
    body: str | None = None
    body_required: bool = False
    path_names: Mapping[str, str] = field(default_factory=dict)
    public: bool = False
    description: str | None = None
    content_type: str = "application/json"
    # Served only with OAuth on (RELAY_OIDC_ISSUER): the reference's `x-dbos-requires-oauth: true`.
    requires_oauth: bool = False


_REGISTRY: dict[str, Operation] = {}


def _key(view: Callable[..., object]) -> str:
    return f"{view.__module__}.{view.__qualname__}"


def operation(operation_id: str, **details: Any) -> Callable[[F], F]:
    """Describe the decorated view (put it below the route decorator)."""

    def register(view: F) -> F:
        _REGISTRY[_key(view)] = Operation(operation_id, **details)
        return view

    return register


def operation_of(view: Callable[..., object]) -> Operation | None:
    """The `@operation` of a view (None for the console's pages)."""
    return _REGISTRY.get(_key(view))

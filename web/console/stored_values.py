"""Pickled values shown decoded, never loaded (issue 36; docs/adr/0045-pickles-shown-decoded-never-loaded.md).

The Python SDK stores workflow inputs, outputs and errors, and step outputs and errors, as the base64 text of a
pickle. The data plane loads plain data only (actors/adapters/dataplane/values.py) and leaves anything else, a
custom exception or an application's object, as that text. The console shows such a text decoded: `decode` reads
the pickle with an unpickler whose `find_class` imports nothing and returns no real callable. Every class or
function the pickle names is a `Stored` placeholder class recording its module and name; calling one records the
arguments, and the pickle's state and items land in the placeholder instance. Only a few stdlib value types,
already loaded (datetimes, decimals, UUIDs, ordered dicts, sets, complex numbers), are real. Before that,
pickletools reads the opcodes (actors/adapters/dataplane/pickle_shape.py `safe_shape`): tuples nested too deep
to hash safely, or lengths declared but absent, and the pickle is not decoded. Any error gives None, and the
caller shows the stored text.

Rendering (`Decoded.summary`, `Decoded.tree`, `to_html`) is bounded in nodes, depth and string length, and follows
a value into itself only once: a pickle's memo makes shared references (a "billion laughs" in a few bytes) and
cycles. Only `to_html` uses markupsafe; nothing here imports Flask or dbos."""

from __future__ import annotations

import base64
import binascii
import builtins
import io
import pickle
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from markupsafe import Markup, escape

from relay.actors.adapters.dataplane.pickle_shape import PLAIN_TYPES, python3_name, safe_shape

MAX_TEXT = 1 << 20  # a longer stored text is not decoded (1 MiB of base64)
MAX_NODES = 2_000  # nodes of a rendered tree
MAX_DEPTH = 12  # levels of a rendered tree
MAX_CHARS = 2_000  # characters of one rendered string
MAX_CLASSES = 1_000  # distinct classes and functions one pickle may name
SUMMARY_CHARS = 300  # about the length of a summary line
SUMMARY_DEPTH = 3
OPEN_NODES = 40  # a tree this small starts unfolded

_REAL_TYPES = tuple(t for t in PLAIN_TYPES.values() if t not in (set, frozenset, complex, OrderedDict))
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Warning", "Exit", "Interrupt", "Timeout", "Failure")
_EXCEPTION_MODULES = {"exceptions", "exception", "errors", "error", "_error", "_errors", "_exceptions", "exc"}


# -- the placeholders ------------------------------------------------------------------------------
class Stored:
    """An instance of a class a pickle names: what the pickle said about it, nothing of the class run.

    Its subclasses, one per (module, name) and decode, are made by `_placeholder`. `__new__` records the arguments
    of a call (REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ), `__setstate__` a BUILD's state, `append`/`extend`/`add` the
    items of APPENDS and ADDITEMS, `__setitem__` the entries of SETITEMS. No `__dict__`: the pickle's state never
    becomes an attribute."""

    __slots__ = ("args", "called", "entries", "items", "kwargs", "slots", "state")
    module: ClassVar[str] = "builtins"
    qualname: ClassVar[str] = "object"

    args: tuple[Any, ...]
    called: bool  # made by a call of the class (REDUCE), as an exception is; not by NEWOBJ, as most objects are
    kwargs: dict[str, Any]
    state: Any
    slots: dict[Any, Any] | None
    items: list[Any]
    entries: list[tuple[Any, Any]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Stored:
        self = object.__new__(cls)
        self.args, self.kwargs, self.state, self.slots, self.items, self.entries = args, kwargs, None, None, [], []
        self.called = False
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.called = True  # the arguments were recorded by __new__

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict) \
                and (state[0] is None or isinstance(state[0], dict)):
            self.state, self.slots = state  # (instance dict, slot values): a class with __slots__
        else:
            self.state = state

    def append(self, item: Any) -> None:
        self.items.append(item)

    def extend(self, items: Iterable[Any]) -> None:
        self.items.extend(items)

    def add(self, item: Any) -> None:
        self.items.append(item)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.entries.append((key, value))

    def __repr__(self) -> str:
        return f"<stored {self.module}.{self.qualname}>"

    @classmethod
    def type_name(cls) -> str:
        return f"{cls.module}.{cls.qualname}"


def _placeholder(module: str, qualname: str) -> type[Stored]:
    namespace = {"__slots__": (), "module": module, "qualname": qualname}
    made: type[Stored] = type("Stored", (Stored,), namespace)
    return made


def _is_placeholder(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, Stored)


def _reconstructor(cls: Any, base: Any, state: Any) -> Stored:
    """copyreg._reconstructor (protocols 0 and 1): an instance of `cls`, the base's value as its argument."""
    if not _is_placeholder(cls):
        raise pickle.UnpicklingError("copyreg._reconstructor of a class that is not the pickle's")
    return cls.__new__(cls) if state is None else cls.__new__(cls, state)


def _newobj(cls: Any, *args: Any) -> Any:
    """copyreg.__newobj__: ``cls.__new__(cls, *args)``, for the pickle's classes and the real value types."""
    if _is_placeholder(cls) or cls in _REAL_TYPES:
        return cls.__new__(cls, *args)
    raise pickle.UnpicklingError("copyreg.__newobj__ of an unknown class")


def _newobj_ex(cls: Any, args: Any, kwargs: Any) -> Any:
    if _is_placeholder(cls) and isinstance(args, tuple) and isinstance(kwargs, dict):
        return cls.__new__(cls, *args, **kwargs)
    raise pickle.UnpicklingError("copyreg.__newobj_ex__ of an unknown class")


def _codecs_encode(text: Any, encoding: Any = "utf-8", errors: Any = "strict") -> bytes:
    """_codecs.encode, as protocols 2 and 3 spell bytes (``encode(str, 'latin1')``); latin-1 only."""
    if isinstance(text, str) and encoding in ("latin1", "latin-1") and errors == "strict":
        return text.encode("latin-1")
    raise pickle.UnpicklingError("_codecs.encode other than latin-1")


_FUNCTIONS: dict[tuple[str, str], Any] = {
    ("copyreg", "_reconstructor"): _reconstructor, ("copyreg", "__newobj__"): _newobj,
    ("copyreg", "__newobj_ex__"): _newobj_ex,
    ("_codecs", "encode"): _codecs_encode,
}  # fmt: skip
_FUNCTION_NAMES = {id(fn): f"{module}.{name}" for (module, name), fn in _FUNCTIONS.items()}


class _Interpreter(pickle.Unpickler):
    """Reads a pickle without importing or calling anything it names (see `Stored`)."""

    def __init__(self, stream: io.BytesIO) -> None:
        super().__init__(stream)
        self._named: dict[tuple[str, str], Any] = {}

    def find_class(self, module: str, name: str, /) -> Any:
        module, name = python3_name(module, name)
        key = (module, name)
        found = self._named.get(key)
        if found is None:
            found = PLAIN_TYPES.get(key) or _FUNCTIONS.get(key)
            if found is None:
                if len(self._named) >= MAX_CLASSES:
                    raise pickle.UnpicklingError("the pickle names too many classes")
                found = _placeholder(str(module), str(name))
            self._named[key] = found
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent IDs are not loaded")


# -- recognizing and decoding ---------------------------------------------------------------------
def _pickle_bytes(text: object) -> bytes | None:
    if not isinstance(text, str) or not 8 <= len(text) <= MAX_TEXT or len(text) % 4 or not text.startswith("gA"):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) < 4 or raw[0] != 0x80 or not 2 <= raw[1] <= 5 or raw[-1:] != b".":
        return None
    return raw


def looks_pickled(text: object) -> bool:
    """Whether `text` is base64 of a pickle (protocol 2 to 5, ending with STOP) no longer than `MAX_TEXT`."""
    return _pickle_bytes(text) is not None


def decode(text: object, *, error: bool = False) -> Decoded | None:
    """The pickle in `text` as placeholders and plain data (nothing imported, nothing of its run); None when it
    is not one, or is corrupt, truncated or followed by other bytes. `error`: the text is an error field's."""
    raw = _pickle_bytes(text)
    if raw is None:
        return None
    stream = io.BytesIO(raw)
    try:
        if not safe_shape(raw):
            return None
        value = _Interpreter(stream).load()
    except Exception:  # whatever the pickle's fault, the stored text is shown instead)
        return None
    if stream.tell() != len(raw):
        return None
    return Decoded(value, error=error)


def _exception_like(obj: Stored, error: bool) -> bool:
    """Whether a placeholder instance looks like an exception: by its class's name (``...Error``, a builtin
    exception, a module of errors), or by how it was pickled (`BaseException.__reduce__`: a call with the
    arguments, then the instance dict). In an error field (`error`) the call alone is enough."""
    kind = type(obj)
    name = kind.qualname.rsplit(".", 1)[-1]
    if kind.module == "builtins":
        found = getattr(builtins, name, None)
        if isinstance(found, type) and issubclass(found, BaseException):
            return True
    if name.endswith(_EXCEPTION_SUFFIXES) or _EXCEPTION_MODULES & set(kind.module.split(".")):
        return True
    made_like_one = obj.called and not obj.kwargs and not obj.items and not obj.entries and obj.slots is None \
        and (obj.state is None or isinstance(obj.state, dict))
    if error:
        return made_like_one
    return made_like_one and bool(obj.state) and bool(obj.args) and isinstance(obj.args[0], str)


# -- rendering ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Node:
    """One value of a rendered tree. `kind`: value (a scalar: `text` is its repr), list, tuple, set, dict (the
    children are the items; `text` names the type), object (`text` is module.Qualname; children: args, kwargs,
    attributes, items, entries), class, cycle (a value inside itself), elided (too deep, or past the node cap)."""

    kind: str
    text: str
    children: tuple[tuple[str | None, Node], ...] = ()
    more: int = 0  # children left out: the node cap was reached


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"… ({len(text) - limit:,} more characters)"


def _scalar_text(value: object, limit: int) -> str | None:
    """A scalar's text, `limit` characters of it at most; None for a container or a placeholder instance."""
    if isinstance(value, str | bytes | bytearray):
        unit = "characters" if isinstance(value, str) else "bytes"
        cut = "" if len(value) <= limit else f"… ({len(value) - limit:,} more {unit})"
        return repr(value[:limit]) + cut
    if value is None or isinstance(value, (bool, int, float, complex, *_REAL_TYPES)):
        try:
            return _clip(repr(value), limit)
        except Exception:  # an int of more digits than int→str converts, or a real type given odd state
            bits = f" of {value.bit_length():,} bits" if isinstance(value, int) else ""
            return f"<{type(value).__name__}{bits} that does not print>"
    return _reference_text(value)


def _reference_text(value: object) -> str | None:
    """The text of a class or function the pickle names (not called); None for anything else."""
    if isinstance(value, type) and issubclass(value, Stored):
        return f"<class {value.type_name()}>"
    if isinstance(value, type):
        return f"<class {value.__module__}.{value.__qualname__}>"
    if id(value) in _FUNCTION_NAMES:
        return f"<function {_FUNCTION_NAMES[id(value)]}>"
    return None


def _name(key: Any) -> str:
    """An attribute's name (a str, unless the pickle says otherwise)."""
    return _clip(key, 200) if isinstance(key, str) else _short(key, 60, 1)


def _object_parts(obj: Stored, call: bool = True) -> Iterator[tuple[str, Any]]:
    """An object's parts, in the order shown: arguments and keyword arguments (`call`), attributes, items,
    entries."""
    if obj.args and call:
        yield "args", obj.args
    if obj.kwargs and call:
        yield "kwargs", obj.kwargs
    for state in (obj.state, obj.slots):
        if isinstance(state, dict):
            yield from ((_name(k), v) for k, v in state.items())
        elif state is not None:
            yield "state", state
    if obj.items:
        yield "items", obj.items
    if obj.entries:
        yield "entries", _Entries(obj.entries)


class _Entries(list[tuple[Any, Any]]):
    """An object's SETITEMS entries: shown like a dict's items (keys need not be hashable)."""


def _container(value: object) -> tuple[str, str, int, Iterator[tuple[Any, Any]]] | None:
    """(kind, type label, length, (key, value) pairs) of a container; None for anything else."""
    if isinstance(value, dict | _Entries):
        pairs = value.items() if isinstance(value, dict) else value
        label = "OrderedDict" if isinstance(value, OrderedDict) else "dict"
        return "dict", label, len(value), iter(pairs)
    if isinstance(value, list | tuple):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return kind, kind, len(value), ((None, v) for v in value)
    if isinstance(value, set | frozenset):
        return "set", type(value).__name__, len(value), ((None, v) for v in value)
    return None


class _Tree:
    def __init__(self, max_nodes: int, max_depth: int, max_chars: int) -> None:
        self.max_nodes, self.max_depth, self.max_chars = max_nodes, max_depth, max_chars
        self.nodes = 0
        self.inside: set[int] = set()  # ids of the values being rendered: a cycle is shown once

    def key_text(self, key: Any) -> str:
        return _scalar_text(key, 200) or _short(key, 200, 1)

    def node(self, value: Any, depth: int) -> Node:
        self.nodes += 1
        text = _scalar_text(value, self.max_chars)
        if text is not None:
            return Node("value", text)
        if depth >= self.max_depth:
            return Node("elided", "… (deeper levels not shown)")
        if id(value) in self.inside:
            return Node("cycle", "↻ (the value that contains this one)")
        self.inside.add(id(value))
        try:
            if isinstance(value, Stored):
                parts = list(_object_parts(value))
                children, more = self.children(iter(parts), len(parts), depth, object_parts=True)
                return Node("object", type(value).type_name(), children, more)
            found = _container(value)
            if found is None:  # nothing else comes out of the interpreter; shown, not trusted
                return Node("value", _clip(f"<{type(value).__name__}>", self.max_chars))
            kind, label, length, pairs = found
            children, more = self.children(pairs, length, depth, object_parts=False)
            return Node(kind, label, children, more)
        finally:
            self.inside.discard(id(value))

    def children(self, pairs: Iterator[tuple[Any, Any]], length: int, depth: int,
                 object_parts: bool) -> tuple[tuple[tuple[str | None, Node], ...], int]:
        out: list[tuple[str | None, Node]] = []
        for key, item in pairs:
            if self.nodes >= self.max_nodes:
                break
            shown = key if object_parts else (None if key is None else self.key_text(key))
            out.append((shown, self.node(item, depth + 1)))
        return tuple(out), length - len(out)


def _short(value: Any, limit: int = SUMMARY_CHARS, depth: int = SUMMARY_DEPTH) -> str:
    """A one-line, Python-like text of a value: ``Order(id=7, items=[Item(sku='a'), …])``, about `limit` long."""
    out: list[str] = []
    budget = [limit, 200]  # characters left, values left
    inside: set[int] = set()

    def put(text: str) -> None:
        out.append(text)
        budget[0] -= len(text)

    def walk(item: Any, level: int) -> None:
        budget[1] -= 1
        text = _scalar_text(item, max(20, min(80, budget[0])))
        if text is not None:
            put(text)
            return
        if isinstance(item, Stored):
            opening, closing = type(item).qualname + "(", ")"
            pairs: list[tuple[str | None, Any]] = [(None, a) for a in item.args]
            pairs += [(str(k), v) for k, v in item.kwargs.items()]
            pairs += list(_object_parts(item, call=False))
            length = len(pairs)
            separator = "="
        else:
            found = _container(item)
            if found is None:
                put(f"<{type(item).__name__}>")
                return
            kind, _label, length, raw_pairs = found
            opening, closing = {"dict": ("{", "}"), "list": ("[", "]"), "tuple": ("(", ")"),
                                "set": ("{", "}")}[kind]
            pairs, separator = raw_pairs, ": "  # type: ignore[assignment]
            if kind == "tuple" and length == 1:
                closing = ",)"
        if level >= depth or id(item) in inside:
            put(opening + ("…" if length else "") + closing)
            return
        inside.add(id(item))
        put(opening)
        for index, (key, sub) in enumerate(pairs):
            if index:
                put(", ")
            if budget[0] <= 0 or budget[1] <= 0:
                put("…")
                break
            if key is not None:
                put((key if isinstance(key, str) and separator == "=" else _short(key, 60, 1)) + separator)
            walk(sub, level + 1)
        put(closing)
        inside.discard(id(item))

    walk(value, 0)
    return "".join(out)


class Decoded:
    """A decoded pickle: its value (plain data and `Stored` placeholders), what it is, and bounded renderings."""

    def __init__(self, value: Any, *, error: bool = False) -> None:
        self.value = value
        if isinstance(value, Stored):
            kind = type(value)
            self.type_name = kind.type_name()
            self.is_exception = _exception_like(value, error)
            self.args: tuple[Any, ...] = value.args
            self.kwargs: dict[str, Any] = dict(value.kwargs)
            self.state: Any = value.state
            attributes: dict[str, Any] = {}
            for state in (value.state, value.slots):
                if isinstance(state, dict):
                    attributes.update((_name(k), v) for k, v in state.items())
            self.attributes = attributes
        else:
            kind_of = type(value)
            self.type_name = kind_of.__name__ if kind_of.__module__ == "builtins" else \
                f"{kind_of.__module__}.{kind_of.__qualname__}"
            self.is_exception = False
            self.args, self.kwargs, self.state, self.attributes = (), {}, None, {}

    @property
    def short_name(self) -> str:
        return type(self.value).qualname if isinstance(self.value, Stored) else self.type_name

    def message(self, limit: int = MAX_CHARS) -> str:
        """An exception's message, as ``str(exception)`` would say it."""
        if len(self.args) == 1 and isinstance(self.args[0], str):
            return _clip(self.args[0], limit)
        if len(self.args) == 1:
            return _short(self.args[0], min(limit, SUMMARY_CHARS))
        return _short(self.args, min(limit, SUMMARY_CHARS)) if self.args else ""

    def summary(self) -> str:
        """One line: ``PaymentDeclined: card declined``, ``Order(id=7, items=[…])``, or the plain value."""
        if self.is_exception:
            message = self.message(SUMMARY_CHARS)
            return f"{self.short_name}: {message}" if message else self.short_name
        if isinstance(self.value, str):
            return _clip(self.value, SUMMARY_CHARS)
        return _short(self.value)

    def tree(self, max_nodes: int = MAX_NODES, max_depth: int = MAX_DEPTH, max_chars: int = MAX_CHARS) -> Node:
        """The value as a tree of at most `max_nodes` nodes and `max_depth` levels."""
        return _Tree(max_nodes, max_depth, max_chars).node(self.value, 0)


def count_nodes(node: Node) -> int:
    return 1 + sum(count_nodes(child) for _key, child in node.children)


# -- HTML (markupsafe only: every text escaped) ------------------------------------------------------
def _node_html(node: Node, out: list[str]) -> None:
    if node.kind in ("value", "class", "cycle", "elided"):
        out.append(f'<span class="sv-{node.kind}">{escape(node.text)}</span>')
        return
    count = len(node.children) + node.more
    nouns = ("part", "parts") if node.kind == "object" else \
        ("entry", "entries") if node.kind == "dict" else ("item", "items")
    out.append(f'<span class="sv-type">{escape(node.text)}</span>')
    if node.kind != "object" or not node.children:
        out.append(f' <span class="sv-count">{count:,} {nouns[count != 1]}</span>')
    if not node.children and not node.more:
        return
    out.append('<ul class="sv-tree">')
    for key, child in node.children:
        out.append("<li>")
        if key is not None:
            out.append(f'<span class="sv-key">{escape(key)}</span> ')
        _node_html(child, out)
        out.append("</li>")
    if node.more:
        out.append(f'<li class="sv-more">… {node.more:,} more not shown</li>')
    out.append("</ul>")


def to_html(decoded: Decoded, stored: str, label: str = "value") -> Markup:
    """The console's block for a decoded pickle: the summary, the tree, and the stored text one click away."""
    tree = decoded.tree()
    out: list[str] = []
    _node_html(tree, out)
    what = "exception · " if decoded.is_exception else ""
    opened = " open" if count_nodes(tree) <= OPEN_NODES else ""
    return Markup(  # noqa: S704 - every text is escaped: here, and in _node_html
        f'<div class="stored-value{" sv-exception" if decoded.is_exception else ""}" data-testid="stored-value">'
        f'<p class="sv-summary" data-testid="stored-summary">{escape(decoded.summary())}</p>'
        f'<details class="sv-decoded"{opened}><summary>{escape(label)} <span class="small">({what}'
        f'<code>{escape(decoded.type_name)}</code> · read from its pickle, nothing of it run)</span>'
        f'</summary><div class="sv-body">{"".join(out)}</div></details>'
        f'<details class="sv-stored"><summary>Stored form (pickle)</summary><code>{escape(stored)}</code></details>'
        "</div>"
    )

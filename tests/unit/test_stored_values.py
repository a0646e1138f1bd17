"""Pickled values shown decoded, never loaded (issue 36; web/console/stored_values.py, ADR 0045): what the
console shows of the Python SDK's stored pickles, that nothing a pickle names is imported or run, and that the
rendering of a hostile pickle stays bounded."""

from __future__ import annotations

import base64
import datetime
import decimal
import pickle
import sys
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from relay.actors.adapters.dataplane.pickle_shape import MAX_TUPLE_NESTING
from relay.web.console.helpers import json_view, pretty_json, stored_value
from relay.web.console.stored_values import (
    MAX_CHARS,
    MAX_DEPTH,
    MAX_NODES,
    MAX_TEXT,
    Decoded,
    Node,
    Stored,
    count_nodes,
    decode,
    looks_pickled,
    to_html,
)

TEMPLATES = Path(__file__).resolve().parents[2] / "web" / "templates" / "console"


# -- what an application stores ----------------------------------------------------------------------
class PaymentDeclinedError(Exception):
    def __init__(self, message: str, code: str, amount: int) -> None:
        super().__init__(message)
        self.code, self.amount = code, amount


class PaymentDeclined(Exception):
    """Named like no exception: recognized by how BaseException pickles (a call, then its attributes)."""

    def __init__(self, message: str, retry: bool) -> None:
        super().__init__(message)
        self.retry = retry


class Refused(Exception):
    """Keyword-only arguments: `pickle.loads` of it fails; decoding it does not."""

    def __init__(self, *, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


@dataclass
class Item:
    sku: str
    qty: int
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Order:
    id: int
    items: list[Item]


class Plain:
    def __init__(self, name: str) -> None:
        self.name = name
        self.parent: Plain | None = None


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self) -> None:
        self.a, self.b = 1, "two"


def dump(value: object, protocol: int = pickle.DEFAULT_PROTOCOL) -> str:
    """What the SDK stores (dbos/_serialization.py: base64 of `pickle.dumps`)."""
    return base64.b64encode(pickle.dumps(value, protocol=protocol)).decode()


def decoded(value: object, protocol: int = pickle.DEFAULT_PROTOCOL, error: bool = False) -> Decoded:
    result = decode(dump(value, protocol), error=error)
    assert result is not None
    return result


def decoded_text(text: str, error: bool = False) -> Decoded:
    result = decode(text, error=error)
    assert result is not None
    return result


PROTOCOLS = [2, 3, 4, 5]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_custom_exception_shows_its_class_message_and_attributes(protocol: int) -> None:
    d = decoded(PaymentDeclinedError("card declined", "E42", 1250), protocol)
    assert d.type_name == f"{__name__}.PaymentDeclinedError" and d.is_exception
    assert d.summary() == "PaymentDeclinedError: card declined"
    assert d.args == ("card declined",) and d.attributes == {"code": "E42", "amount": 1250}
    assert isinstance(d.value, Stored) and not isinstance(d.value, BaseException)  # a placeholder, never the class
    tree = d.tree()
    assert (tree.kind, tree.text) == ("object", f"{__name__}.PaymentDeclinedError")
    parts = dict(tree.children)
    assert parts["args"].kind == "tuple" and parts["args"].children[0][1].text == "'card declined'"
    assert parts["code"].text == "'E42'" and parts["amount"].text == "1250"


def test_an_exception_is_recognized_by_how_it_was_pickled() -> None:
    d = decoded(PaymentDeclined("card declined", retry=False))
    assert d.is_exception and d.summary() == "PaymentDeclined: card declined" and d.attributes == {"retry": False}
    refused = decoded(Refused(reason="limit"))
    assert refused.is_exception and refused.summary() == "Refused: refused: limit"
    with pytest.raises(TypeError):
        pickle.loads(pickle.dumps(Refused(reason="limit")))  # what loading it would have done
    # No attribute and no telling name (an enum member pickles the same way): an exception where errors are shown.
    bare = dump(PaymentDeclined.__new__(PaymentDeclined, "declined"))
    assert not decoded_text(bare).is_exception and decoded_text(bare, error=True).is_exception
    assert decoded_text(bare, error=True).summary() == "PaymentDeclined: declined"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_builtin_exceptions_are_shown_not_made(protocol: int) -> None:
    for error, summary in [(ValueError("bad input"), "ValueError: bad input"), (KeyError("k"), "KeyError: k"),
                           (OSError("disk", 28), "OSError: ('disk', 28)"),
                           (RuntimeError(), "RuntimeError")]:
        d = decoded(error, protocol)
        assert d.is_exception and d.summary() == summary, (error, d.summary())
        assert d.type_name == f"builtins.{type(error).__name__}" and not isinstance(d.value, BaseException)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_nested_objects_and_dataclasses(protocol: int) -> None:
    order = Order(7, [Item("a-1", 2, {"gift": True}), Item("b-2", 1)])
    d = decoded(order, protocol)
    assert not d.is_exception and d.type_name == f"{__name__}.Order"
    assert d.summary() == ("Order(id=7, items=[Item(sku='a-1', qty=2, options={…}), "
                           "Item(sku='b-2', qty=1, options={})])")
    assert d.attributes["id"] == 7
    items = dict(d.tree().children)["items"]
    assert items.kind == "list" and len(items.children) == 2
    first = items.children[0][1]
    assert (first.kind, first.text) == ("object", f"{__name__}.Item")
    options = dict(first.children)["options"]
    assert options.kind == "dict" and options.children == (("'gift'", Node("value", "True")),)


def test_plain_objects_slots_and_the_plain_data_inside() -> None:
    plain = decoded(Plain("n"))
    assert plain.attributes == {"name": "n", "parent": None} and plain.summary() == "Plain(name='n', parent=None)"
    slotted = decoded(Slotted())
    assert slotted.attributes == {"a": 1, "b": "two"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_plain_data_is_itself(protocol: int) -> None:
    when = datetime.datetime(2026, 12, 6, 19, 41, tzinfo=datetime.UTC)
    values: list[object] = [
        {"args": ("order-1",), "kwargs": {}}, [1, 2.5, None, True], "HELLO", b"\x00raw", {1, 2}, frozenset({3}),
        when, datetime.date(2026, 1, 2), datetime.timedelta(seconds=3), decimal.Decimal("12.50"),
        uuid.UUID(int=7), OrderedDict(a=1), 3 + 4j, 2**70,
    ]
    for value in values:
        d = decoded(value, protocol)
        assert d.value == value and type(d.value) is type(value), value
        assert not d.is_exception and d.args == () and d.attributes == {}
    assert decoded("HELLO", protocol).summary() == "HELLO"
    assert decoded({"args": ("x",), "kwargs": {}}, protocol).summary() == "{'args': ('x',), 'kwargs': {}}"
    assert decoded(when, protocol).type_name == "datetime.datetime"


# -- nothing a pickle names is imported or run -------------------------------------------------------
def _body(args: tuple[Any, ...]) -> bytes:
    """The opcodes that push `args` (protocol 2, without its header and STOP)."""
    return pickle.dumps(args, protocol=2)[2:-1]


def call(module: str, name: str, *args: Any, stack_global: bool = False) -> str:
    """A pickle calling module.name(*args) when loaded: GLOBAL (or STACK_GLOBAL), the arguments, REDUCE."""
    if stack_global:
        named = b"".join(b"\x8c" + bytes([len(part)]) + part for part in (module.encode(), name.encode())) + b"\x93"
        raw = b"\x80\x04" + named + _body(args) + b"R."
    else:
        raw = b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\n" + _body(args) + b"R."
    return base64.b64encode(raw).decode()


@contextmanager
def no_module_imported() -> Iterator[None]:
    before = set(sys.modules)
    yield
    assert set(sys.modules) - before == set()


@pytest.mark.parametrize("stack_global", [False, True])
def test_a_pickle_that_would_run_commands_runs_nothing(tmp_path: Path, stack_global: bool) -> None:
    marker = tmp_path / "pwned"
    attacks = [
        ("os", "system", (f"touch {marker}",)),
        ("posix", "system", (f"touch {marker}",)),
        ("subprocess", "call", (["touch", str(marker)],)),
        ("subprocess", "Popen", (["touch", str(marker)],)),
        ("subprocess", "check_output", (f"touch {marker}",)),
        ("builtins", "exec", (f"open({str(marker)!r}, 'w').close()",)),
        ("builtins", "eval", (f"__import__('os').system('touch {marker}')",)),
        ("__builtin__", "eval", (f"__import__('os').system('touch {marker}')",)),
        ("builtins", "__import__", ("os",)),
        ("builtins", "getattr", ("os", "system")),
        ("shutil", "rmtree", (str(tmp_path),)),
    ]
    for module, name, args in attacks:
        text = call(module, name, *args, stack_global=stack_global)
        assert looks_pickled(text)
        with no_module_imported():
            d = decode(text)
            assert d is not None
            d.summary(), to_html(d, text)
        assert d is not None, (module, name)
        assert isinstance(d.value, Stored) and d.args == args and not d.is_exception
        shown = "builtins" if module == "__builtin__" else module
        assert d.type_name == f"{shown}.{name}"
        assert not marker.exists() and tmp_path.exists()
    # What loading them does (the reason for all this), on a harmless one.
    assert pickle.loads(base64.b64decode(call("builtins", "len", "abc"))) == 3


def test_modules_a_pickle_names_are_not_imported() -> None:
    fake = f"relay_never_a_module_{uuid.uuid4().hex}"
    for module in (fake, "antigravity", "this", "tkinter"):
        assert module not in sys.modules
        with no_module_imported():
            d = decode(call(module, "Thing", 1))
            assert d is not None and d.type_name == f"{module}.Thing" and d.args == (1,)
            d.summary(), to_html(d, "t")
    assert fake not in sys.modules and "antigravity" not in sys.modules and "this" not in sys.modules


def test_a_getattr_chain_ends_in_a_refusal_not_a_call(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    # getattr(__import__('os'), 'system')('touch ...'): the inner calls give placeholders, which cannot be called.
    raw = (b"\x80\x02cbuiltins\ngetattr\ncbuiltins\n__import__\nX\x02\x00\x00\x00os\x85R"
           b"X\x06\x00\x00\x00system\x86R" + _body((f"touch {marker}",)) + b"R.")
    with no_module_imported():
        assert decode(base64.b64encode(raw).decode()) is None
    assert not marker.exists()


def test_the_real_value_types_are_not_changed_by_a_pickle() -> None:
    # BUILD on a class (not an instance) with slot state would set class attributes by setattr.
    for module, name in (("uuid", "UUID"), ("datetime", "datetime"), ("collections", "OrderedDict")):
        raw = (b"\x80\x02c" + module.encode() + b"\n" + name.encode() + b"\nN}X\x08\x00\x00\x00__repr__K\x01s\x86b.")
        assert decode(base64.b64encode(raw).decode()) is None
    assert "UUID(" in repr(uuid.UUID(int=1)) and repr(OrderedDict()) == "OrderedDict()"


# -- what is not a pickle, or is a broken one ---------------------------------------------------------
def test_only_base64_pickles_look_pickled() -> None:
    good = dump(ValueError("x"))
    assert looks_pickled(good) and looks_pickled(dump([1], 2))
    for text in ["", "hello", "gASV", base64.b64encode(b'{"a": 1}').decode(), good[:-1], good + "=",
                 " " + good, base64.b64encode(b"\x80\x01]q\x00.").decode(),  # protocol 1
                 base64.b64encode(b"\x80\x06N.").decode(), None, 42, b"\x80\x04N."]:
        assert not looks_pickled(text), text
        assert decode(text) is None
    oversized = dump("x" * MAX_TEXT)
    assert len(oversized) > MAX_TEXT and not looks_pickled(oversized) and decode(oversized) is None


def test_corrupt_or_truncated_pickles_decode_to_none() -> None:
    raw = pickle.dumps(Order(7, [Item("a", 1)]), protocol=4)
    for broken in [raw[:-9] + b".", raw[:20] + b".", raw[:3] + b"\xff" * 20 + b".", raw + b"N.",  # trailing data
                   b"\x80\x04\x95" + b"\x00" * 8 + b".", b"\x80\x02h\x05.",  # memo miss
                   b"\x80\x02P1\n.",  # a persistent id
                   b"\x80\x02K\x01K\x02R."]:  # an int called
        assert decode(base64.b64encode(broken).decode()) is None, broken


def test_nested_tuples_are_refused_before_loading() -> None:
    # A tuple's hash recurses into its items in C with no depth check: hundreds of thousands of tuples in tuples as a
    # dict key crash Python (a segfault, in any unpickler). Read first with pickletools, refused before any is made.
    deep_key = b"\x80\x02}N" + b"\x85" * 300_000 + b"Ns."
    assert looks_pickled(base64.b64encode(deep_key).decode())
    assert decode(base64.b64encode(deep_key).decode()) is None
    nested: Any = None
    for _ in range(MAX_TUPLE_NESTING):
        nested = (nested,)
    assert decoded({nested: 1}).value == {nested: 1}
    assert decode(dump({(nested,): 1})) is None
    # Lists nest as deep as they like (nothing hashes them), and the memo's tuples count with their depth.
    lists: list[Any] = []
    for _ in range(200):
        lists = [lists, (1, (2,))]
    assert decode(dump(lists)) is not None
    memo_deep = pickle.dumps([nested, (nested,)], protocol=2)
    assert decode(base64.b64encode(memo_deep).decode()) is None
    # A length the pickle declares but does not hold (the C unpickler would allocate it first).
    lying = b"\x80\x04\x8e" + (1 << 40).to_bytes(8, "little") + b"x."
    assert decode(base64.b64encode(lying).decode()) is None


# -- bounded rendering ------------------------------------------------------------------------------------
def depth_of(node: Node) -> int:
    return 1 + max((depth_of(child) for _key, child in node.children), default=0)


def test_a_memo_bomb_renders_bounded() -> None:
    bomb: list[Any] = ["boom"]
    for _ in range(40):
        bomb = [bomb] * 10  # 10**40 leaves, a few hundred bytes pickled
    text = dump(bomb)
    assert len(text) < 2_000
    d = decode(text)
    assert d is not None
    tree = d.tree()
    assert count_nodes(tree) <= MAX_NODES and depth_of(tree) <= MAX_DEPTH + 1
    assert len(d.summary()) < 1_000
    html = to_html(d, text)
    assert html.count("<li") <= MAX_NODES + 100


def test_cycles_render_once() -> None:
    looped: list[Any] = [1]
    looped.append(looped)
    mapping: dict[str, Any] = {}
    mapping["self"] = mapping
    node = Plain("root")
    node.parent = node
    for value in (looped, mapping, node):
        d = decoded(value)
        tree = d.tree()
        assert "cycle" in {child.kind for _key, child in tree.children}
        assert count_nodes(tree) <= 4 and "…" in d.summary()
    assert decoded(node).summary() == "Plain(name='root', parent=Plain(…))"


def test_wide_deep_and_long_values_are_cut() -> None:
    wide = decoded(list(range(100_000)))
    tree = wide.tree()
    assert count_nodes(tree) <= MAX_NODES and tree.more == 100_000 - len(tree.children) > 0
    assert "… 9" in to_html(wide, "x")  # "… 98,001 more not shown"
    deep: list[Any] = []
    for _ in range(400):
        deep = [deep]
    deep_tree = decoded(deep).tree()
    assert depth_of(deep_tree) == MAX_DEPTH + 1
    long = decoded({"text": "y" * 100_000})
    (_key, leaf), = long.tree().children
    assert len(leaf.text) < MAX_CHARS + 100 and "more characters" in leaf.text
    assert len(long.summary()) < 1_000
    huge = decoded(2 ** 100_000)  # more digits than int→str converts
    assert "bits" in huge.tree().text
    small = decoded(ValueError("z" * 100_000))
    assert len(small.summary()) < 1_000


# -- the console ---------------------------------------------------------------------------------------------
def test_the_filter_escapes_every_text() -> None:
    text = dump(PaymentDeclinedError("<script>alert(1)</script>", "<b>", 1))
    html = str(stored_value(text, "error", True))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "&lt;b&gt;" in html
    assert "PaymentDeclinedError: &lt;script&gt;" in html
    assert f"<summary>Stored form (pickle)</summary><code>{text}</code>" in html
    named = decode(call("<img src=x onerror=alert(1)>", "<i>", "<u>"))
    assert named is not None
    shown = str(to_html(named, "t", "<label>"))
    assert "<img" not in shown and "<i>" not in shown and "<u>" not in shown and "<label>" not in shown
    assert stored_value("not a pickle") == "" and stored_value(None) == "" and stored_value(dump(1)[:-2]) == ""


@pytest.fixture
def jinja() -> Flask:
    """The console's templates and the filters they use here, as the console blueprint registers them."""
    app = Flask(__name__, template_folder=str(TEMPLATES.parent))
    for name, function in (("stored_value", stored_value), ("json_view", json_view), ("pretty", pretty_json)):
        app.add_template_filter(function, name)
    return app


def test_the_workflow_page_shows_stored_values_decoded(jinja: Flask) -> None:
    page = jinja.jinja_env.from_string(
        '{% from "console/_macros.html" import stored %}'
        '<section data-testid="input">{{ stored(input, "input") }}</section>'
        '<section data-testid="output">{{ stored(output, "output") }}</section>'
        '<section class="err">{{ stored(error, "error", error=true) }}</section>'
        '<ol class="timeline"><li>{{ stored(step_error, "error", "steperr", error=true) }}</li>'
        '<li>{{ stored(step_output, "output") }}</li></ol>')
    error = dump(PaymentDeclined("card <declined>", retry=False))
    html = page.render(input=dump({"args": (Order(7, []),), "kwargs": {}}), output='{"done": true}', error=error,
                       step_error="ValueError: plain text", step_output=dump(Item("a", 1)))
    assert '<p class="sv-summary" data-testid="stored-summary">PaymentDeclined: card &lt;declined&gt;</p>' in html
    assert "{&#39;args&#39;: (Order(id=7, items=[]),), &#39;kwargs&#39;: {}}" in html  # the input's summary
    assert "Item(sku=&#39;a&#39;, qty=1, options={})" in html  # the step's output
    assert f"<code>{error}</code>" in html  # the stored form, one click away
    assert 'class="json"' in html and "&#34;done&#34;: true" in html  # JSON stays a JSON block
    assert '<pre class="steperr">ValueError: plain text</pre>' in html  # a text error stays as it was
    assert html.count('data-testid="stored-value"') == 3


def test_the_workflow_template_uses_the_macro_where_values_are_shown() -> None:
    # The workflow page, with the parts it includes (its values, its steps: a followed page re-renders them).
    template = "".join((TEMPLATES / name).read_text() for name in ("workflow.html", "_workflow_io.html",
                                                                   "_steps.html"))
    for line in ['<section data-testid="input"><h3>Input</h3>{{ stored(wf.input, "input") }}</section>',
                 '<section data-testid="output"><h3>Output</h3>{{ stored(wf.output, "output") }}</section>',
                 '{{ stored(wf.error, "error", error=true) }}', '{{ stored(s.error, "error", "steperr", error=true) }}',
                 '{{ stored(s.output, "output") }}']:
        assert line in template, line

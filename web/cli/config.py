"""`relay diff|apply -f relay.yaml`: declarative configuration, through the running server (web/api/config.py).

The file is read and checked here first (actors/policies/config.py, the server's own check), so a bad file is refused
with every bad item named and nothing sent. `diff` prints the server's plan (exit 0: nothing would change, 1: something
would, 2: refused); `apply` prints the plan, then applies exactly it: the server refuses (409, nothing applied)
when the organization moved since the plan was made.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from relay.actors.policies.config import ConfigInvalidError, parse_config
from relay.wire.json_types import JSONObject


class ConfigFileError(Exception):
    pass


def load_document(path: str) -> tuple[Any, str | None]:
    """The file's document, checked, and the organization it names (None when it names none)."""
    where = "stdin" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigFileError(f"cannot read {where}: {getattr(error, 'strerror', None) or error}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ConfigFileError(f"{where} is not valid YAML{at}: {getattr(error, 'problem', None) or error}") from None
    try:
        config = parse_config(document)
    except ConfigInvalidError as error:
        lines = "\n".join(f"  {path}: {message}" for path, message in error.errors)
        raise ConfigFileError(f"{where} is not a valid Relay configuration (nothing was changed):\n{lines}") from None
    return document, config.org


def print_plan(org: str, changes: list[JSONObject]) -> None:
    if not changes:
        print(f"organization {org}: no changes")
        return
    print(f"organization {org}: {len(changes)} change{'s' if len(changes) != 1 else ''}")
    for change in changes:
        print(change["text"])


Api = Callable[[str, str, JSONObject], Any]


def run(args: argparse.Namespace, default_org: str, api: Api) -> int:
    """``api(method, path, body)`` calls the server (raising on an error answer)."""
    document, named = load_document(args.filename)
    if args.org and named and args.org != named:
        raise ConfigFileError(f"--org {args.org} and the file's org: {named} differ")
    org = args.org or named or default_org
    body = {"config": document, "prune": bool(args.prune)}
    planned = api("POST", f"/relay/v1/orgs/{org}/config/plan", body)
    changes = planned["changes"]
    if args.command == "diff":
        if args.output == "json":
            print(json.dumps(planned, indent=2, sort_keys=True))
        else:
            print_plan(org, changes)
        return 1 if changes else 0
    print_plan(org, changes)
    if not changes:
        return 0
    if planned["keyReplacements"] and not args.replace_keys:
        raise ConfigFileError(
            f"API keys cannot change, and the file changes the scope of {', '.join(planned['keyReplacements'])}: "
            "nothing was applied. --replace-keys revokes such keys and issues them again (new secrets; executors "
            "using the old ones are disconnected)")
    applied = api("POST", f"/relay/v1/orgs/{org}/config/apply",
                  {**body, "replaceKeys": bool(args.replace_keys), "basis": planned["basis"]})
    count = len(applied["changes"])
    print(f"applied {count} change{'s' if count != 1 else ''} to organization {org}")
    if applied["keys"]:
        print("API keys issued; each is shown once, store it now:", file=sys.stderr)
        for key in applied["keys"]:
            print(f"key {key['tokenName']}: {key['token']}")
    return 0

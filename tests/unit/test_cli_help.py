"""`relay --help` and its commands' help: every option and argument explained, the settings listed from their one
definition (actors/configuration/settings.py ENV_SETTINGS), which also renders the README's settings table."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

from relay.actors.configuration.settings import ENV_SETTINGS, Settings, settings_table
from relay.events.organization import PERMISSIONS
from relay.web.api.applications import DEFAULT_KEY_PERMISSIONS
from relay.web.cli.parser import build_parser
from tests.support.readme_blocks import check_block

SETTINGS_SOURCE = Path(__file__).resolve().parents[2] / "actors" / "configuration" / "settings.py"


def parsers(parser: argparse.ArgumentParser, path: str = "relay") -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += parsers(child, f"{path} {name}")
    return found


def test_every_option_argument_and_command_has_help() -> None:
    missing = []
    for path, parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(f"{path}: {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                helped = {choice.dest for choice in action._choices_actions if choice.help}
                missing += [f"{path} {name}" for name in action.choices if name not in helped]
    assert missing == []


def test_serve_help_lists_every_setting_with_its_default() -> None:
    text = dict(parsers(build_parser()))["relay serve"].format_help()
    for setting in ENV_SETTINGS:
        line = f"  {setting.name}" + (f" [{setting.default}]" if setting.default else "")
        assert re.search(rf"^{re.escape(line)}$", text, re.MULTILINE), setting.name


def test_settings_are_declared_once() -> None:
    """Every RELAY_* variable settings.py reads is declared in ENV_SETTINGS, and the declared defaults are the
    dataclass's (the CLI's and tests' `Settings()`)."""
    read = set(re.findall(r'"(RELAY_[A-Z0-9_]+)"', SETTINGS_SOURCE.read_text()))
    assert read == {s.name for s in ENV_SETTINGS}
    from_env, plain = Settings.from_env({}), Settings()
    for field in dataclasses.fields(Settings):
        if field.name != "instance_id":  # hostname:port, computed
            assert getattr(from_env, field.name) == getattr(plain, field.name), field.name


def test_keys_help_lists_the_permissions_and_the_defaults() -> None:
    text = " ".join(dict(parsers(build_parser()))["relay keys"].format_help().split())
    for permission in PERMISSIONS:
        assert permission in text
    assert "default: " + ", ".join(DEFAULT_KEY_PERMISSIONS) in text


def test_since_is_documented_as_exclusive() -> None:
    assert "exclusive" in dict(parsers(build_parser()))["relay events"].format_help()


def test_the_readme_settings_table_is_rendered_from_the_settings() -> None:
    check_block("settings", settings_table())

"""The README's shell blocks are runnable as written: every variable one uses is set in its own section (a
reader pastes a section, not the whole file), and every `relay ...` command they run parses with the real CLI."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from relay.web.cli.parser import build_parser

REPO = Path(__file__).resolve().parents[2]
USED = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
SET = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)


def sections() -> dict[str, list[str]]:
    """The README's sections by title, each with its ```sh blocks."""
    text = (REPO / "README.md").read_text()
    parts = re.split(r"\n(?=## )", text)
    return {part.splitlines()[0]: re.findall(r"```sh\n(.*?)```", part, re.DOTALL) for part in parts}


def test_every_variable_a_shell_block_uses_is_set_in_its_section() -> None:
    unset = []
    for title, blocks in sections().items():
        code = "\n".join(line.split(" #", 1)[0] for block in blocks for line in block.splitlines())
        unset += [f"{title}: ${name}" for name in sorted(set(USED.findall(code)) - set(SET.findall(code)))]
    assert unset == []


def relay_commands() -> list[tuple[str, list[str]]]:
    found = []
    for title, blocks in sections().items():
        for block in blocks:
            for line in block.splitlines():
                command = line.split(" #", 1)[0].strip()
                command = re.sub(r"^(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*=\$\((.*)\)$", r"\1", command)
                if command.startswith("relay "):
                    found.append((title, shlex.split(command)[1:]))
    return found


def test_every_relay_command_of_the_readme_parses() -> None:
    commands = relay_commands()
    assert len(commands) > 5
    refused = []
    for title, args in commands:
        try:
            build_parser().parse_args(args)
        except SystemExit:
            refused.append(f"{title}: relay {shlex.join(args)}")
    assert refused == []

"""`make test`'s first step: the toolchains the tests build with are there and new enough, else stop at once.

Run with the Python the Makefile builds its environments with (``$(PYTHON) tests/support/check_toolchains.py``),
so it is that Python whose version is checked; written to run (and to say what is wrong) on an older Python too.
The minimums come from the project's own pins, so they cannot drift from what the builds ask for:
Go from the test apps' go.mod ``go`` directives, the JDK from the Java app's ``maven.compiler.release``, Node
from the TypeScript apps' ``engines``, Python from pyproject.toml's ``requires-python``; Maven's is the
``prerequisites`` of the Maven plugins pinned in the Java app's pom.xml.
Exit 0 when all are fine; else 1, one line per missing or old toolchain: what, the version needed, how to get it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APPS = os.path.join(REPO, "tests", "integration")
GO_MODS = ("go_app/go.mod", "go_current_app/go.mod")
PACKAGE_JSONS = ("ts_app/package.json", "ts_current_app/package.json")
POM = "java_app/pom.xml"
# maven-compiler-plugin 3.13.0, maven-jar-plugin 3.4.2, maven-dependency-plugin 3.8.1 and surefire 3.5.2 (pom.xml)
# each declare Maven 3.6.3 as their prerequisite.
MAVEN_MIN = (3, 6, 3)

HOW = {
    "Go": "download it from https://go.dev/dl/ and put its bin/ first on PATH (Debian 12's golang-go is 1.19)",
    "Node.js": "install it from https://nodejs.org/en/download or NodeSource's Debian packages "
               "(https://github.com/nodesource/distributions; Debian 12's nodejs is 18), with npm",
    "JDK": "apt-get install openjdk-17-jdk-headless (or any JDK of that release or newer, javac on PATH)",
    "Maven": "apt-get install maven (Debian 12's is 3.8.7), or https://maven.apache.org/download.cgi",
    "Python": "apt-get install python3 python3-venv (Debian 12's python3 is 3.11), or run make PYTHON=python3.1x",
}

Version = tuple  # of three ints: "1.26" and "1.26.0" are the same version


def _read(relative: str) -> str:
    with open(os.path.join(APPS, relative)) as handle:
        return handle.read()


def _version(text: str) -> Version:
    parts = [int(part) for part in text.split(".")]
    return tuple([*parts, 0, 0, 0][:3])


def _shown(version: Version) -> str:
    return ".".join(str(part) for part in version)


def required() -> dict:
    """The minimum version of each toolchain and the file that asks for it."""
    go = max((_version(re.search(r"^go (\S+)$", _read(m), re.MULTILINE).group(1)), m) for m in GO_MODS)
    node = max((_version(re.search(r">=\s*([\d.]+)", json.loads(_read(p))["engines"]["node"]).group(1)), p)
               for p in PACKAGE_JSONS)
    jdk = _version(re.search(r"<maven.compiler.release>(\d+)<", _read(POM)).group(1))
    with open(os.path.join(REPO, "pyproject.toml")) as handle:
        python = _version(re.search(r'^requires-python\s*=\s*">=\s*([\d.]+)"', handle.read(), re.MULTILINE).group(1))
    return {
        "Go": (go[0], "tests/integration/" + go[1]),
        "Node.js": (node[0], "tests/integration/" + node[1]),
        "JDK": (jdk, "tests/integration/" + POM + " maven.compiler.release"),
        "Maven": (MAVEN_MIN, "the Maven plugins pinned in tests/integration/" + POM),
        "Python": (python, "pyproject.toml requires-python"),
    }


def _run(argv: list, env: dict | None = None) -> str | None:
    """The command's stdout and stderr, or None when it is not there or fails."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=60, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _found(output: str | None, pattern: str) -> Version | None:
    match = re.search(pattern, re.sub(r"\x1b\[[0-9;]*m", "", output or ""))
    return _version(match.group(1)) if match else None


def installed() -> dict:
    """The version of each toolchain found on PATH (None: not there, or not runnable)."""
    # GOTOOLCHAIN=local: the Go on PATH itself, not one it would download for a module asking for a newer one.
    go_env = dict(os.environ, GOTOOLCHAIN="local")
    node = _found(_run(["node", "--version"]), r"v(\d+\.\d+\.\d+)")
    if node is not None and _run(["npm", "--version"]) is None:
        node = None  # the builds run `npm ci`
    return {
        "Go": _found(_run(["go", "version"], go_env), r"\bgo(\d+\.\d+(?:\.\d+)?)"),
        "Node.js": node,
        # javac, not java: the Java app is compiled.
        "JDK": _found(_run(["javac", "-version"]), r"javac (\d+(?:\.\d+)*)"),
        "Maven": _found(_run(["mvn", "--version", "--batch-mode"]), r"Apache Maven (\d+\.\d+\.\d+)"),
        "Python": tuple(sys.version_info[:3]),
    }


def problems(needed: dict, found: dict) -> list:
    lines = []
    for name, (minimum, source) in needed.items():
        have = found.get(name)
        if have is not None and have >= minimum:
            continue
        state = "not found" if have is None else f"found {_shown(have)}"
        lines.append(f"{name} {_shown(minimum)} or newer is needed ({source}), {state}: {HOW[name]}.")
    return lines


def venv_problem() -> list:
    """Debian's python3 without python3-venv cannot build the test environments (no ensurepip)."""
    if _run([sys.executable, "-c", "import ensurepip, venv"]) is not None:
        return []
    return [f"Python's venv module cannot create environments ({sys.executable} has no ensurepip): {HOW['Python']}."]


def main() -> int:
    lines = problems(required(), installed()) + venv_problem()
    for line in lines:
        sys.stderr.write("make test: " + line + "\n")
    if lines:
        sys.stderr.write("make test: stopped before building anything (the README's \"The tests\" lists them).\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

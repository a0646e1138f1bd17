"""axe-core in a Playwright page (issue 33, point 5; ADR 0056): the serious and critical WCAG 2.1 A/AA violations
of the page as it is now. axe is installed, pinned, by `make test-deps` (tests/e2e/axe)."""

from __future__ import annotations

import functools
from typing import Any

from playwright.sync_api import Page

from tests.support.procs import REPO_ROOT

AXE_JS = REPO_ROOT / "tests" / "e2e" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
BLOCKING = {"serious", "critical"}
# The rules whose outcome depends on colours: the only ones run again in the dark theme (the markup is the same).
COLOUR_RULES = ["color-contrast", "link-in-text-block"]

# Opens every <details> (menus, collapsed JSON) so their content is audited too; then runs axe.
_RUN_AXE = """async (only) => {
  document.querySelectorAll('details:not([open])').forEach(d => { d.open = true; });
  const result = await axe.run(document, {runOnly: only, resultTypes: ['violations']});
  return result.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                      targets: v.nodes.slice(0, 6).map(n => n.target.join(' '))}));
}"""


@functools.cache
def _axe_source() -> str:
    if not AXE_JS.exists():
        raise FileNotFoundError(f"{AXE_JS} is missing: `make test-deps` installs axe-core")
    return AXE_JS.read_text(encoding="utf-8")


def violations(page: Page, where: str) -> list[str]:
    """The serious and critical axe violations on the page as it is now, one line each (rule, impact, targets);
    in the dark theme only those of the colour rules. Every <details> is left open."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        # Evaluated, not added as a <script>: the console's Content-Security-Policy refuses inline scripts.
        page.evaluate(f"() => {{ {_axe_source()} }}")
    dark = page.evaluate("() => matchMedia('(prefers-color-scheme: dark)').matches")
    only = {"type": "rule", "values": COLOUR_RULES} if dark else {"type": "tag", "values": AXE_TAGS}
    found: list[dict[str, Any]] = page.evaluate(_RUN_AXE, only)
    return [f"{where}: {v['id']} ({v['impact']}): {v['help']} — {'; '.join(v['targets'])}"
            for v in found if v["impact"] in BLOCKING]


def assert_accessible(page: Page, where: str) -> None:
    """No serious or critical violation on the page, in the light theme and then the dark one (emulated for the
    audit; the page is left light)."""
    found = []
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)  # type: ignore[arg-type]
        found += violations(page, f"{where} ({scheme})")
    page.emulate_media(color_scheme="light")
    assert not found, f"{len(found)} serious/critical axe violation(s):\n" + "\n".join(found)

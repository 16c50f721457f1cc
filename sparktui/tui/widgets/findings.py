"""The findings list (live checks and log matches, errors first) and the detail panel
for the selected one: explanation, fix with live names and IPs, source line, links."""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from sparktui.core.model import Finding

SEVERITY_STYLE = {"error": "bold $crash", "warning": "$log-warning", "info": "$finding-info"}
SEVERITY_MARK = {"error": "✗", "warning": "!", "info": "i"}


def finding_key(f: Finding) -> str:
    """Stable id of a finding across refreshes (kind + node + origin)."""
    return f"{f.source}:{f.id}:{f.node or '*'}"


def finding_prompt(f: Finding) -> Content:
    style = SEVERITY_STYLE.get(f.severity, "")
    where = f.node or "cluster"
    return Content.assemble(
        (SEVERITY_MARK.get(f.severity, "?"), style),
        " ",
        (f"{where:<9}", "$muted"),
        " ",
        (f.message or f.title or f.id, style if f.severity == "error" else ""),
        ("  log" if f.source == "log" else "", "$muted"),
    )


class FindingsList(OptionList):
    """Selectable findings; keeps the selection across refreshes. Posts `Selected` whenever
    the finding under the cursor changes (moved to, or the same one with new text)."""

    @dataclass
    class Selected(Message):
        """The finding to show in detail (None: the list is empty)."""

        finding: Finding | None

    def __init__(self) -> None:
        super().__init__(id="findings", markup=False)
        self.border_title = "findings"
        self._keys: list[str] = []
        self._findings: dict[str, Finding] = {}
        self._announced: Finding | None = None

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        event.stop()
        self._announce()

    def _announce(self) -> None:
        selected = self.selected
        if selected is not self._announced:
            self._announced = selected
            self.post_message(self.Selected(selected))

    @property
    def selected(self) -> Finding | None:
        if self.highlighted is None or self.highlighted >= len(self._keys):
            return None
        return self._findings.get(self._keys[self.highlighted])

    def set_findings(self, findings: list[Finding]) -> None:
        keys = [finding_key(f) for f in findings]
        current = (
            self._keys[self.highlighted]
            if (self.highlighted is not None and self.highlighted < len(self._keys))
            else None
        )
        new = dict(zip(keys, findings, strict=True))
        if keys == self._keys and all(new[k] == self._findings.get(k) for k in keys):
            return
        self._findings = new
        if keys == self._keys:  # same rows, new text: replace in place (keeps scroll)
            for i, f in enumerate(findings):
                self.replace_option_prompt_at_index(i, finding_prompt(f))
        else:
            self._keys = keys
            self.set_options(
                Option(finding_prompt(f), id=k) for k, f in zip(keys, findings, strict=True)
            )
            if keys:
                self.highlighted = keys.index(current) if current in keys else 0
        errors = sum(1 for f in findings if f.severity == "error")
        self.border_title = f"findings {len(findings)}" + (f" · {errors} error" if errors else "")
        self._announce()


def render_finding(f: Finding | None, open_key: str = "o") -> Content:
    """The detail panel text. Finding text is data, never markup. A finding that names a
    node offers `open_key`: that node's log, at the finding's line."""
    if f is None:
        return Content.styled(
            "No findings. Select one to see what it means and how to fix it.", "$muted"
        )
    style = SEVERITY_STYLE.get(f.severity, "")
    parts: list[str | tuple[str, str]] = [
        (f"{f.severity.upper()} ", style),
        (f.title or f.id, "bold"),
        "\n",
        (f"{f.id}", "$muted"),
        (f" · {f.node or 'cluster'}", "$muted"),
        (f" · {f.category}" if f.category else "", "$muted"),
        (f" · from the log, line {f.line}" if f.source == "log" and f.line else "", "$muted"),
        ("\n\n", ""),
        (f.message, ""),
        "\n",
    ]
    if f.fix:  # first: what to do, with the live names and IPs
        parts += ["\n", ("Fix", "bold $node-ok"), "\n", (f.fix.strip(), ""), "\n"]
    if f.explanation:
        parts += ["\n", ("Why", "bold"), "\n", (f.explanation.strip(), ""), "\n"]
    if f.text:
        parts += ["\n", ("Log line", "bold"), "\n", (f.text.strip()[:2000], "$muted"), "\n"]
    if f.links:
        parts += ["\n", ("Links", "bold"), "\n"]
        for link in f.links:
            parts += [(link, "underline $finding-info"), "\n"]
    if f.node:
        at = f" at line {f.line}" if f.source == "log" and f.line else ""
        parts += ["\n", (f"{open_key}: ", "bold"), (f"open {f.node}'s log{at}", "$muted")]
    return Content.assemble(*parts)


class FindingDetail(VerticalScroll):
    """Explanation, fix steps and links of the selected finding."""

    def __init__(self) -> None:
        super().__init__(id="finding-detail")
        self.border_title = "detail"
        self.finding: Finding | None = None
        self.open_key = "o"  # the screen sets the key its keymap gives `open_log`

    def compose(self) -> ComposeResult:
        yield Static(render_finding(None), id="finding-text", markup=False)

    def show(self, finding: Finding | None) -> None:
        self.finding = finding
        self.query_one("#finding-text", Static).update(render_finding(finding, self.open_key))

"""The log pane: the followed vLLM log, bounded, written in batches, lines coloured by
severity (level words, and findings from the knowledge base), `/` filter, findings-only,
follow/pause with an "N new lines" mark. Log text is data: it is never parsed as markup.
"""

from __future__ import annotations

import re
import time
from bisect import bisect_left
from dataclasses import dataclass
from math import ceil

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.cache import LRUCache
from textual.containers import Vertical
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar
from textual.strip import Strip
from textual.timer import Timer
from textual.widgets import Input, Static

from sparktui.core.logs import stream_trouble
from sparktui.core.safe_text import clean
from sparktui.tui.frames import FrameScreen, before_next_frame

ERROR_RE = re.compile(
    r"\b(?:ERROR|CRITICAL|FATAL)\b|Traceback \(most recent call last\)"
    r"|^\w+(?:Error|Exception): |\bError: "
)
WARNING_RE = re.compile(r"\bWARN(?:ING)?\b")
_ERROR_WORDS = ("ERROR", "CRITICAL", "FATAL", "Traceback", "Error", "Exception")
HUGE = 2000  # longer lines are shown plain and cut at RENDER_MAX
RENDER_MAX = 4000
NULL_STYLE = Style()


def level_of(line: str) -> str:
    """ "error", "warning" or "" from the line's own words; huge lines are not scanned."""
    if len(line) > HUGE:
        return ""
    # substring tests first: the regexes cost ~10 us on a plain 200-character line, a flood
    # draws a pane of new lines every frame, and most lines hold none of these words
    if any(w in line for w in _ERROR_WORDS) and ERROR_RE.search(line):
        return "error"
    if "WARN" in line and WARNING_RE.search(line):
        return "warning"
    return ""


@dataclass(slots=True)
class LogEntry:
    seq: int  # line number in this console session, from 1
    node: str
    text: str
    level: str | None = None  # level_of(text), worked out when the line is first drawn
    finding: str | None = None  # severity of a finding matched on this line
    finding_id: str | None = None


class ThumbScrollBar(ScrollBar):
    """A scrollbar that draws its rows again only when what it shows changes.

    A followed log moves the bar's position at every sync, but with thousands of lines the
    thumb stays on the same eighth of a cell: Textual's bar would still draw every row of it
    again, each frame (1.9 ms of a 7 ms frame under 2k lines/s on the test machine). The rows
    drawn are kept while the thumb, the bar's size and its hover and grab states stay.
    """

    _drawn: tuple | None = None
    _lines: list[Strip] | None = None

    def _thumb(self) -> tuple:
        """What `ScrollBarRender` draws from the bar's state: its length and the thumb's
        ends in eighths of a cell, the hover and grab states."""
        size = self.size.height if self.vertical else self.size.width
        window = ceil(self.window_size if self.window_size < self.window_virtual_size else 0)
        virtual = ceil(self.window_virtual_size)
        thumb = None
        if window and size and virtual and size != virtual:
            thumb_size = max(1, window / (virtual / size))
            at = (size - thumb_size) * (self.position / (virtual - window))
            start = int(at * 8)
            thumb = (start, start + ceil(thumb_size * 8))
        return (size, thumb, self.mouse_over, self.grabbed is not None)

    def render_lines(self, crop: Region) -> list[Strip]:
        drawn = (self._thumb(), crop)
        if drawn != self._drawn or self._lines is None:
            self._lines = super().render_lines(crop)
            self._drawn = drawn
        return self._lines

    def notify_style_update(self) -> None:
        self._drawn = None  # a new theme: draw again
        super().notify_style_update()


class LogView(ScrollView, can_focus=True):
    """A line-API view over the pane's entries (only the visible lines are rendered)."""

    COMPONENT_CLASSES = {
        "logview--error",
        "logview--warning",
        "logview--finding-error",
        "logview--finding-warning",
        "logview--finding-info",
        "logview--node",
    }
    BINDINGS = [
        Binding("G", "scroll_end", "End", show=False),
        Binding("g", "scroll_home", "Top", show=False),
    ]

    class Scrolled(Message):
        """The view moved; the pane updates its status line."""

    SYNC_INTERVAL = 0.1  # seconds: how often, at most, a flood of lines is put on screen
    # ... unless lines come so fast that one would pass through the pane between two syncs
    # unseen: then as often as that takes (a pane's height of lines per sync), down to one
    # 60 Hz frame
    SYNC_MIN = 1 / 60

    def __init__(self, max_lines: int = 20000) -> None:
        super().__init__(id="log-view")
        self.max_lines = max_lines
        self.entries: list[LogEntry] = []
        self.view: list[LogEntry] = []
        self.filter_text = ""
        self.findings_only = False
        self.node_filter: str | None = None  # `n`: only this node's lines (None: every node)
        self.follow = True  # `l` toggles: False pauses the view where it is
        self.pinned = True  # the view sits at the newest line (scrolling up unpins it)
        self.new_lines = 0
        self._seq = 0
        self._width = 0
        self._sources: dict[str, None] = {}  # the nodes seen, in the order they came
        # rows as drawn (with the view's style, cropped to its width): a frame redraws every
        # row when the view scrolls by one line, and each row's style and strips cost as
        # much as the rest of the frame; a following view redraws only the new lines
        self._rows: LRUCache[tuple[int, str | None, int, int], Strip] = LRUCache(1024)
        self._base: Style | None = None  # the view's own style (rich_style walks the DOM)
        self._synced_at = 0.0
        self._sync_timer: Timer | None = None
        self._frame_sync = False  # a sync is asked for at the screen's next frame
        self._arrived = 0  # lines added since the last sync
        self._rate = 0.0  # lines per second over the last sync period
        self._unseen: int | None = None  # seq after the last line drawn (render_lines)
        self._behind = False  # a followed view shows older lines first (see _follow)

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        """Textual's vertical bar, as a `ThumbScrollBar` (created as Textual creates its own)."""
        if self._vertical_scrollbar is None:
            bar = ThumbScrollBar(
                vertical=True, name="vertical", thickness=self.scrollbar_size_vertical
            )
            bar.display = False
            self._vertical_scrollbar = bar
            self.app._start_widget(self, bar)
        return self._vertical_scrollbar

    # ------------------------------------------------------------------ data

    def _passes(self, e: LogEntry) -> bool:
        if self.findings_only and e.finding is None:
            return False
        if self.node_filter is not None and e.node != self.node_filter:
            return False
        return not self.filter_text or self.filter_text in e.text.lower()

    @property
    def received(self) -> int:
        """Every line ever added (the view keeps only the newest `max_lines`)."""
        return self._seq

    def add_lines(self, node: str, lines: list[str]) -> list[LogEntry]:
        """Append a batch; returns the new entries (with their line numbers).

        Per line only what filtering needs happens here (cleaning); the level colour is
        worked out when a line is first drawn: under a flood most lines never are.
        """
        first_seq = self._seq + 1
        new = [LogEntry(seq, node, clean(raw)) for seq, raw in enumerate(lines, first_seq)]
        if not new:
            return new
        self._seq += len(new)
        self._sources[node] = None
        self.entries.extend(new)
        overflow = len(self.entries) - self.max_lines
        if overflow > 0 and overflow >= max(1, self.max_lines // 20):  # prune in chunks
            del self.entries[:overflow]
            first = self.entries[0].seq
            cut = bisect_left(self.view, first, key=lambda e: e.seq)
            del self.view[:cut]
            if cut and not self.following:
                # keep the lines the operator is reading in view (and scrolled up: the view
                # would otherwise be clamped to its new end, and pinned there again)
                self.set_scroll(None, max(0, self.scroll_y - cut))
        filtering = self.filter_text or self.findings_only or self.node_filter is not None
        shown = [e for e in new if self._passes(e)] if filtering else new
        self.view.extend(shown)
        self._width = max(self._width, max(min(len(e.text), RENDER_MAX) for e in new) + 4)
        if shown and not self.following:
            self.new_lines += len(shown)
        # On screen at once after a quiet spell, then at most every SYNC_INTERVAL while
        # lines keep coming: a flood would otherwise cost a layout and a repaint of the
        # pane per batch, and leave the keys waiting behind them.
        # Due within a frame (a flood): at the screen's next frame tick, before the frame is
        # worked out, not on a timer of its own that lands anywhere between two ticks and
        # leaves the lines a frame longer off screen (2k lines/s: 9 ms median to the sync,
        # then 5 ms to the frame). Not beyond two pane-heights a frame (20k lines/s), where no
        # line can be read anyway: there the sync in the tick made each frame longer and the
        # keys waited (key-to-render median 37 -> 82 ms). A flood syncs at the tick even where
        # the pane's rows would allow a longer wait (the log full screen, 55 rows: 22 ms at
        # 2k lines/s): on its own timer the sync came late under load, a frame later on
        # screen, and lines passed unseen (median 28 -> 17 ms, unseen 11/28 -> 3/75 marked
        # lines).
        self._arrived += len(shown)
        if self._sync_timer is None and not self._frame_sync:
            wait = self._synced_at + self.sync_interval() - time.monotonic()
            if wait <= 0:
                self._sync()
            elif (
                (wait <= self.SYNC_MIN or self.sync_interval() < self.SYNC_INTERVAL)
                and self._rate * self.SYNC_MIN <= 2 * max(1, self.size.height)
                and before_next_frame(self.screen, self._sync)
            ):
                self._frame_sync = True
                self.refresh()
            else:
                self._sync_timer = self.set_timer(wait, self._sync)
        return new

    def sync_interval(self) -> float:
        """How long lines may wait before they are put on screen (see SYNC_INTERVAL)."""
        if not self.following or self._rate <= 0:
            return self.SYNC_INTERVAL
        rows = max(1, self.size.height)
        return min(self.SYNC_INTERVAL, max(self.SYNC_MIN, 0.8 * rows / self._rate))

    def _sync(self) -> None:
        """Show what add_lines appended: size, scroll to the newest line, repaint."""
        if self._sync_timer is not None:
            self._sync_timer.stop()
            self._sync_timer = None
        if self._frame_sync:
            self._frame_sync = False
            screen = self.screen
            if isinstance(screen, FrameScreen):
                screen.cancel_before_frame(self._sync)
        now = time.monotonic()
        period = now - self._synced_at
        # a quiet spell (or the first sync) says nothing about a flood's rate
        self._rate = self._arrived / period if 0 < period < 1.0 else 0.0
        self._arrived = 0
        self._synced_at = now
        self._grow(Size(self._width, len(self.view)))
        if self.following:
            self._follow()
        self.refresh()
        self.post_message(self.Scrolled())

    def _follow(self) -> None:
        """Scroll a followed view to its newest lines - or, when a few more lines came since
        the last sync than the pane has rows, to the oldest of them not shown yet, and to the
        rest at the next frame: every line is on screen at least once while the screen can
        carry the rate. (2k lines/s into 39 rows: 40 lines came between some frames, and the
        first of them never reached the terminal; 1-6 of 25 marked lines in the bench.)
        Further behind than a pane's height, it jumps to the end: those lines pass unseen."""
        rows = max(1, self.size.height)
        end_top = max(0, len(self.view) - rows)
        top = end_top
        if self._unseen is not None:
            first = bisect_left(self.view, self._unseen, key=lambda e: e.seq)
            if first < end_top <= first + rows:
                top = first
        if top < end_top and before_next_frame(self.screen, self._catch_up):
            self._behind = True
            self.scroll_to(y=top, animate=False, immediate=True, force=True)
            self.call_after_refresh(self.refresh)  # a frame after this one, for the rest
        else:
            # now (the next frame shows the newest line) and, if the layout that comes with
            # the new size moved the end, once more after it; never a plain deferred
            # scroll_end: it would land after a PageUp pressed meanwhile and pin the view
            # again. force: the first overflow's scrollbar only comes with that layout.
            self._behind = False
            self.scroll_end(animate=False, x_axis=False, immediate=True, force=True)
            self.call_after_refresh(self._settle)

    def _catch_up(self) -> None:
        """The next frame of a view that showed older lines first: the rest of them."""
        if self._behind and self.following:
            self._follow()
            self.refresh()
            self.post_message(self.Scrolled())

    def _grow(self, size: Size) -> None:
        """Set the scrollable size without laying the whole screen out again.

        Setting `virtual_size` asks for a layout of the screen, and a layout repaints every
        widget on it, at every sync of a followed log (a frame under 2k lines/s: 23.3 ms
        median with it, 19.3 ms without, on the 2-core test machine).
        Only this view and its scrollbars change when lines come, so the size is set
        without that (`set_reactive`) and the scrollbars are updated in place; a scrollbar
        that comes or goes still lays the screen out (its `show_*` reactive does).
        """
        if size == self.virtual_size:
            return
        self.set_reactive(LogView.virtual_size, size)
        self._scroll_update(size)
        self.refresh()

    def _settle(self) -> None:
        if self.following and not self._behind and self.scroll_y != self.max_scroll_y:
            self.scroll_end(animate=False, x_axis=False, immediate=True, force=True)

    def on_resize(self, _: events.Resize) -> None:
        # fewer rows (a finding came and the findings box grew, the terminal shrank): the
        # old offset would leave the newest lines below the pane's edge
        if self.following:
            self.call_after_refresh(self._settle)

    def entry(self, seq: int) -> LogEntry | None:
        if not self.entries:
            return None
        i = seq - self.entries[0].seq
        if 0 <= i < len(self.entries) and self.entries[i].seq == seq:
            return self.entries[i]
        return None

    def mark(self, seq: int, severity: str, finding_id: str) -> bool:
        """Mark a line as matched by a finding (it keeps the worst severity)."""
        e = self.entry(seq)
        if e is None:
            return False
        rank = {"error": 0, "warning": 1, "info": 2}
        if e.finding is None or rank.get(severity, 3) < rank.get(e.finding, 3):
            e.finding, e.finding_id = severity, finding_id
        if self.findings_only:
            self.rebuild()
        else:
            self.refresh()
        return True

    def rebuild(self) -> None:
        """Re-apply filter and findings-only to every buffered line."""
        self.view = [e for e in self.entries if self._passes(e)]
        self.virtual_size = Size(self._width, len(self.view))
        self.new_lines = 0
        self._unseen, self._behind = None, False
        if self.following:
            self.scroll_end(animate=False, x_axis=False)
        self.refresh()
        self.post_message(self.Scrolled())

    @property
    def following(self) -> bool:
        """New lines scroll into view (not paused, not scrolled up)."""
        return self.follow and self.pinned

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip().lower()
        self.rebuild()

    def set_findings_only(self, on: bool) -> None:
        self.findings_only = on
        self.rebuild()

    @property
    def sources(self) -> list[str]:
        """The nodes whose lines the view has received, in the order they first came."""
        return list(self._sources)

    def set_node_filter(self, node: str | None) -> None:
        self.node_filter = node
        self.rebuild()

    def show_line(self, seq: int) -> bool:
        """Scroll so that line `seq` is in view (pausing the follow there); False when the
        line is not in the view (gone from the buffer, or filtered out)."""
        i = bisect_left(self.view, seq, key=lambda e: e.seq)
        if i >= len(self.view) or self.view[i].seq != seq:
            return False
        self.follow = False
        self.pinned = False
        self.scroll_to(y=max(0, i - 3), animate=False, immediate=True)
        self.post_message(self.Scrolled())
        return True

    def set_follow(self, on: bool) -> None:
        self.follow = on
        if on:
            self.pinned = True
            self.new_lines = 0
            self._unseen, self._behind = None, False
            self.scroll_end(animate=False, x_axis=False)
        self.post_message(self.Scrolled())

    def visible_text(self) -> str:
        """The lines in view (after filter), for copy and save."""
        return "\n".join(e.text for e in self.view)

    # ------------------------------------------------------------------ scrolling

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if not self.pinned and new_value >= self.max_scroll_y:
            self.pinned = True  # the operator scrolled back down to the newest line
            if self.follow:
                self.new_lines = 0
        self.post_message(self.Scrolled())

    def _unpin(self) -> None:
        if self._sync_timer is not None or self._frame_sync:
            # lines not on screen yet change where the end is: show them first, or the
            # scroll below starts from a stale end and the next size change clamps it
            self._sync()
        self._unseen, self._behind = None, False
        if self.max_scroll_y > 0:
            self.pinned = False

    # Scrolling up is not animated: an animation lands on the position worked out when the
    # key was pressed, and under a flood the pane prunes lines meanwhile (its end moves up);
    # the late landing would be clamped to the end and pin the view there again.

    def action_scroll_up(self) -> None:
        self._unpin()
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self.scroll_up(animate=False)

    def action_page_up(self) -> None:
        self._unpin()
        if not self.allow_vertical_scroll:
            raise SkipAction()
        self.scroll_page_up(animate=False)

    def action_scroll_home(self) -> None:
        self._unpin()
        if not self._allow_scroll:
            raise SkipAction()
        self.scroll_home(animate=False, x_axis=self.scroll_y == 0)

    def _on_mouse_scroll_up(self, event) -> None:
        self._unpin()
        super()._on_mouse_scroll_up(event)

    def action_scroll_end(self) -> None:
        self.set_follow(True)

    # ------------------------------------------------------------------ rendering

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rows.clear()
        self._base = None

    def _style(self, e: LogEntry) -> Style:
        if e.finding:
            return self.get_component_rich_style(f"logview--finding-{e.finding}")
        if e.level is None:
            e.level = level_of(e.text)
        if e.level:
            return self.get_component_rich_style(f"logview--{e.level}")
        return NULL_STYLE

    def _segments(self, e: LogEntry, base: Style | None) -> tuple[list[Segment], int]:
        """The line's segments (marker, node, text: plain text, never markup), each style
        on top of `base`; and their width in cells."""
        text = e.text if len(e.text) <= RENDER_MAX else e.text[:RENDER_MAX] + " …"
        parts: list[tuple[str, Style | None]] = [
            ("▶ " if e.finding else "  ", self._style(e) if e.finding else None)
        ]
        if len(self._sources) > 1:
            parts.append((f"{e.node} ", self.get_component_rich_style("logview--node")))
        parts.append((text, self._style(e)))
        if base:
            parts = [(t, base + st if st else base) for t, st in parts]
        return [Segment(t, st) for t, st in parts], sum(cell_len(t) for t, _ in parts)

    def _strip(self, e: LogEntry) -> Strip:
        """One line as its own strip (without the view's style)."""
        return Strip(*self._segments(e, None))

    def _plain(self) -> bool:
        """No border, padding, outline, tint, hatch or opacity: nothing for Textual's styles
        cache to add around a row (app.tcss gives the view none)."""
        st = self.styles
        return (
            not any(st.gutter)
            and not any(edge for edge, _ in st.outline)
            and not st.tint.a
            and st.text_opacity == 1.0
            and self.opacity == 1.0
            and not (st.has_rule("hatch") and st.hatch != "none")
        )

    def render_lines(self, crop: Region) -> list[Strip]:
        """The rows of `crop`, from the row cache, through the app's line filters.

        Textual's styles cache re-draws each row around `render_line` (borders, padding,
        tint, opacity: none here) and makes a new strip of it, so a followed flood, where
        every visible row is new at each frame, paid that twice per row (2k lines/s: 5.4 ms
        of an 8.9 ms frame in the view). A view with any of those styles goes through it.
        """
        if not self._plain():
            return super().render_lines(crop)
        _, background = self.background_colors
        filters = self.get_line_filters()
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        strips = []
        for y in crop.line_range:
            strip = self._row(scroll_y + y, scroll_x, width)
            for f in filters:
                strip = strip.apply_filter(f, background)
            strips.append(strip)
        self._drawn(scroll_y + crop.bottom - 1)
        x1, x2 = crop.column_span
        if (x1, x2) != (0, width):
            strips = [s.crop(x1, x2) for s in strips]
        return strips

    def _drawn(self, index: int) -> None:
        """Row `index` of the view went to the screen: what `_follow` catches up from."""
        index = min(index, len(self.view) - 1)
        if index >= 0:
            after = self.view[index].seq + 1
            if self._unseen is None or after > self._unseen:
                self._unseen = after

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        self._drawn(scroll_y + y)
        return self._row(scroll_y + y, scroll_x, self.size.width)

    def _row(self, index: int, scroll_x: int, width: int) -> Strip:
        """Line `index` of the view as drawn: the view's style, cropped to its width."""
        if self._base is None:
            self._base = self.rich_style
        base = self._base
        if index >= len(self.view):
            return Strip.blank(width, base)
        e = self.view[index]
        key = (e.seq, e.finding, scroll_x, width)
        row = self._rows.get(key)
        if row is None:
            segments, cells = self._segments(e, base)
            last = segments[-1]
            over = cells - width
            if scroll_x == 0 and over <= 0:  # the usual row: padded, one strip
                if over:
                    segments.append(Segment(" " * -over, base))
                row = Strip(segments, width)
            elif scroll_x == 0 and over < len(last.text) and last.text.isascii():
                # wider than the view: an ASCII text is one cell per character, cut it
                segments[-1] = Segment(last.text[: len(last.text) - over], last.style)
                row = Strip(segments, width)
            else:
                row = Strip(segments, cells).crop_extend(scroll_x, scroll_x + width, base)
            self._rows[key] = row
        return row


class LogPane(Vertical):
    """The log view, its status line and the `/` filter input."""

    def __init__(self, source: str, max_lines: int = 20000) -> None:
        super().__init__(id="log-pane")
        self.border_title = f"log · {source}"
        self._max_lines = max_lines
        self._stream = ""  # the follower's last word about the stream itself
        self._stream_bad = False
        self._status_key: tuple | None = None  # what the status line shows, but the count
        self._status_at = 0.0
        self._status_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield LogView(self._max_lines)
        yield Static("", id="log-status", markup=False)
        yield Input(placeholder="filter the log (Enter keeps it, Esc clears)", id="log-filter")

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def on_mount(self) -> None:
        self.query_one("#log-filter", Input).display = False
        self.update_status()

    def on_log_view_scrolled(self, _: LogView.Scrolled) -> None:
        self.update_status()

    # A followed flood changes only the line count, at every frame (2k lines/s: 1.1 ms of a
    # 9.9 ms frame redrawing this one row, twice): the count may lag by this much then.
    STATUS_EVERY = 0.25

    def update_status(self) -> None:
        """Redraw the status line: at once when anything but the line count changed, at most
        every STATUS_EVERY seconds when only the count did."""
        v = self.view
        parts: list[str | tuple[str, str]] = []
        if v.following:
            parts.append(("● follow", "$node-ok"))
        else:
            parts.append(("❚❚ paused", "$log-warning"))
        parts.append(("  ", ""))
        count = len(parts)
        parts.append((f"{len(v.entries)} lines", "$muted"))
        if self._stream:
            parts += ["  ", (self._stream, "bold $log-warning" if self._stream_bad else "$muted")]
        if v.filter_text:
            parts += [
                "  filter ",
                (repr(v.filter_text), "bold"),
                (f" {len(v.view)} match", "$muted"),
            ]
        if v.findings_only:
            parts += ["  ", ("findings only", "bold $crash")]
        if v.node_filter is not None:
            parts += ["  node ", (v.node_filter, "bold"), (" (n: next)", "$muted")]
        if v.new_lines:
            parts += [
                "  ",
                (f"↓ {v.new_lines} new lines", "reverse $log-warning"),
                (" (End)", "$muted"),
            ]
        key = tuple(parts[:count] + parts[count + 1 :])
        now = time.monotonic()
        if key == self._status_key and now - self._status_at < self.STATUS_EVERY:
            if self._status_timer is None:
                wait = self.STATUS_EVERY - (now - self._status_at)
                self._status_timer = self.set_timer(wait, self._status_due)
            return
        if self._status_timer is not None:
            self._status_timer.stop()
            self._status_timer = None
        self._status_key, self._status_at = key, now
        # one row high (app.tcss): a new text never changes the layout
        self.query_one("#log-status", Static).update(Content.assemble(*parts), layout=False)

    def _status_due(self) -> None:
        self._status_timer = None
        self._status_key = None
        self.update_status()

    def set_stream_state(self, event: str) -> None:
        """Show what the follower last said about the stream (lost, resumed, rotated...)."""
        self._stream = clean(event)[:160]
        self._stream_bad = stream_trouble(event)
        self.update_status()

    def open_filter(self) -> None:
        box = self.query_one("#log-filter", Input)
        box.display = True
        box.value = self.view.filter_text
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.view.set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.view.set_filter(event.value)
        if not event.value:
            event.input.display = False
        self.view.focus()

    def on_key(self, event) -> None:
        box = self.query_one("#log-filter", Input)
        if event.key == "escape" and box.has_focus:
            event.stop()
            box.value = ""
            self.view.set_filter("")
            box.display = False
            self.view.focus()

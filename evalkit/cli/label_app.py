"""The full-screen labeler: a Textual app that draws a LabelSession and maps keys to it.

All state and every edit live in `evalkit.authoring.labeler.LabelSession`; this module only renders
and dispatches. Imported only when `label_eval.py` runs without a mode (textual is heavy).
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, OptionList, Static

from evalkit.authoring.labeler import LabelSession, question_words, retrieve

HELP = """\
up/down  move between retrieved chunks
space    toggle the chunk as a gold support (anchor: rel_path + heading_path)
d        store the chunk's support one heading level up (not above the top heading)
s        add a snippet: pick a sentence of the chunk (best match to the question first)
o        show the whole note section of the chunk
u        mark the case unanswerable (clears supports); again: answerable
g        toggle one required support group of all the case's supports (multi-hop AND)
n / p    next / previous case
w        save          q  save and quit          ?  this help
"""


class _Pane(VerticalScroll, can_focus=False):
    """A scrolling pane that never takes focus, so up/down/space reach the app's bindings."""


class TextScreen(ModalScreen[None]):
    """A scrollable text (help, note section); escape / q / enter closes it."""

    BINDINGS = [Binding("escape,q,enter,o,question_mark", "dismiss", "close")]

    def __init__(self, title: str, body: str):
        super().__init__()
        self._title, self._body = title, body

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="text"):
            yield Static(Text(self._title, style="bold"))
            yield Static(Text(self._body))

    async def action_dismiss(self, result: Any = None) -> None:
        self.dismiss(None)


class SnippetScreen(ModalScreen[str | None]):
    """Pick one sentence of the chunk as a snippet; enter picks, escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, choices: list[str]):
        super().__init__()
        self._choices = choices

    def compose(self) -> ComposeResult:
        yield Static("snippet: enter picks, escape cancels")
        yield OptionList(*[escape(c) for c in self._choices], id="snippets")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self._choices[event.option_index])

    def action_cancel(self) -> None:
        self.dismiss(None)


class LabelApp(App[None]):
    """Draws `session`; asks `target` for each case's top `k` chunks when first shown.

    It fits an 80x24 terminal: the case pane takes at most a third of the height, the chunk
    list twice the room of the chunk text (at least 3 chunks), and the footer (compact, no
    command palette) names only the keys that fit in 80 columns; `?` lists them all.
    """

    ENABLE_COMMAND_PALETTE = False  # its ctrl+p entry would cut the footer, and it has nothing to offer here
    CSS = """
    #case { height: auto; max-height: 33%; border: round $accent; }
    #chunks { height: 2fr; min-height: 5; border: round $primary; }
    #detail { height: 1fr; min-height: 3; border: round $secondary; }
    #status { height: 1; }
    """
    BINDINGS = [
        Binding("up", "move(-1)", "up", show=False),
        Binding("down", "move(1)", "down", show=False),
        Binding("space", "toggle", "select"),
        Binding("d", "shallower", "depth"),
        Binding("s", "snippet", "snippet"),
        Binding("o", "section", "section", show=False),
        Binding("u", "unanswerable", "unanswerable"),
        Binding("g", "group", "group", show=False),
        Binding("n", "next", "next"),
        Binding("p", "prev", "prev", show=False),
        Binding("w", "save", "save"),
        Binding("q", "quit_saving", "save+quit"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, session: LabelSession, target: Any, k: int):
        super().__init__()
        self.session, self.target, self.k = session, target, k
        self.status = ""
        self.saved_to: Any = None

    def compose(self) -> ComposeResult:
        yield Static(id="case")
        with _Pane(id="chunks"):
            yield Static(id="chunk-list")
        with _Pane(id="detail"):
            yield Static(id="chunk-text")
        yield Static(id="status")
        footer = Footer(show_command_palette=False)
        footer.compact = True  # a reactive (not an argument) in textual 0.80
        yield footer

    async def on_mount(self) -> None:
        await self._load()

    async def on_unmount(self) -> None:
        await self.target.aclose()

    @property
    def loaded(self) -> bool:
        """The current case's chunks have arrived (tests wait on this)."""
        return self.session.case.chunks is not None

    async def _load(self) -> None:
        self.status = "asking the target..."
        self.refresh_view()
        self.run_worker(self._fetch(), exclusive=True, group="fetch")

    async def _fetch(self) -> None:
        await retrieve(self.session, self.target, self.k)
        self.status = self.session.case.error or ""
        self.refresh_view()

    # ------------------------------------------------------------------ drawing

    def refresh_view(self) -> None:
        s = self.session
        st = s.case
        obj = st.obj
        head = Text()
        head.append(f"[{s.index + 1}/{len(s.case_ids)}] {st.case_id}", style="bold")
        head.append(f"  answerable={str(obj.get('answerable')).lower()}" + ("  *changed" if st.changed else ""))
        for message in (obj.get("conversation") or {}).get("history") or []:
            # A conversation's turn: the turns before it, as the chatbot is sent them.
            said = message.get("content") or "(no expected_answer)"
            head.append(f"\n  {'you' if message.get('role') == 'user' else 'bot'}: {said[:200]}", style="dim")
        head.append(f"\n{obj.get('question', '')}\n", style="bold yellow")
        for i, sup in enumerate(s.supports):
            snips = "; ".join(sup.get("snippets", []))
            head.append(f"  [{i}] {sup.get('rel_path')} > {sup.get('heading_path') or '(whole file)'}" + (f"  snippets: {snips}" if snips else "") + "\n")
        if not s.supports:
            head.append("  (no gold supports)\n", style="dim")
        if obj.get("required_support_groups"):
            head.append(f"  groups: {obj['required_support_groups']}\n")
        self.query_one("#case", Static).update(head)

        # One line per chunk (long paths end in …), so line n is chunk n and the pane can
        # keep the cursor in view. Rows are cut to the pane's width here: newer textual
        # wraps a Static's Text whatever its no_wrap says, and at 80 columns a wrapped row
        # pushed the next chunks out of the pane.
        pane = self.query_one("#chunks", _Pane)
        width = pane.scrollable_content_region.width
        listing = Text(no_wrap=True, overflow="ellipsis")
        if st.chunks is None:
            listing.append("retrieving...", style="dim")
        for pos, c in enumerate(st.chunks or []):
            mark = "x" if s.support_for(pos) is not None else " "
            cur = ">" if pos == s.cursor else " "
            score = c.get("score_final")
            lines = f"{c.get('start_line')}-{c.get('end_line')}" if c.get("start_line") else "-"
            row = f"{cur}[{mark}] {c['rank']:>2} {c.get('rel_path')}  {c.get('heading_path') or ''}  L{lines}  " + (f"{score:.3f}" if isinstance(score, (int, float)) else "")
            line = Text(row)
            if width > 1:
                line.truncate(width, overflow="ellipsis")
            line.stylize("reverse" if pos == s.cursor else "")
            if pos:
                listing.append("\n")
            listing.append_text(line)
        self.query_one("#chunk-list", Static).update(listing)
        visible = max(1, pane.scrollable_content_region.height)
        if not pane.scroll_y <= s.cursor < pane.scroll_y + visible:
            pane.scroll_to(y=max(0, s.cursor - visible // 2), animate=False)

        chunk = s.chunk()
        body = Text((chunk.get("text") or "") if chunk else "")
        words = question_words(obj.get("question", ""))
        if words:
            body.highlight_words(words, style="bold magenta", case_sensitive=False)
        self.query_one("#chunk-text", Static).update(body)
        self.query_one("#status", Static).update(Text(self.status))

    def on_resize(self) -> None:
        self.call_after_refresh(self.refresh_view)  # rows are cut to the new width once laid out

    def _after(self, status: str = "") -> None:
        self.status = status
        self.refresh_view()

    # ------------------------------------------------------------------ actions

    def action_move(self, delta: int) -> None:
        self.session.move(delta)
        self._after()

    def action_toggle(self) -> None:
        self.session.toggle()
        self._after()

    def action_shallower(self) -> None:
        self.session.shallower()
        self._after()

    def action_unanswerable(self) -> None:
        self.session.unanswerable()
        self._after()

    def action_group(self) -> None:
        self.session.group()
        self._after("group toggled" if len(self.session.supports) >= 2 else "a group needs two or more supports")

    def action_snippet(self) -> None:
        choices = self.session.snippet_choices()
        if not choices:
            self._after("no text to take a snippet from")
            return
        pos = self.session.cursor

        def picked(text: str | None) -> None:
            if text:
                self.session.add_snippet(text, pos)
            self._after()

        self.push_screen(SnippetScreen(choices), picked)

    def action_section(self) -> None:
        c = self.session.chunk()
        if c is not None:
            self.push_screen(TextScreen(f"{c.get('rel_path')} > {c.get('heading_path') or ''}", self.session.section_text()))

    def action_help(self) -> None:
        self.push_screen(TextScreen("keys", HELP))

    async def action_next(self) -> None:
        if self.session.next():
            await self._load()
        else:
            self._after("last case (q saves and quits)")

    async def action_prev(self) -> None:
        if self.session.prev():
            await self._load()
        else:
            self._after("first case")

    def _save(self) -> bool:
        from evalkit.errors import InputError

        try:
            written = self.session.save()
        except InputError as e:
            self._after("not saved: " + "; ".join(str(p) for p in e.problems))
            return False
        if written is not None:
            self.saved_to = written
        self._after(f"saved {written}" if written else "nothing to save")
        return True

    def action_save(self) -> None:
        self._save()

    def action_quit_saving(self) -> None:
        if self._save():
            self.exit()

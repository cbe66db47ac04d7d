"""MTRAG's generation tasks -> conversations (`turns`) + a notes folder of their passages (`--format mtrag`).

MTRAG (IBM mt-rag-benchmark, `generation_tasks/reference.jsonl`) holds one task per line:
`conversation_id`, `turn` (1-based), `input` (the conversation so far: user and agent messages
alternating, the last one the turn's question), `contexts` (the gold passages: `document_id`
`<document>-<start>-<end>`, `text`, sometimes `title`), `targets` (the reference answer),
`answerability`, `Multi-Turn`, `Question Type`, `Collection`. docs/interop.md ("Coming from
MTRAG") states the mapping; in short:

- One eval-set line per `conversation_id`, in the order conversations first appear: `id` =
  the conversation id, `domain` = its Collection, `tags` = `mtrag`, `mtrag:<collection>` and
  the `--tag`s. Its turns are 1 .. the highest task turn.
- A turn with a task: `question` = the last message of `input`, `expected_answer` = the first
  target's text, `follow_up` = `Multi-Turn` lower-cased (`follow-up`, `clarification`; none
  for `N/A`), `category` from the first Question Type (`CATEGORY_OF`), tags
  `mtrag:<answerability>` and `qtype:<type>` per type, `mtrag` = the task's own labels
  (task_id, answerability, question types, passage ids), and by answerability:
  ANSWERABLE and PARTIAL -> `answerable: true`, one gold support per context (PARTIAL: the
  passages hold part of the answer; retrieving them is still what the turn needs, and an
  answer of what they hold is what MTRAG's reference gives); UNANSWERABLE -> `answerable:
  false`, no support (MTRAG gives none); UNDERSPECIFIED -> `answerable: false`, no support:
  the right reply asks the user what they mean (MTRAG's reference does), which evalkit's
  abstention scoring counts as not answering; the passages some of them carry stay in the
  notes and in `mtrag.document_ids`, outside the scored supports.
- A turn without a task (known only from a later task's `input`): `question` and
  `expected_answer` = that user message and the agent's reply after it, `answerable: true`
  (the agent answered it), no gold support and the tag `no-gold`: evalkit scores it
  `unlabeled` (retrieval metrics null, outside every recall average); it is asked, so the
  turns after it get their history.
- A gold support is an anchor: `{"rel_path": "<collection>/<document>.md", "heading_path":
  "# <document_id>"}`.

The notes: one per source document and collection, `<collection>/<document>.md` (each part
`beir.note_path`'s slug), YAML front matter (`mtrag_document`, `collection`, `title` when a
passage has one; not indexed), then each passage, in offset order, under its own heading
`# <document_id>` and a blank line. The passage text is escaped so Markdown keeps it one
paragraph run under its heading (`escape_passage`); `convert` reads every note back with
evalkit's Markdown reader and refuses one whose headings are not exactly its passages.
Each note travels on the first conversation that cites it (`ImportedCase.files`). A passage id
given twice with two texts keeps its first, with a warning (its anchor holds either way).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import InputError, Problem
from evalkit.interop.importers.base import ImportedCase, ImportOptions, jsonl_items
from evalkit.interop.importers.beir import note_path

__all__ = ["ANSWERABLE", "CATEGORY_OF", "convert", "escape_passage", "note_of", "passage_heading"]

# MTRAG answerability -> evalkit's `answerable` (the module docstring says why).
ANSWERABLE = {"ANSWERABLE": True, "PARTIAL": True, "UNANSWERABLE": False, "UNDERSPECIFIED": False}
# MTRAG Question Type -> evalkit category; any other type -> the --category option.
CATEGORY_OF = {"Factoid": "factual", "Keyword": "factual", "Comparative": "reasoning", "Composite": "multi_hop"}
_FOLLOW_UP = {"Follow-up": "follow-up", "Clarification": "clarification", "N/A": None}
_PASSAGE_ID = re.compile(r"(.+)-(\d+)-(\d+)")
# A line start that could open a block other than a paragraph (ATX heading, setext underline,
# thematic break, list, blockquote, fence, HTML block, link reference definition, table):
# a backslash before its first character makes it text.
_BLOCK_START = re.compile(r"^( {0,3})([#=\-*+_>`~<\[|])")
_ORDERED = re.compile(r"^( {0,3}\d{1,9})([.)])")
_COMMENT = re.compile(r"(?<=%)%")  # Obsidian `%%comment%%`: every `%` after a `%` escaped
_MAX_PROBLEMS = 200


def escape_passage(text: str) -> str:
    """A passage as Markdown that reads back as its own text, under the heading before it.

    Line ends become `\\n`; blank lines at either end go. On each line, a backslash goes
    before a first character (after up to 3 spaces) that could open a heading, setext
    underline, thematic break, list, blockquote, code fence, HTML block, link reference
    definition or table, and before each `%` that follows a `%` (an Obsidian comment would
    hide the headings after it). Such a line is then paragraph text; a line indented 4 or
    more is a paragraph's continuation or an indented code block, neither of which holds a
    heading. Inline markup (emphasis, links) is left as written: it changes how the text
    renders, not which words it holds or where its sections are.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").strip("\n").split("\n")
    out = []
    for line in lines:
        line = _COMMENT.sub(r"\\%", line)
        line = _BLOCK_START.sub(r"\1\\\2", line)
        out.append(_ORDERED.sub(r"\1\\\2", line))
    return "\n".join(out)


def passage_heading(document_id: str) -> str:
    """The heading path of a passage in its note: `# <document_id>` (whitespace collapsed)."""
    return "# " + " ".join(document_id.split())


def note_of(collection: str, document_id: str) -> str:
    """The note path of a passage: `<collection>/<document>.md`, the document being the
    passage id without its `-<start>-<end>` offsets."""
    m = _PASSAGE_ID.fullmatch(document_id)
    document = m.group(1) if m else document_id
    return f"{note_path(collection)[:-3]}/{note_path(document)}"


@dataclass
class _Passage:
    document_id: str
    text: str
    title: str | None
    where: str  # file:line of the first task giving it


@dataclass
class _Note:
    collection: str
    document: str
    passages: dict[str, _Passage] = field(default_factory=dict)


@dataclass
class _Task:
    path: Path
    line: int
    turn: int
    item: dict[str, Any]
    messages: list[tuple[str, str]]  # (speaker, text) of `input`


def convert(paths: Sequence[Path], options: ImportOptions) -> list[ImportedCase]:
    """Every task of every file, grouped by conversation (see the module docstring).

    Raises:
        InputError: every problem of the files (`<file>:<line>: <field>: <message>`), or a
            note that would not read back as its passages.
    """
    problems: list[Problem] = []
    said: list[str] = []  # warnings of the whole import: the first case carries them
    conversations: dict[str, list[_Task]] = {}
    notes: dict[str, _Note] = {}
    for path in paths:
        for line, item in jsonl_items(path, problems, _add):
            task = _task(item, path, line, problems)
            if task is None:
                continue
            conversations.setdefault(item["conversation_id"], []).append(task)
            for ctx in item["contexts"]:
                _collect(notes, item["Collection"], ctx, f"{path}:{line}", problems, said)
    if problems:
        raise InputError(problems)
    texts = {rel: _note_text(note) for rel, note in notes.items()}
    for rel, text in texts.items():
        _check_note(rel, text, notes[rel], problems)
    if problems:
        raise InputError(problems)
    out: list[ImportedCase] = []
    placed: set[str] = set()
    for index, (cid, tasks) in enumerate(conversations.items()):
        case, cited = _conversation(cid, tasks, options, problems)
        if case is None:
            continue
        files = {rel: texts[rel] for rel in cited if rel not in placed}
        placed.update(files)
        first = min(tasks, key=lambda t: (str(t.path), t.line))
        warnings = tuple(f"{p.where}: passage {p.document_id!r} is empty; its heading has no text"
                         for rel in files for p in notes[rel].passages.values() if not p.text.strip())
        if not out:
            warnings = (*said, *warnings)
        out.append(ImportedCase(case, str(first.path), index, line=first.line, files=files, warnings=warnings))
    if problems:
        raise InputError(problems)
    return out


def _add(problems: list[Problem], problem: Problem) -> None:
    if len(problems) < _MAX_PROBLEMS:
        problems.append(problem)
    elif len(problems) == _MAX_PROBLEMS:
        problems.append(Problem(f"more than {_MAX_PROBLEMS} problems; stopped listing them", path=problem.path))


def _labels(item: dict[str, Any], key: str) -> list[str] | None:
    """A label field: MTRAG writes a list of strings (a bare string is taken too)."""
    value = item.get(key)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def _task(item: Any, path: Path, line: int, problems: list[Problem]) -> _Task | None:
    """The task on one line, or None with its problems filed."""
    def bad(field: str, message: str) -> None:
        _add(problems, Problem(message, path=str(path), line=line, field=field))

    if not isinstance(item, dict):
        bad("", f"expected a JSON object (an MTRAG task), got {type(item).__name__}")
        return None
    n0 = len(problems)
    cid = item.get("conversation_id")
    if not isinstance(cid, str) or not cid.strip():
        bad("conversation_id", f"expected a non-empty string, got {cid!r:.60}")
    raw_turn = item.get("turn")
    try:
        turn = int(raw_turn) if not isinstance(raw_turn, bool) else 0
    except (TypeError, ValueError):
        turn = 0
    if turn < 1:
        bad("turn", f"expected a turn number from 1, got {raw_turn!r:.60}")
    messages: list[tuple[str, str]] = []
    given = item.get("input")
    if not isinstance(given, list) or not given:
        bad("input", "expected the conversation so far: a non-empty list of {speaker, text}")
    else:
        for i, m in enumerate(given):
            speaker, text = (m.get("speaker"), m.get("text")) if isinstance(m, dict) else (None, None)
            want = "user" if i % 2 == 0 else "agent"
            if speaker != want or not isinstance(text, str) or not text.strip():
                bad(f"input[{i}]", f"expected a {want} message with a non-blank text, got {json.dumps(m)[:80]}")
                break
            messages.append((speaker, text))
        if turn >= 1 and len(messages) == len(given) and len(given) != 2 * turn - 1:
            bad("input", f"turn {turn} needs {2 * turn - 1} messages (user and agent alternating, the question last), "
                         f"got {len(given)}")
    contexts = item.get("contexts")
    if not isinstance(contexts, list):
        bad("contexts", f"expected a list of passages, got {type(contexts).__name__}")
    else:
        for i, ctx in enumerate(contexts):
            ok = isinstance(ctx, dict) and isinstance(ctx.get("document_id"), str) and ctx["document_id"].strip() \
                and isinstance(ctx.get("text"), str) and isinstance(ctx.get("title", ""), (str, type(None)))
            if not ok:
                bad(f"contexts[{i}]", f"expected {{document_id, text[, title]}} strings, got {json.dumps(ctx)[:80]}")
    targets = item.get("targets", [])
    if not isinstance(targets, list) or any(not isinstance(t, dict) or not isinstance(t.get("text", ""), str) for t in targets):
        bad("targets", "expected a list of {text}")
    answerability = _labels(item, "answerability")
    if not answerability or len(answerability) != 1 or answerability[0] not in ANSWERABLE:
        bad("answerability", f"expected one of {', '.join(ANSWERABLE)}, got {item.get('answerability')!r:.60}")
    multi = _labels(item, "Multi-Turn")
    if multi is not None and any(m not in _FOLLOW_UP for m in multi):
        bad("Multi-Turn", f"expected {', '.join(_FOLLOW_UP)}, got {multi!r:.60}")
    if item.get("Question Type") is not None and _labels(item, "Question Type") is None:
        bad("Question Type", "expected a list of strings")
    collection = item.get("Collection")
    if not isinstance(collection, str) or not collection.strip():
        bad("Collection", f"expected a non-empty string, got {collection!r:.60}")
    if len(problems) > n0:
        return None
    return _Task(path, line, turn, item, messages)


def _collect(notes: dict[str, _Note], collection: str, ctx: dict[str, Any], where: str, problems: list[Problem],
             warnings: list[str]) -> None:
    """File a task's gold passage under its note (a passage id given twice: its first text)."""
    pid = ctx["document_id"]
    rel = note_of(collection, pid)
    m = _PASSAGE_ID.fullmatch(pid)
    note = notes.setdefault(rel, _Note(collection, m.group(1) if m else pid))
    if note.collection != collection:  # two collection names with one slug
        _add(problems, Problem(f"collection {collection!r} and {note.collection!r} share the folder of {rel}",
                               path=where, field="Collection"))
        return
    title = ctx.get("title") or None
    seen = note.passages.get(pid)
    if seen is None:
        note.passages[pid] = _Passage(pid, ctx["text"], title, where)
    elif seen.text != ctx["text"]:  # the anchor still holds: the note keeps the first text, and says so
        warnings.append(f"{where}: passage {pid!r} has another text at {seen.where}; the note keeps that one")


def _offsets(pid: str) -> tuple[int, int, str]:
    m = _PASSAGE_ID.fullmatch(pid)
    return (int(m.group(2)), int(m.group(3)), pid) if m else (0, 0, pid)


def _note_text(note: _Note) -> str:
    """The note of one document (module docstring): front matter, then each passage under its heading."""
    title = next((p.title for p in note.passages.values() if p.title), None)
    front = [f"mtrag_document: {json.dumps(note.document, ensure_ascii=False)}",
             f"collection: {json.dumps(note.collection, ensure_ascii=False)}"]
    if title:
        front.append(f"title: {json.dumps(' '.join(title.split()), ensure_ascii=False)}")
    parts = ["---\n" + "\n".join(front) + "\n---\n"]
    for pid in sorted(note.passages, key=_offsets):
        body = escape_passage(note.passages[pid].text)
        parts.append(f"{passage_heading(pid)}\n\n{body}\n" if body else f"{passage_heading(pid)}\n")
    return "\n".join(parts)


def _check_note(rel: str, text: str, note: _Note, problems: list[Problem]) -> None:
    """Read the note back: its headings must be its passages' headings, in order, and nothing else."""
    from evalkit.evalset.anchors import normalize_heading_path
    from evalkit.notes.markdown import read_note

    got = [h.path for h in read_note(text).headings]
    want = [normalize_heading_path(passage_heading(pid)) for pid in sorted(note.passages, key=_offsets)]
    if [normalize_heading_path(g) for g in got] != want:
        where = next(iter(note.passages.values())).where
        _add(problems, Problem(f"the note {rel} would not read back as one section per passage "
                               f"(headings {got[:5]}...); a passage id or text this importer cannot escape",
                               path=where, field="contexts"))


def _conversation(cid: str, tasks: list[_Task], options: ImportOptions,
                  problems: list[Problem]) -> tuple[dict[str, Any] | None, list[str]]:
    """The eval-set line of one conversation and the notes its gold supports cite."""
    by_turn: dict[int, _Task] = {}
    for t in tasks:
        if t.turn in by_turn:
            first = by_turn[t.turn]
            _add(problems, Problem(f"conversation {cid!r} has turn {t.turn} twice (also {first.path}:{first.line})",
                                   path=str(t.path), line=t.line, field="turn"))
            return None, []
        by_turn[t.turn] = t
    latest = by_turn[max(by_turn)]  # its input holds every earlier turn
    collections = list(dict.fromkeys(t.item["Collection"] for t in tasks))
    turns: list[dict[str, Any]] = []
    cited: list[str] = []
    for n in range(1, latest.turn + 1):
        task = by_turn.get(n)
        if task is None:
            question, answer = latest.messages[2 * n - 2][1], latest.messages[2 * n - 1][1]
            turns.append({"question": question, "answerable": True, "expected_answer": answer,
                          "category": options.category, "tags": ["no-gold"]})
            continue
        turn, rels = _turn(task, options)
        cited += [r for r in rels if r not in cited]
        turns.append(turn)
    tags = list(dict.fromkeys(["mtrag", *(f"mtrag:{c}" for c in collections), *options.tags]))
    case: dict[str, Any] = {"id": cid, "tags": tags}
    if len(collections) == 1:
        case["domain"] = collections[0]
    case["turns"] = turns
    return case, cited


def _turn(task: _Task, options: ImportOptions) -> tuple[dict[str, Any], list[str]]:
    """One task's turn and the notes of its passages."""
    item = task.item
    label = _labels(item, "answerability")[0]
    types = _labels(item, "Question Type") or []
    multi = [m for m in (_labels(item, "Multi-Turn") or []) if _FOLLOW_UP.get(m)]
    passages = list(dict.fromkeys(c["document_id"] for c in item["contexts"]))
    rels = [note_of(item["Collection"], p) for p in passages]
    turn: dict[str, Any] = {"question": task.messages[-1][1], "answerable": ANSWERABLE[label]}
    if ANSWERABLE[label]:
        turn["gold_supports"] = [{"rel_path": r, "heading_path": passage_heading(p)} for p, r in zip(passages, rels)]
    targets = [t.get("text") for t in item.get("targets") or [] if t.get("text")]
    if targets:
        turn["expected_answer"] = targets[0]
    if multi:
        turn["follow_up"] = _FOLLOW_UP[multi[0]]
    turn["category"] = next((CATEGORY_OF[t] for t in types[:1] if t in CATEGORY_OF), options.category)
    turn["tags"] = list(dict.fromkeys([f"mtrag:{label.lower()}", *(f"qtype:{t.lower().replace(' ', '-')}" for t in types)]))
    turn["mtrag"] = {"task_id": item.get("task_id"), "answerability": label, "question_type": types,
                     "multi_turn": _labels(item, "Multi-Turn") or [], "document_ids": passages}
    return turn, rels

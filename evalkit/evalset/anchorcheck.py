"""Do an eval set's gold anchors exist in the corpus, and what is the closest real one?

One implementation for `evalkit validate`, the pre-run check of run_eval and the labeling
tool. A `Corpus` is what we know of the notes: built from a vault folder
(`corpus_from_vault`: files, heading chains and text, read by the one Markdown reader,
`evalkit.notes.markdown`, and cut into pieces by the reference chatbot's own chunker, so
heading paths are spelled as its chunks spell them) or from a plain file list
(`corpus_from_files`, `corpus_from_index_stats`: existence only). `check_anchors` returns
one located `Problem` per anchor that cannot match anything:

- `rel_path` not in the corpus (with the closest path: a case slip, a folder typo, a move);
- `heading_path` that is not a heading chain of the note, or a prefix of one (a gold heading
  path matches any chunk under it, at a heading boundary: anchors.py), with the closest chain;
- a snippet that does not occur in the section (the text under the heading path, its
  sub-sections included; the phrase rule, `anchors.normalize_phrase`, as anchors.py compares);
- a line span that runs past the end of the note.

`chunk_id` supports are checked only for their `rel_path`, when they carry one: chunk ids
depend on the target's chunker and vault id, which the corpus does not know.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalkit.errors import Problem
from evalkit.evalset.anchors import (
    heading_components,
    normalize_heading_path,
    normalize_phrase,
    normalize_rel_path,
)
from evalkit.evalset.load import EvalSet, read_eval_set
from evalkit.notes.markdown import Note, read_note
from evalkit.reference.chunker import ChunkerConfig, chunk_markdown
from evalkit.reference.corpus import MARKDOWN_SUFFIXES, walk_vault
from evalkit.schema import EvalCase

__all__ = [
    "AnchorIssue",
    "Corpus",
    "NoteOutline",
    "Validation",
    "check_anchors",
    "check_support",
    "corpus_from_files",
    "corpus_from_index_stats",
    "corpus_from_vault",
    "outline_note",
    "validate_eval_set",
]

Chain = tuple[str, ...]  # heading components, e.g. ("# A", "## B"); () = the whole file

# Suggestions: below these difflib ratios a "closest" path or heading is more confusing than none.
_PATH_CUTOFF = 0.6
_HEADING_CUTOFF = 0.6


@dataclass(frozen=True)
class NoteOutline:
    """The heading structure and text of one markdown note, as the reference chunker sees it.

    Attributes:
        rel_path: the note's path relative to the vault root.
        n_lines: number of lines in the file (front matter included).
        spans: every heading chain, and every prefix of one, -> the 1-based inclusive line
            range of its indexed text (sub-sections included), in file order; `()` is the
            whole file. Front matter is not in any span (the chatbot does not index it).
        pieces: (chain, start_line, end_line) of every chunk and skipped piece, in file order.
        lines: the file's lines, decoded as UTF-8 (bad bytes replaced).
        note: what the Markdown reader found (headings, code and comment lines, ...); None
            only for outlines built by hand.
    """

    rel_path: str
    n_lines: int
    spans: dict[Chain, tuple[int, int]]
    pieces: tuple[tuple[Chain, int, int], ...]
    lines: tuple[str, ...]
    _texts: dict[Chain, str] = field(default_factory=dict, repr=False, compare=False)
    note: Note | None = field(default=None, repr=False, compare=False)

    @property
    def chains(self) -> list[str]:
        """Every heading chain and prefix, normalized ("# A > ## B"), in file order; "" first."""
        return [" > ".join(c) for c in self.spans]

    def find_chain(self, heading_path: str | None, *, case_sensitive: bool = True) -> Chain | None:
        """The note's chain equal to `heading_path` (normalized), or None when it has none."""
        gold = heading_components(heading_path)
        if gold in self.spans:
            return gold
        if not case_sensitive:
            folded = tuple(c.casefold() for c in gold)
            for chain in self.spans:
                if tuple(c.casefold() for c in chain) == folded:
                    return chain
        return None

    def section_text(self, chain: Chain) -> str:
        """Snippet-comparison form (normalize_phrase) of the text under `chain`."""
        if chain not in self._texts:
            start, end = self.spans.get(chain, (1, 0))
            self._texts[chain] = normalize_phrase("\n".join(self.lines[start - 1 : end]))
        return self._texts[chain]

    def where_is(self, snippet: str) -> Chain | None:
        """The chain of the first piece whose text holds `snippet`, or None."""
        needle = normalize_phrase(snippet)
        for chain, start, end in self.pieces:
            if needle in normalize_phrase("\n".join(self.lines[start - 1 : end])):
                return chain
        return None


def outline_note(data: bytes, rel_path: str, config: ChunkerConfig | None = None) -> NoteOutline:
    """Parse one markdown note into its heading chains and section spans.

    The note is read once (`read_note`: CommonMark, so a `#` line inside a code block or an
    HTML block, or a heading inside an Obsidian comment, is no heading) and cut by the
    reference chunker; heading chains come from its chunks and skipped pieces, plus every
    prefix of each: a parent heading with no text of its own is still a valid anchor.

    Args:
        data: the file's bytes.
        rel_path: the note's path relative to the vault root.
        config: chunker parameters (they decide the pieces, never the headings).

    Returns:
        The note's outline.
    """
    note = read_note(data)
    doc = chunk_markdown(data, rel_path, config=config, note=note)
    raw = [(c.heading_path, c.start_line, c.end_line) for c in doc.chunks]
    raw += [(s.heading_path, s.start_line, s.end_line) for s in doc.skipped]
    pieces = sorted(((heading_components(h), s, e) for h, s, e in raw), key=lambda p: (p[1], p[2]))
    spans: dict[Chain, tuple[int, int]] = {(): (pieces[0][1], pieces[-1][2])} if pieces else {(): (1, 0)}
    for chain, start, end in pieces:
        for n in range(1, len(chain) + 1):
            lo, hi = spans.get(chain[:n], (start, end))
            spans[chain[:n]] = (min(lo, start), max(hi, end))
    return NoteOutline(rel_path, note.n_lines, spans, tuple(pieces), note.lines, note=note)


class Corpus:
    """The notes anchors are checked against: a file list, and optionally each note's outline.

    Build one with `corpus_from_vault`, `corpus_from_files` or `corpus_from_index_stats`.
    Outlines are parsed on first use and cached, so checking a few hundred anchors against
    a 10,000-note vault reads only the notes the anchors name.

    Args:
        files: rel_paths of every file in the corpus.
        source: how to name the corpus in messages, e.g. "vault sample_vault".
        read: returns a note's bytes by its rel_path; None when only the file list is known.
        config: chunker parameters for outlines.
    """

    def __init__(
        self,
        files: Iterable[str],
        *,
        source: str,
        read: Callable[[str], bytes] | None = None,
        config: ChunkerConfig | None = None,
    ):
        self.source = source
        self._read = read
        self._config = config
        self._files: dict[str, str] = {}
        for f in files:
            self._files.setdefault(normalize_rel_path(f), f)
        self._folded: dict[str, str] = {}
        for norm, f in self._files.items():
            self._folded.setdefault(norm.casefold(), f)
        self._outlines: dict[str, NoteOutline] = {}
        # For suggestions, built on first use: casefolded file name -> paths, folder -> names.
        self._by_name: dict[str, list[str]] | None = None
        self._by_folder: dict[str, dict[str, str]] = {}

    def __len__(self) -> int:
        return len(self._files)

    @property
    def files(self) -> list[str]:
        """Every rel_path in the corpus, sorted."""
        return sorted(self._files.values())

    @property
    def has_outlines(self) -> bool:
        """Whether headings and text can be checked (a vault), or only file existence."""
        return self._read is not None

    def find_file(self, rel_path: str | None, *, case_sensitive: bool = True) -> str | None:
        """The corpus rel_path equal to `rel_path` after normalize_rel_path, or None."""
        norm = normalize_rel_path(rel_path)
        if not norm:
            return None
        if norm in self._files:
            return self._files[norm]
        return None if case_sensitive else self._folded.get(norm.casefold())

    def closest_file(self, rel_path: str | None) -> str | None:
        """The most likely intended file for a rel_path that is not in the corpus.

        Tried in order: the same path in another case; the same file name in another
        folder (the shortest such path); the closest file name (difflib ratio >= 0.6) in
        the same folder, or else in the closest folder; the closest file name anywhere.
        Folder by folder, so a suggestion stays quick in a 10,000-note vault.
        """
        norm = normalize_rel_path(rel_path)
        if not norm:
            return None
        if norm.casefold() in self._folded:
            return self._folded[norm.casefold()]
        if self._by_name is None:
            self._by_name, self._by_folder = {}, {}
            for n, f in sorted(self._files.items()):
                folder, _, name = n.rpartition("/")
                self._by_name.setdefault(name.casefold(), []).append(f)
                self._by_folder.setdefault(folder.casefold(), {}).setdefault(name.casefold(), f)
        folder, _, name = norm.casefold().rpartition("/")
        if name in self._by_name:
            return min(self._by_name[name], key=lambda f: (len(f), f))
        near = [folder] if folder in self._by_folder else _close(folder, self._by_folder, 1)
        for f in near:
            hit = _close(name, self._by_folder[f], 1)
            if hit:
                return self._by_folder[f][hit[0]]
        hit = _close(name, self._by_name, 1, cutoff=0.75)
        return min(self._by_name[hit[0]], key=lambda f: (len(f), f)) if hit else None

    def outline(self, rel_path: str) -> NoteOutline | None:
        """The outline of a markdown note of the corpus (cached); None for other files,
        files not in the corpus, and corpora built from a file list."""
        found = self.find_file(rel_path, case_sensitive=False)
        if found is None or self._read is None or not found.lower().endswith(MARKDOWN_SUFFIXES):
            return None
        if found not in self._outlines:
            self._outlines[found] = outline_note(self._read(found), found, self._config)
        return self._outlines[found]

    def closest_heading(self, rel_path: str, heading_path: str | None) -> str | None:
        """The note's real heading chain closest to `heading_path`, or None.

        Tried in order: the same chain up to case and the number of `#`s; a chain that
        ends with the given components (a parent left out), the shortest; the chain whose
        last heading and whole path are closest by difflib ratio (last heading >= 0.6).
        """
        outline = self.outline(rel_path)
        gold = heading_components(heading_path)
        if outline is None or not gold:
            return None
        chains = [c for c in outline.spans if c]
        bare_gold = _bare(gold)
        ends = [c for c in chains if _bare(c)[-len(gold) :] == bare_gold]
        if ends:
            return " > ".join(min(ends, key=len))
        gold_text, gold_last = " > ".join(gold), bare_gold[-1]
        best, best_score = None, 0.0
        for chain in chains:
            last = difflib.SequenceMatcher(None, gold_last, _bare(chain)[-1]).ratio()
            if last < _HEADING_CUTOFF:
                continue
            score = last + difflib.SequenceMatcher(None, gold_text, " > ".join(chain)).ratio()
            if score > best_score:
                best, best_score = chain, score
        return " > ".join(best) if best else None


def _close(word: str, options: Iterable[str], n: int, cutoff: float = _PATH_CUTOFF) -> list[str]:
    return difflib.get_close_matches(word, list(options), n=n, cutoff=cutoff)


def _bare(chain: Chain) -> tuple[str, ...]:
    """Components without their `#`s, case-folded: what a human means by the heading."""
    return tuple(c.lstrip("#").strip().casefold() for c in chain)


def corpus_from_vault(vault: Path | str, *, config: ChunkerConfig | None = None) -> Corpus:
    """A corpus over a vault folder, with heading and snippet checks.

    Files are listed as the reference chatbot lists them (hidden files and folders
    skipped); notes are parsed with its chunker, on first use.

    Args:
        vault: the notes folder (`--vault`).
        config: chunker parameters; the default is the reference chatbot's.

    Returns:
        A Corpus that checks files, heading chains, snippets and line spans.

    Raises:
        InputError: the vault folder does not exist.
    """
    root = Path(vault)
    return Corpus(walk_vault(root), source=f"vault {vault}", read=lambda rel: (root / rel).read_bytes(), config=config)


def corpus_from_files(rel_paths: Iterable[str], *, source: str = "the corpus file list") -> Corpus:
    """A corpus known only by its file list: anchors are checked for file existence only.

    Args:
        rel_paths: every file the target indexes, relative to its vault root.
        source: how to name the corpus in messages.

    Returns:
        A Corpus without outlines.
    """
    return Corpus(rel_paths, source=source)


def corpus_from_index_stats(
    stats: Mapping[str, Any] | Any | None, *, source: str = "the target's index"
) -> Corpus | None:
    """A file-list corpus from a target's `/api/v1/index/stats` body, when it lists its files.

    The list is read from a `files` key: strings, or objects with a `rel_path`.

    Args:
        stats: the stats as a dict or a schema.IndexingCoverage (extra fields kept); None
            when the target serves no stats.
        source: how to name the corpus in messages.

    Returns:
        The corpus, or None when there are no stats or they carry no usable `files` list.
    """
    if stats is None:
        return None
    files = stats.get("files") if isinstance(stats, Mapping) else getattr(stats, "files", None)
    if not isinstance(files, list):
        return None
    paths = [f if isinstance(f, str) else f.get("rel_path") if isinstance(f, Mapping) else None for f in files]
    if any(not isinstance(p, str) for p in paths):
        return None
    return corpus_from_files(paths, source=source)


@dataclass(frozen=True)
class AnchorIssue:
    """One thing wrong with one gold support. `field` is relative to the support
    (`rel_path`, `heading_path`, `snippets[1]`, `end_line`); `suggestion` is the closest
    real value when there is one (for a labeling tool to offer)."""

    field: str
    message: str
    suggestion: str | None = None


def check_support(
    support: Mapping[str, Any] | Any, corpus: Corpus, *, case_sensitive: bool = True
) -> list[AnchorIssue]:
    """Check one gold support against the corpus.

    Args:
        support: a gold support (dict or schema.GoldSupport).
        corpus: what to check against.
        case_sensitive: compare paths and headings case-sensitively, as the run does
            (anchors.match_support's default).

    Returns:
        The issues found, empty when the support can match something. A support without
        `rel_path` (chunk_id only) is not checked.
    """
    rel_path = _get(support, "rel_path")
    if not normalize_rel_path(rel_path):
        return []
    found = corpus.find_file(rel_path, case_sensitive=case_sensitive)
    if found is None:
        guess = corpus.closest_file(rel_path)
        msg = f"no file {rel_path!r} in {corpus.source}"
        if guess is not None and normalize_rel_path(guess).casefold() == normalize_rel_path(rel_path).casefold():
            msg += " (paths are compared case-sensitively)"
        return [AnchorIssue("rel_path", msg + (f"; did you mean {guess!r}?" if guess else ""), guess)]
    outline = corpus.outline(found)
    if outline is None:
        return []

    issues: list[AnchorIssue] = []
    start, end = _get(support, "start_line"), _get(support, "end_line")
    for name, value in (("start_line", start), ("end_line", end)):
        if isinstance(value, int) and value > outline.n_lines:
            issues.append(AnchorIssue(name, f"line {value} is past the end of {found} ({outline.n_lines} lines)"))
            break

    heading = _get(support, "heading_path")
    chain: Chain | None = ()
    if heading is not None or start is None:
        chain = outline.find_chain(heading, case_sensitive=case_sensitive)
    if chain is None:
        guess = corpus.closest_heading(found, heading)
        norm = normalize_heading_path(heading)
        if len(outline.spans) == 1:
            msg = f"{found} has no headings; an empty heading_path means the whole file"
            guess = ""
        elif guess is not None:
            msg = f"no heading chain {norm!r} in {found}"
            if guess.casefold() == norm.casefold():
                msg += " (headings are compared case-sensitively)"
            msg += f"; did you mean {guess!r}?"
        else:
            msg = f"no heading chain {norm!r} in {found}" + _deepest_real_prefix(outline, heading)
        issues.append(AnchorIssue("heading_path", msg, guess))

    for i, snippet in enumerate(_get(support, "snippets") or []):
        if not isinstance(snippet, str) or not snippet.strip():
            continue  # blank snippets are ignored by matching too
        needle = normalize_phrase(snippet)
        if chain and needle in outline.section_text(chain):
            continue
        if needle not in outline.section_text(()):
            issues.append(AnchorIssue(f"snippets[{i}]", f"snippet {snippet!r} does not occur in {found}"))
        elif chain:  # in the note, but not under the (valid) heading path
            where = outline.where_is(snippet)
            msg = f"snippet {snippet!r} does not occur under {' > '.join(chain)!r}"
            msg += f"; it occurs under {' > '.join(where)!r}" if where else f"; it occurs elsewhere in {found}"
            issues.append(AnchorIssue(f"snippets[{i}]", msg, " > ".join(where) if where is not None else None))
    return issues


def _deepest_real_prefix(outline: NoteOutline, heading_path: str | None) -> str:
    """"; '# A' exists but has no sub-heading '## X'", or "; no heading of the note is close"."""
    gold = heading_components(heading_path)
    for n in range(len(gold) - 1, 0, -1):
        if gold[:n] in outline.spans:
            return f"; {' > '.join(gold[:n])!r} exists but has no sub-heading {gold[n]!r}"
    return "; no heading of the note is close"


def check_anchors(
    eval_set: EvalSet | Sequence[Any], corpus: Corpus, *, case_sensitive: bool = True
) -> list[Problem]:
    """Check every gold support of an eval set against a corpus.

    Args:
        eval_set: a loaded EvalSet (problems are then located by file and line), or a
            sequence of cases (EvalCase or dicts; problems then name the case id).
        corpus: from corpus_from_vault / corpus_from_files / corpus_from_index_stats.
        case_sensitive: compare paths and headings case-sensitively, as the run does.

    Returns:
        One Problem per issue, in case order, with field `gold_supports[i].<field>`.
        Empty when every anchor can match something in the corpus.
    """
    cases = eval_set.cases if isinstance(eval_set, EvalSet) else list(eval_set)
    problems: list[Problem] = []
    for n, case in enumerate(cases):
        path, line = eval_set.location(n) if isinstance(eval_set, EvalSet) else (None, None)
        problems += _case_problems(case, corpus, path, line, case_sensitive)
    return problems


def _case_problems(case: Any, corpus: Corpus, path: str | None, line: int | None, case_sensitive: bool) -> list[Problem]:
    """check_anchors' problems of one case; named by its id when it has no location."""
    prefix = "" if path is not None else f"case {_get(case, 'id')!r}: "
    return [
        Problem(prefix + issue.message, path=path, line=line, field=f"gold_supports[{i}].{issue.field}")
        for i, support in enumerate(_get(case, "gold_supports") or [])
        for issue in check_support(support, corpus, case_sensitive=case_sensitive)
    ]


@dataclass
class Validation:
    """What `validate_eval_set` found.

    Attributes:
        eval_set: the cases that loaded (all of them when `problems` is empty).
        problems: the file's own problems (bad JSON, types, typos): the set cannot run.
        anchor_problems: anchors that cannot match anything in the corpus.
        corpus: what anchors were checked against; None when no corpus was given.
        n_anchors: gold supports with a rel_path that were checked.
        warnings: what valid cases ask that scoring cannot check (`case_warnings`); the set
            still runs.
    """

    eval_set: EvalSet
    problems: list[Problem]
    anchor_problems: list[Problem]
    corpus: Corpus | None
    n_anchors: int
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.anchor_problems


def validate_eval_set(
    paths: Sequence[str | Path],
    corpus: Corpus | None = None,
    *,
    extra_categories: Sequence[str] | None = None,
    case_sensitive: bool = True,
) -> Validation:
    """Validate eval set files and, with a corpus, check their anchors against it.

    Both checks run in one pass, so a user sees the file's own problems and the anchor
    problems of the cases that loaded together.

    Args:
        paths: eval set files and/or folders.
        corpus: what to check anchors against; None = the file's own validation only.
        extra_categories: categories beyond the seed's six; None reads evalkit.toml.
        case_sensitive: compare paths and headings case-sensitively, as the run does.

    Returns:
        The Validation.

    Raises:
        BadEvalSet: a path that does not exist (nothing could be read).
    """
    anchor_problems: list[Problem] = []
    n_anchors = 0

    def check(index: int, case: EvalCase, path: str, line: int) -> None:
        # In the read's own pass, while the case's model is at hand: no second pass rebuilds it.
        nonlocal n_anchors
        anchor_problems.extend(_case_problems(case, corpus, path, line, case_sensitive))
        n_anchors += sum(1 for s in case.gold_supports if normalize_rel_path(s.rel_path))

    eval_set, problems = read_eval_set(paths, extra_categories, visit=check if corpus is not None else None)
    warnings = [w for _, w in eval_set.warnings]
    return Validation(eval_set, problems, anchor_problems, corpus, n_anchors, warnings)


def _get(obj: Mapping[str, Any] | Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)

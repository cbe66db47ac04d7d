"""Deterministic folder selection for folder_mode `on` / `on_with_fallback`.

A note's folder is the directory that holds it (`work/projects` for
`work/projects/Harbor.md`); notes at the vault root are in no folder and are always
searched. Selecting a folder also selects the folders below it. Each folder gets

    score(f) = (sum of BM25 scores of its chunks among the 20 best chunks) * (1 + 0.5 * name_hits(f))

(the best chunks vote for their folder), where name_hits counts distinct query terms that occur in the folder's name. Folders are
taken best first (score desc, name asc) until they hold 60% of the total score, at most
3. confidence = the best folder's share of the total. `on_with_fallback` searches every
folder instead when confidence < the threshold (default 0.35) or nothing scored; `on`
keeps its choice (and searches only root notes when nothing scored).
"""

from __future__ import annotations

import numpy as np

from evalkit.reference.tokens import terms

_VOTERS = 20
_NAME_BONUS = 0.5
_CUMULATIVE_SHARE = 0.6
_MAX_FOLDERS = 3


def note_folder(rel_path: str) -> str | None:
    """The folder (directory) of a note, or None for a note at the vault root."""
    return rel_path.rsplit("/", 1)[0] if "/" in rel_path else None


def in_folders(folder: str | None, selected: set[str]) -> bool:
    """Whether a note's folder is searched: root notes always; else a selected folder or below one."""
    if folder is None:
        return True
    # Walk up the folder's own path (O(depth)), not over every selected folder.
    while True:
        if folder in selected:
            return True
        if "/" not in folder:
            return False
        folder = folder.rsplit("/", 1)[0]


def select_folders(
    mode: str,
    lexical: np.ndarray,
    chunk_folders: list[str | None],
    folders: list[str],
    query_terms: list[str],
    *,
    confidence_threshold: float = 0.35,
) -> dict:
    """Pick the folders to search.

    Args:
        mode: "off" | "on" | "on_with_fallback".
        lexical: BM25 score of every chunk (already zero outside the request's filters).
        chunk_folders: folder of every chunk (None at the root).
        folders: every folder that holds a note, sorted.
        query_terms: the question's search terms.
        confidence_threshold: below this share, on_with_fallback searches all folders.

    Returns:
        {"mode", "selected_folders", "reasoning", "fallback_used", "confidence"}; with mode
        "off", selected_folders is empty and means "no restriction".
    """
    if mode == "off":
        return {"mode": "off", "selected_folders": [], "reasoning": "folder selection off: all folders searched",
                "fallback_used": False, "confidence": None}
    qset = set(query_terms)
    mass: dict[str, float] = {f: 0.0 for f in folders}
    # the top chunks vote for their folder with their BM25 score (ties: lower index first)
    order = sorted(np.flatnonzero(lexical > 0).tolist(), key=lambda i: (-lexical[i], i))[:_VOTERS]
    for i in order:
        f = chunk_folders[i]
        if f is not None:
            mass[f] = mass.get(f, 0.0) + float(lexical[i])
    scored: list[tuple[float, str, int]] = []
    for f, m in mass.items():
        hits = len(qset & set(terms(f)))
        scored.append((m * (1 + _NAME_BONUS * hits), f, hits))
    scored.sort(key=lambda r: (-r[0], r[1]))
    total = sum(s for s, _, _ in scored)
    if total <= 0:
        if mode == "on_with_fallback":
            return {"mode": mode, "selected_folders": list(folders), "fallback_used": True, "confidence": 0.0,
                    "reasoning": "no folder matched the question; fell back to all folders"}
        return {"mode": mode, "selected_folders": [], "fallback_used": False, "confidence": 0.0,
                "reasoning": "no folder matched the question; searched root notes only"}
    chosen: list[str] = []
    share = 0.0
    for s, f, _ in scored:
        if s <= 0 or len(chosen) >= _MAX_FOLDERS or share >= _CUMULATIVE_SHARE:
            break
        chosen.append(f)
        share += s / total
    confidence = scored[0][0] / total
    detail = ", ".join(f"{f}={s / total:.2f}" + (f" (name +{h})" if h else "") for s, f, h in scored[:5] if s > 0)
    if mode == "on_with_fallback" and confidence < confidence_threshold:
        return {"mode": mode, "selected_folders": list(folders), "fallback_used": True,
                "confidence": round(confidence, 6),
                "reasoning": f"best folder share {confidence:.2f} < {confidence_threshold}; fell back to all folders ({detail})"}
    return {"mode": mode, "selected_folders": chosen, "fallback_used": False, "confidence": round(confidence, 6),
            "reasoning": f"folders by share of BM25 mass: {detail}; kept {', '.join(chosen)}"}

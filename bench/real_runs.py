"""Run folders made from real text: the chunks, questions and gold of a real corpus, retrieved
by a real (TF-IDF) ranking, written by `evalkit.run_eval()` through a Python-callable target.

    folder = prepare("scifact", 5000, Path("/tmp/evalkit_real_runs"))   # folder/results/bench
    prepare("obsidian-tasks", 5000, workdir)

Corpora (/work/shared/corpora, or $EVALKIT_CORPORA; see SOURCE.md there):

    scifact         5,183 paper abstracts: a note per abstract (`scifact/<id>.md`, heading
                    "# <title>"); questions: the 1,109 SciFact claims, then sentences of the
                    abstracts, each naming its abstract as gold
    obsidian-tasks  the Tasks plugin's user guide (107 notes): a section per heading path;
                    questions: sentences of the sections, each naming its section as gold

A note's text is cut into chunks of at most 300 characters at sentence (or line) ends; the
run stores each chunk's text cut to 200 characters, as run_eval does. Retrieval ranks every
chunk by TF-IDF cosine to the question and returns the top K = 20. One gold support per case;
a fifth of the questions (by a hash of the question) never retrieve their gold (their gold
chunks are taken out of the list), the others retrieve it (put at a rank from 1 to 5 when the
ranking missed it). Case i asks question i mod the number of questions, so a run of more
cases than questions repeats them, as a re-asked eval set does.

Made once per (corpus, N) and cached under the workdir (`ready` marks a finished folder).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import sys
import time
from pathlib import Path

K = 20
CHUNK_CHARS = 300
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CORPORA = Path(os.environ.get("EVALKIT_CORPORA", "/work/shared/corpora"))
CATEGORIES = ("factual", "reasoning", "multi_hop", "general", "adversarial")
_PLAN_ENV = "EVALKIT_REAL_RUN_PLAN"
_UNIT = re.compile(r"((?<=[.!?])[ \t]+(?=[A-Z0-9(\[])|\n+)")


# --------------------------------------------------------------------------- the corpora


def _pieces(text: str, limit: int = CHUNK_CHARS) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at sentence or line ends (a longer
    sentence alone); the separators kept inside a piece are the text's own."""
    parts = _UNIT.split(text)
    out: list[str] = []
    cur, sep = "", ""
    for k in range(0, len(parts), 2):
        unit = parts[k].strip()
        if unit:
            if cur and len(cur) + len(sep) + len(unit) > limit:
                out.append(cur)
                cur = unit
            else:
                cur = f"{cur}{sep}{unit}" if cur else unit
        sep = parts[k + 1] if k + 1 < len(parts) else ""
    if cur:
        out.append(cur)
    return out


def _units(piece: str) -> list[str]:
    """The sentences and lines of a piece that read as a question or claim (40-200 characters of prose)."""
    return [u.strip() for u in _UNIT.split(piece)[::2] if 40 <= len(u.strip()) <= 200 and u.strip()[:1].isalpha()]


def _scifact() -> tuple[list[tuple[str, str, str]], list[tuple[str, int]]]:
    """(chunks as (rel_path, heading_path, text), questions as (text, gold chunk))."""
    root = CORPORA / "scifact"
    chunks: list[tuple[str, str, str]] = []
    first_chunk: dict[str, int] = {}
    sentences: list[tuple[str, int]] = []
    with open(root / "corpus.jsonl") as f:
        for line in f:
            doc = json.loads(line)
            path, heading = f"scifact/{doc['_id']}.md", f"# {doc['title'].strip()}"
            first_chunk[doc["_id"]] = len(chunks)
            for piece in _pieces(doc["text"]):
                sentences.extend((s, len(chunks)) for s in _units(piece))
                chunks.append((path, heading, piece))
    gold_of: dict[str, str] = {}
    for split in ("test", "train"):
        with open(root / "qrels" / f"{split}.tsv") as f:
            next(f)
            for line in f:
                q, d, _ = line.split("\t")
                gold_of.setdefault(q, d)
    questions = []
    with open(root / "queries.jsonl") as f:
        for line in f:
            q = json.loads(line)
            if q["_id"] in gold_of:
                questions.append((q["text"], first_chunk[gold_of[q["_id"]]]))
    return chunks, questions + sentences


def _obsidian() -> tuple[list[tuple[str, str, str]], list[tuple[str, int]]]:
    root = CORPORA / "obsidian-tasks" / "vault"
    chunks: list[tuple[str, str, str]] = []
    sentences: list[tuple[str, int]] = []
    for file in sorted(root.rglob("*.md")):
        rel = file.relative_to(root).as_posix()
        lines = file.read_text(encoding="utf-8").splitlines()
        if lines and lines[0] == "---":  # front matter
            end = next((i for i in range(1, len(lines)) if lines[i] == "---"), 0)
            lines = lines[end + 1:]
        stack: list[str] = []
        body: list[str] = []
        fence = False

        def flush() -> None:
            text = "\n".join(body).strip()
            body.clear()
            if not text:
                return
            heading = " > ".join(stack)
            for piece in _pieces(text):
                sentences.extend((s, len(chunks)) for s in _units(piece))
                chunks.append((rel, heading, piece))

        for line in lines:
            if line.lstrip().startswith(("```", "~~~")):
                fence = not fence
            m = None if fence else re.match(r"^(#{1,6}) (.+)$", line)
            if m:
                flush()
                level = len(m.group(1))
                stack = [h for h in stack if h.count("#") < level] + [f"{m.group(1)} {m.group(2).strip()}"]
            else:
                body.append(line)
        flush()
    return chunks, sentences


def corpus(name: str) -> tuple[list[tuple[str, str, str]], list[tuple[str, int]]]:
    """(chunks, questions) of a corpus: chunks as (rel_path, heading_path, text), questions as
    (text, index of a gold chunk); questions in a fixed order without repeats."""
    chunks, questions = {"scifact": _scifact, "obsidian-tasks": _obsidian}[name]()
    import random

    # SciFact's claims first, then the sentences in an order spread over the whole corpus
    claims = 0 if name != "scifact" else sum(1 for _ in open(CORPORA / "scifact" / "queries.jsonl"))
    head, rest = questions[:claims], questions[claims:]
    random.Random(39).shuffle(rest)
    questions = head + rest
    seen: set[str] = set()
    unique = [(q, g) for q, g in questions if not (q in seen or seen.add(q))]  # type: ignore[func-returns-value]
    return chunks, unique


# --------------------------------------------------------------------------- retrieval


def _rank(chunks: list[tuple[str, str, str]], questions: list[str], k: int) -> tuple:
    """Top k + 10 chunks per question by TF-IDF cosine (numpy / scipy sparse): (index, score) arrays."""
    import numpy as np
    from scipy import sparse

    token = re.compile(r"[a-z0-9]{2,}")
    vocab: dict[str, int] = {}

    def matrix(texts: list[str]) -> sparse.csr_matrix:
        rows, cols, vals = [], [], []
        for r, t in enumerate(texts):
            counts: dict[int, int] = {}
            for w in token.findall(t.lower()):
                j = vocab.setdefault(w, len(vocab))
                counts[j] = counts.get(j, 0) + 1
            rows += [r] * len(counts)
            cols += list(counts)
            vals += [1.0 + np.log(c) for c in counts.values()]
        return sparse.csr_matrix((vals, (rows, cols)), shape=(len(texts), 1 << 20), dtype=np.float32)

    c = matrix([f"{h} {t}" for _, h, t in chunks])
    q = matrix(questions)
    df = np.bincount(c.indices, minlength=c.shape[1])
    idf = np.log((1 + c.shape[0]) / (1 + df)).astype(np.float32)
    idf[df > 0.2 * c.shape[0]] = 0  # stop words

    def norm(m: sparse.csr_matrix) -> sparse.csr_matrix:
        m = m.multiply(idf).tocsr()
        n = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        n[n == 0] = 1
        return sparse.diags(1 / n).dot(m).tocsr()

    c, q = norm(c), norm(q)
    ct = c.T.tocsc()
    depth = k + 10
    top = np.empty((len(questions), depth), dtype=np.int32)
    score = np.empty((len(questions), depth), dtype=np.float32)
    for s in range(0, len(questions), 500):
        dense = (q[s:s + 500] @ ct).toarray()
        part = np.argpartition(-dense, depth, axis=1)[:, :depth]
        vals = np.take_along_axis(dense, part, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")
        top[s:s + 500] = np.take_along_axis(part, order, axis=1)
        score[s:s + 500] = np.take_along_axis(vals, order, axis=1)
    return top, score


def _missed(question: str) -> bool:
    """A fifth of the questions never retrieve their gold (a fixed function of the text)."""
    return hashlib.sha256(question.encode()).digest()[0] % 5 == 0


def _plan(name: str, n: int) -> dict:
    chunks, questions = corpus(name)
    questions = questions[:n]
    top, score = _rank(chunks, [q for q, _ in questions], K)
    answers: dict[str, tuple[list[int], list[float], int]] = {}
    for i, (q, gold) in enumerate(questions):
        anchor = chunks[gold][:2]
        idx, sc = [int(x) for x in top[i]], [round(float(x), 4) for x in score[i]]
        if _missed(q):
            keep = [j for j in range(len(idx)) if chunks[idx[j]][:2] != anchor]
        else:
            keep = list(range(len(idx)))
            if not any(chunks[idx[j]][:2] == anchor for j in keep[:K]):
                at = hashlib.sha256(q.encode()).digest()[1] % 5
                idx.insert(at, gold)
                sc.insert(at, sc[at])
                keep = list(range(len(idx)))
        answers[q] = ([idx[j] for j in keep[:K]], [sc[j] for j in keep[:K]], gold)
    return {"chunks": chunks, "answers": answers}


# --------------------------------------------------------------------------- the target

_loaded: dict | None = None


def ask(request: dict) -> dict:
    """The Python-callable target: the planned top K chunks of the question, text as in the corpus."""
    global _loaded
    if _loaded is None:
        with open(os.environ[_PLAN_ENV], "rb") as f:
            _loaded = pickle.load(f)
    chunks = _loaded["chunks"]
    idx, scores, _gold = _loaded["answers"][request["question"]]
    out = []
    for rank, (j, s) in enumerate(zip(idx[: request["k"]], scores, strict=False), start=1):
        path, heading, text = chunks[j]
        out.append({"chunk_id": hashlib.sha256(f"{path}|{j}".encode()).hexdigest()[:32], "rel_path": path,
                    "heading_path": heading, "score_final": s, "text": text, "rank": rank})
    top = out[0]
    first = top["text"].split(". ")[0][:160]
    return {
        "answer": f"{first} [1].",
        "references": [{k: top[k] for k in ("chunk_id", "rel_path", "heading_path")}],
        "debug": {"retrieved_chunks": out, "timings_ms": {"retrieval": 1.0}},
    }


def prepare(name: str, n: int, workdir: Path) -> Path:
    """workdir/<name>-n<N>, holding eval_set.jsonl and results/bench (a run_eval run); made once."""
    folder = workdir / f"{name}-n{n}"
    if (folder / "ready").exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    plan = _plan(name, n)
    with open(folder / "plan.pickle", "wb") as f:
        pickle.dump(plan, f, protocol=pickle.HIGHEST_PROTOCOL)
    questions = list(plan["answers"])
    chunks = plan["chunks"]
    with open(folder / "eval_set.jsonl", "w") as f:
        for i in range(n):
            q = questions[i % len(questions)]
            path, heading, _ = chunks[plan["answers"][q][2]]
            f.write(json.dumps({"id": f"q{i:06d}", "question": q, "answerable": True, "category": CATEGORIES[i % 5],
                                "gold_supports": [{"rel_path": path, "heading_path": heading}]}) + "\n")
    from evalkit import run_eval

    os.environ[_PLAN_ENV] = str(folder / "plan.pickle")
    run_eval(
        eval_set=str(folder / "eval_set.jsonl"), k=[K], target=f"python:{Path(__file__).resolve()}:ask",
        retrieval_only=True, results_dir=str(folder / "results"), run_id="bench", concurrency=16, no_probe=True,
        quiet=True,
    )
    (folder / "ready").write_text("ok\n")
    print(f"  {name} n={n}: made in {time.perf_counter() - t0:.1f} s ({len(questions)} questions, {len(chunks)} chunks)",
          file=sys.stderr)
    return folder


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", choices=["scifact", "obsidian-tasks"])
    ap.add_argument("n", type=int, nargs="+")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evalkit_real_runs"))
    a = ap.parse_args()
    for n_ in a.n:
        print(prepare(a.corpus, n_, a.workdir))

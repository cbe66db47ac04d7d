"""Judging at scale: judge_answers against a loopback OpenAI-compatible judge that answers in L.

A stub judge server (asyncio, its own process, HTTP/1.1 keep-alive) answers every
`POST /v1/chat/completions` with a valid verdict after a fixed delay L (default 200 ms).
For each concurrency C a fresh child process builds a synthetic retrieval-only run of
N cases (2 judge calls each: groundedness and correctness; the target said whether it
abstained), judges a short warm-up run, then times one `judge_run()` with an empty cache:

    wall        seconds of the whole judge_run() (read the run, judge, write the three files)
    judge       seconds from the start to the last verdict (wall less the writing of the files)
    calls       wire calls made (the stub counts what it answered)
    efficiency  (calls * L / C) / wall: 1.0 = the harness adds nothing to the judge's time
    cpu/call    harness process CPU (user + sys, every thread) per call, ms
    in flight   the most requests the stub held at once (C when nothing throttles)

Usage:
    python bench/judge_bench.py                         # N = 320 cases (640 calls), L = 200 ms, C in 4 16 64
    python bench/judge_bench.py --concurrency 64 --repeat 3
    python bench/judge_bench.py --floor                 # also a bare SDK client alone, for scale
    python bench/judge_bench.py --profile 64            # cProfile of the timed run at C=64 (top 30)
    python bench/judge_bench.py --stub                  # just serve the stub; prints its base URL

Target: efficiency >= 0.85 at C = 64 against a 200 ms judge. Results: bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WARMUP_CASES = 32
MODEL = "bench-judge@0123456789abcdef"

# One body fits every verdict model: they ignore extra keys (judges/base.py _Verdict).
_VERDICT = {
    "reasoning": "stub verdict",
    "score": 4,
    "supported_claims": ["The port is 8080."],
    "unsupported_claims": [],
    "key_facts_covered": [],
    "key_facts_missing": [],
    "abstained": False,
    "confidence": 0.9,
}


# --------------------------------------------------------------------------- the stub judge


def _reply_bytes() -> bytes:
    body = json.dumps(
        {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "bench-judge",
            "system_fingerprint": "fp_stub",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": json.dumps(_VERDICT)},
                 "finish_reason": "stop", "logprobs": None}
            ],
            "usage": {"prompt_tokens": 900, "completion_tokens": 60, "total_tokens": 960},
        }
    ).encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    return head + body


async def _serve(delay_s: float, port: int) -> None:
    ok = _reply_bytes()
    not_found = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
    state = {"in_flight": 0, "peak": 0, "answered": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                request_line = head.split(b"\r\n", 1)[0]
                if request_line.startswith(b"GET /stats"):
                    body = json.dumps(state).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                    continue
                if request_line.startswith(b"POST /reset"):
                    state.update(peak=0, answered=0)
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                    continue
                if b"/chat/completions" not in request_line:
                    writer.write(not_found)
                    continue
                state["in_flight"] += 1
                state["peak"] = max(state["peak"], state["in_flight"])
                try:
                    # A non-blocking sleep: the stub holds any number of requests for L
                    # at the cost of one timer each, so it never throttles the harness.
                    await asyncio.sleep(delay_s)
                finally:
                    state["in_flight"] -= 1
                state["answered"] += 1
                writer.write(ok)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    host, bound = server.sockets[0].getsockname()[:2]
    print(f"http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def start_stub_process(delay_ms: float) -> tuple[str, subprocess.Popen]:
    """Run the stub judge in a child process; (base URL, process)."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--stub", "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline().strip() if proc.stdout is not None else ""
    if not line.startswith("http://"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"stub judge did not start (printed {line!r})")
    return line, proc


def _stub_get(url: str, path: str, method: str = "GET") -> dict:
    import urllib.request

    req = urllib.request.Request(url + path, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=5) as r:  # noqa: S310 - loopback only
        body = r.read()
    return json.loads(body) if body else {}


# --------------------------------------------------------------------------- the measured child


def _record(i: int) -> dict:
    chunks = [
        {"chunk_id": f"c{i}-{r}", "rel_path": f"notes/n{r}.md", "heading_path": "# H", "rank": r + 1,
         "start_line": 1, "end_line": 9, "text": f"Note {r} of case {i}: the server listens on port 8080.",
         "text_truncated": False}
        for r in range(5)
    ]
    return {
        "schema_version": 1, "test_case_id": f"b{i:05d}", "case_index": i,
        "case": {"id": f"b{i:05d}", "question": f"Which port does server {i} use?", "answerable": True,
                 "expected_key_facts": ["port 8080"], "tags": ["bench"], "category": "factual", "gold_supports": []},
        "question": f"Which port does server {i} use?", "answer": f"Server {i} listens on port 8080 [1].",
        "references": [{"chunk_id": f"c{i}-0", "rel_path": "notes/n0.md", "heading_path": "# H"}],
        "retrieved_chunks": chunks, "config": {"k": 5}, "latency": {"total_ms": 10.0},
        "retrieval_metrics": {}, "groundedness": None, "correctness": None,
        # The target said it answered: no abstention call, so 2 judge calls per case.
        "abstention": {"abstained": False, "hallucinated": None, "method": "target"},
        "judge_input": None, "cost": {"judge_tokens": 0, "judge_cost_usd": 0.0},
        "error": None, "judge_errors": [], "missing_fields": [],
    }


def _make_run(results: Path, run_id: str, n: int, offset: int) -> None:
    run = results / run_id
    run.mkdir(parents=True)
    with open(run / "results.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps(_record(offset + i)) + "\n")
    (run / "config.json").write_text(json.dumps({"run_id": run_id, "settings": {"k": [5]}}))


def child(args: argparse.Namespace) -> None:
    """One measured judge_run in this (fresh) process; prints one JSON line."""
    t_import = time.perf_counter()
    from evalkit.judges import JudgeSettings
    from evalkit.judges.registry import load_backend_class
    from evalkit.rescore.answers import judge_run
    from evalkit.store.runs import RunDir

    load_backend_class("openai-compatible")  # the SDK import, a once-per-process cost
    import_s = time.perf_counter() - t_import

    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        _make_run(results, "warmup", WARMUP_CASES, offset=10**6)
        _make_run(results, "measured", args.n, offset=0)

        def settings() -> JudgeSettings:
            return JudgeSettings(
                provider="openai-compatible", model=MODEL, base_url=args.url + "/v1",
                cache_path=Path(tmp) / "cache.sqlite", concurrency=args.c, timeout=60,
            )

        t_warm = time.perf_counter()
        judge_run(RunDir.open(results, "warmup"), settings())
        warmup_s = time.perf_counter() - t_warm
        _stub_get(args.url, "/reset", "POST")
        if not args.no_freeze:
            import gc

            gc.freeze()  # as judge_answers does once its imports are done (cli/judge_answers.py)

        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        last = [0.0]

        def progress(done: int, total: int) -> None:
            last[0] = time.perf_counter()

        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        result = judge_run(RunDir.open(results, "measured"), settings(), on_progress=progress)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_SELF)
        if profiler is not None:
            import pstats

            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(40)
    stub = _stub_get(args.url, "/stats")
    js = result.stats
    print(
        json.dumps(
            {
                "c": args.c, "n": args.n, "calls": js.get("calls"), "answered": stub["answered"], "peak": stub["peak"],
                "failures": sum((js.get("failures") or {}).values()), "wall_s": wall, "judge_s": last[0] - t0,
                "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
                "import_s": import_s, "warmup_s": warmup_s,
            }
        )
    )


def floor(args: argparse.Namespace) -> None:
    """The same number of calls through one bare AsyncOpenAI client, no judge around it:
    `sdk` = the SDK's own HTTP client and chat.completions.create (what a judge built the
    obvious way does); `stack` = the judges' HTTP client (`evalkit.net.limits.bounded_client`) and the
    raw post the judge backends make. The floor the judge sits on, and what it was."""
    import httpx
    import openai

    from evalkit.net.limits import bounded_client

    async def go() -> tuple[float, float]:
        http = bounded_client(timeout=60, max_bytes=32 << 20) if args.floor_kind == "stack" else None
        client = openai.AsyncOpenAI(api_key="none", base_url=args.url + "/v1", max_retries=0, http_client=http)
        body = {"model": "bench-judge", "messages": [{"role": "system", "content": "judge " * 300},
                                                     {"role": "user", "content": "answer " * 300}],
                "temperature": 0.0, "response_format": {"type": "json_object"}}

        async def call() -> None:
            if args.floor_kind == "stack":
                (await client.post("/chat/completions", body=body, cast_to=httpx.Response)).json()
            else:
                await client.chat.completions.create(**body)

        async def batch(n: int) -> float:
            todo = iter(range(n))

            async def worker() -> None:
                for _ in todo:
                    await call()

            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.c)))
            return time.perf_counter() - t0

        await batch(2 * WARMUP_CASES)
        before = resource.getrusage(resource.RUSAGE_SELF)
        wall = await batch(2 * args.n)
        after = resource.getrusage(resource.RUSAGE_SELF)
        await client.close()
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

    wall, cpu = asyncio.run(go())
    print(json.dumps({"c": args.c, "kind": args.floor_kind, "calls": 2 * args.n, "wall_s": wall, "cpu_s": cpu}))


# --------------------------------------------------------------------------- the driver


def _machine() -> str:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = []
    for dist in ("openai", "httpx"):
        try:
            from importlib.metadata import version

            versions.append(f"{dist} {version(dist)}")
        except Exception:  # noqa: BLE001 - only for the banner
            pass
    return f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, {', '.join(versions)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=320, help="cases per run; 2 judge calls each (default 320)")
    parser.add_argument("--delay-ms", type=float, default=200.0, help="stub judge latency L (default 200)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16, 64], help="values of C")
    parser.add_argument("--repeat", type=int, default=1, help="runs per C (fresh process each)")
    parser.add_argument("--floor", action="store_true", help="also time a bare SDK client alone (SDK default, judges' stack)")
    parser.add_argument("--no-freeze", action="store_true", help="leave the imported heap to the collector "
                        "(judge_answers freezes it, gc.freeze(), before it judges)")
    parser.add_argument("--profile", type=int, default=None, metavar="C", help="print a cProfile of the run at this C")
    parser.add_argument("--stub", action="store_true", help="only serve the stub judge (prints its base URL)")
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also append each row to this JSON-lines file (bench/table.py reads it)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floor-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--c", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--floor-kind", choices=("sdk", "stack"), default="stack", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stub:
        try:
            asyncio.run(_serve(args.delay_ms / 1000, args.port))
        except KeyboardInterrupt:
            pass
        return
    if args.child:
        child(args)
        return
    if args.floor_child:
        floor(args)
        return

    url, proc = start_stub_process(args.delay_ms)
    rows: list[dict] = []
    floors: list[dict] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        # Repeats alternate between the C values, so slow spells of a shared machine spread over all.
        for _ in range(max(1, args.repeat)):
            for c in args.concurrency:
                base = [sys.executable, __file__, "--url", url, "--c", str(c), "--n", str(args.n)]
                for kind in ("sdk", "stack") if args.floor else ():
                    out = subprocess.run([*base, "--floor-child", "--floor-kind", kind], capture_output=True, text=True,
                                         check=True, env=env)
                    floors.append(json.loads(out.stdout.strip().splitlines()[-1]))
                cmd = [*base, "--child"] + (["--profile", "1"] if args.profile == c else []) + \
                    (["--no-freeze"] if args.no_freeze else [])
                out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    sys.stderr.write(out.stderr)
                    raise SystemExit(f"C={c}: the child failed")
                if args.profile == c:
                    sys.stderr.write(out.stderr)
                rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"C={c} done", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=5)

    L = args.delay_ms / 1000
    if args.json is not None:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps({**r, "efficiency": r["calls"] * L / r["c"] / r["wall_s"],
                                    "cpu_per_call_ms": 1000 * r["cpu_s"] / r["calls"]}) + "\n")
    print(f"machine: {_machine()}")
    print(f"N = {args.n} cases, L = {args.delay_ms:g} ms, OpenAI-compatible judge, empty cache")
    print(f"{'C':>4} {'calls':>6} {'ideal s':>8} {'wall s':>8} {'judge s':>8} {'efficiency':>10} {'cpu/call ms':>11} "
          f"{'in flight':>9} {'failures':>8} {'warm-up s':>9}")
    for r in rows:
        ideal = r["calls"] * L / r["c"]
        print(f"{r['c']:>4} {r['calls']:>6} {ideal:>8.2f} {r['wall_s']:>8.2f} {r['judge_s']:>8.2f} {ideal / r['wall_s']:>10.3f} "
              f"{1000 * r['cpu_s'] / r['calls']:>11.2f} {r['peak']:>9} {r['failures']:>8} {r['warmup_s']:>9.2f}")
    if floors:
        print("a bare AsyncOpenAI client alone, C workers, same calls (sdk: its own HTTP client and "
              "chat.completions.create; stack: the judges' HTTP client and raw post):")
        print(f"{'C':>4} {'kind':>5} {'calls':>6} {'ideal s':>8} {'wall s':>8} {'efficiency':>10} {'cpu/call ms':>11}")
        for f in floors:
            ideal = f["calls"] * L / f["c"]
            print(f"{f['c']:>4} {f['kind']:>5} {f['calls']:>6} {ideal:>8.2f} {f['wall_s']:>8.2f} {ideal / f['wall_s']:>10.3f} "
                  f"{1000 * f['cpu_s'] / f['calls']:>11.2f}")
    if args.repeat > 1:
        print(f"spread over {args.repeat} runs per C (efficiency mean / min / max):")
        for c in args.concurrency:
            effs = [r["calls"] * L / r["c"] / r["wall_s"] for r in rows if r["c"] == c]
            print(f"{c:>4} {statistics.mean(effs):.3f} / {min(effs):.3f} / {max(effs):.3f}")


if __name__ == "__main__":
    main()

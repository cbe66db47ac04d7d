"""Async orchestration of one run: eval cases x target -> `results/<run_id>/`.

Order of work (nothing is written until every input has been checked):
1. settings -> eval set (BadEvalSet) -> case selection -> baseline -> judge -> target;
2. config.json, atomically, before the first case;
3. bounded concurrency (`--concurrency` workers pulling cases in eval-set order); finished
   records go through one writer task that appends them to results.jsonl in eval-set
   order, batched: one write + flush per batch, fsync at most once a second and at the
   end (off the event loop). A record that finished before an earlier case waits in a
   reorder buffer of at most max(64, 4 x concurrency) records; past that (a hung case),
   the waiting records are written out of order, so a kill -9 loses at most that many
   finished records;
4. when every case has its record, results.jsonl is checked and, only if needed,
   rewritten once in eval-set order (records also carry `case_index`, so a partial file
   can always be put back in order; RunDir.read_results does);
5. metrics.json from the records, plus the regression gate against `--baseline`.

Resume skips the ids already in results.jsonl and redoes a torn last line.

Modules: records.py (one record per case, pure), session.py (workers + writer),
runner.py (`run` / `arun`: the stages in order), preflight.py (every check before the first
case), provenance.py (config.json's body), result.py (`RunResult`), api.py
(`evalkit.run_eval`); beside them the run variants: matrix.py, repro.py, merge.py (shards),
hardware.py (the machine a run ran on).
"""

"""The deciders: does a run pass, against its baseline or against floors (issue 37 item 5).

Pure functions and models over metrics.json bodies and a comparison's rows; no I/O. The
package sits below `config` (which validates the gate flags with it) and below `compare`
(which assembles a comparison and asks these modules for its gate and decision), and imports
only `metrics`, `evalset`, `errors` and itself. Nothing is imported here: `--help` and config
load `thresholds` and `floors` without numpy, which `verdict` needs.

- `values`: a metric's value as the deciders read it from a metrics.json body (cells, @K, the K both runs share)
- `thresholds`: `Thresholds` (defaults: the registry's margins), `--regression-threshold` / `--gate-by` parsing, presets
- `fields`: which response fields each metric reads; the metrics a field one target leaves out blinds
- `invariants`: may two runs be compared (eval set, labels, cases, judge, scorer, corpus), and warnings
- `regressions`: the threshold gate (`gate_result`), run_eval's `--baseline` gate and compare_runs' `--gate threshold`
- `floors`: the `--threshold` absolute floors on a run's own numbers
- `verdict`: the merge verdict, each metric's paired interval against its margin
- `models`: the verdict, gate report and decision as pydantic models
- `decision`: compare_runs' gate in each mode, the default gate, the outcome and its exit code
"""

"""The wheel stands alone (issue 24 item 4): build it, install it in a fresh venv, and from an
empty folder reach a first result with the README's commands (`evalkit init`, `evalkit run`).

It needs the package index (the build backend and the runtime dependencies are installed into
new virtual environments), so it runs only when EVALKIT_TEST_WHEEL=1; `.ci/run` sets it.
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    os.environ.get("EVALKIT_TEST_WHEEL") != "1",
    reason="builds and installs the wheel from the package index: set EVALKIT_TEST_WHEEL=1 (.ci/run does)",
)


def _venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin" / "python"


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{cmd}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def test_build_install_init_run_from_an_empty_folder(tmp_path: Path) -> None:
    # build as a release would: sdist, then the wheel from the sdist (so MANIFEST.in is tested too)
    builder = _venv(tmp_path / "build-venv")
    _run([str(builder), "-m", "pip", "install", "-q", "build"], cwd=tmp_path)
    dist = tmp_path / "dist"
    built = _run([str(builder), "-m", "build", "--outdir", str(dist), str(ROOT)], cwd=tmp_path)
    log = built.stdout + built.stderr
    assert "Deprecat" not in log, [line for line in log.splitlines() if "Deprecat" in line]
    (wheel,) = dist.glob("evalkit-*.whl")

    python = _venv(tmp_path / "user-venv")
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp_path)
    bin_dir = python.parent
    # a user's shell: the venv activated, nothing of this checkout on the path
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    project = tmp_path / "empty"
    project.mkdir()
    evalkit = str(bin_dir / "evalkit")

    where = _run([str(python), "-c", "import evalkit, sys; print(evalkit.__file__)"], cwd=project, env=env).stdout
    assert str(tmp_path / "user-venv") in where, where  # the installed copy, not the checkout

    _run([evalkit, "init"], cwd=project, env=env)
    assert (project / "sample_vault").is_dir() and (project / "eval_set.jsonl").is_file()
    done = _run([evalkit, "run", "--quiet", "--json"], cwd=project, env=env)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["aggregate_metrics"]["n_cases"] == 6
    assert out["aggregate_metrics"]["recall_at_k_avg"] is not None
    assert (project / out["run_dir"] / "metrics.json").is_file()
    # the rest of the first steps the README shows
    _run([evalkit, "report", "--run-id", "latest"], cwd=project, env=env)
    _run([evalkit, "validate", "--vault", "sample_vault"], cwd=project, env=env)
    again = subprocess.run([evalkit, "init"], cwd=project, env=env, capture_output=True, text=True)
    assert again.returncode == 2 and "exists already" in again.stderr

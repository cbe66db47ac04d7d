"""What machine a run ran on, for config.json (no hostnames, users or paths)."""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path
from typing import Any


def _cpu_model() -> str | None:
    system = platform.system()
    if system == "Linux":
        try:
            for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
                # x86 says "model name"; some ARM kernels only say "Hardware" or "Model".
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "Model") and value.strip():
                    return value.strip()
        except OSError:
            pass
    elif system == "Darwin":
        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=2
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor() or None


def hardware_info() -> dict[str, Any]:
    """CPU, cores, memory, OS and Python of this machine.

    Returns:
        {"cpu_model", "logical_cores", "physical_cores", "memory_total_bytes",
        "memory_total_gb", "os", "os_release", "platform", "machine",
        "python_version", "python_implementation", "python_bits"}; a value the OS will
        not tell is None.
    """
    import psutil

    try:
        memory = int(psutil.virtual_memory().total)
    except (OSError, RuntimeError):
        memory = None
    return {
        "cpu_model": _cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_total_bytes": memory,
        "memory_total_gb": round(memory / 2**30, 1) if memory else None,
        "os": platform.system() or None,
        "os_release": platform.release() or None,
        "platform": platform.platform(terse=True),
        "machine": platform.machine() or None,
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "python_bits": 64 if sys.maxsize > 2**32 else 32,
    }

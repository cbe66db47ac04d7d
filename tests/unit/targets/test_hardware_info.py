"""hardware_info: the machine facts config.json records."""

from __future__ import annotations

import platform

from evalkit.run.hardware import hardware_info


def test_hardware_info_shape() -> None:
    info = hardware_info()
    assert set(info) == {
        "cpu_model", "logical_cores", "physical_cores", "memory_total_bytes", "memory_total_gb",
        "os", "os_release", "platform", "machine", "python_version", "python_implementation", "python_bits",
    }
    assert info["logical_cores"] >= 1
    assert info["physical_cores"] is None or 1 <= info["physical_cores"] <= info["logical_cores"]
    assert info["memory_total_bytes"] > 0
    assert info["python_version"] == platform.python_version()
    assert info["os"] == platform.system()


def test_hardware_info_names_no_host_or_user() -> None:
    import getpass
    import json

    text = json.dumps(hardware_info())
    assert not platform.node() or f'"{platform.node()}"' not in text
    assert f'"{getpass.getuser()}"' not in text

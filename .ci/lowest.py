"""Print a pip constraints file pinning every dependency of pyproject.toml at its lower bound.

CI installs with it once (`pip install -c`), so each `>=` in pyproject.toml is a tested
version, not a guess. Runs on the Python that runs CI: tomllib only, no packages needed.
"""

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
specs = [*project["dependencies"], *project["optional-dependencies"].get("dev", [])]
for spec in specs:
    found = re.match(r"^\s*([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*[^;]*?>=\s*([^,;\s]+)", spec)
    if found is None:
        sys.exit(f"pyproject.toml: {spec!r} has no lower bound; every dependency needs one (>=)")
    print(f"{found.group(1)}=={found.group(2)}")

"""Build hook: the wheel carries the sample notes and the bundled eval set.

They live at the top of the repository (`sample_vault/`, `eval_set.jsonl`: the layout
DESIGN.md fixes and the README's first command uses). A wheel holds only the package, so
build_py copies them to `evalkit/bundled/`, where `evalkit init` finds them once installed
(evalkit/authoring/starter.py; from a checkout it reads the originals). Everything else is in
pyproject.toml.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithStarter(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout itself
            return
        dest = Path(self.build_lib) / "evalkit" / "bundled"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        shutil.copytree(ROOT / "sample_vault", dest / "sample_vault")
        shutil.copy2(ROOT / "eval_set.jsonl", dest / "eval_set.jsonl")


setup(cmdclass={"build_py": BuildWithStarter})

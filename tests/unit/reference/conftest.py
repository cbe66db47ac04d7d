"""A five-note vault with two folders and a root note, shared by the reference tests."""

from __future__ import annotations

from pathlib import Path

import pytest

MINI_VAULT = {
    "Garden/Tomatoes.md": (
        "# Tomatoes\n\n## Watering\n\nWater tomato plants deeply twice a week in summer.\n\n"
        "## Pruning\n\nRemove suckers below the first flower cluster.\n"
    ),
    "Garden/Roses.md": "# Roses\n\nRoses need six hours of sun. Prune roses in late winter.\n",
    "Kitchen/Bread.md": (
        "---\ntags: [baking]\n---\n# Sourdough bread\n\n"
        "Feed the starter the night before. Bake the loaf at 250 degrees for 40 minutes.\n"
    ),
    "Kitchen/Coffee.md": "# Coffee\n\nUse 60 grams of coffee per litre of water.\n",
    "Inbox.md": "Call the plumber about the leaking kitchen tap.\n",
}


def write_vault(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


@pytest.fixture
def mini_vault(tmp_path: Path) -> Path:
    return write_vault(tmp_path / "vault", MINI_VAULT)


@pytest.fixture
def make_vault(tmp_path: Path):
    """make_vault(files=MINI_VAULT, name="vault") -> a fresh vault folder under tmp_path."""

    def make(files: dict[str, str] = MINI_VAULT, name: str = "vault") -> Path:
        return write_vault(tmp_path / name, files)

    return make

"""Integration fixtures: the reference chatbot served on a real loopback socket.

`reference_server` (session): a ReferenceChatbot over `reference_vault` (the repo's
sample_vault/ when it holds notes, else a small generated vault), served by
ThreadingHTTPServer on 127.0.0.1, port 0, in a thread. Yields the base URL
("http://127.0.0.1:PORT"); shut down in finally. For another vault, call
`evalkit.reference.server.start_reference_server(vault) -> (base_url, stop)` directly.
Clients should use `httpx.Client(trust_env=False)` so no proxy setting gets in the way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from evalkit.reference.server import start_reference_server
from tests.integration.fault_server import fault_server  # noqa: F401  (fixture for every integration test)

REPO_ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VAULT = REPO_ROOT / "sample_vault"

FALLBACK_VAULT = {
    "Garden/Tomatoes.md": (
        "# Tomatoes\n\n## Watering\n\nWater tomato plants deeply twice a week in summer.\n\n"
        "## Pruning\n\nRemove suckers below the first flower cluster.\n"
    ),
    "Kitchen/Bread.md": "# Sourdough bread\n\nFeed the starter the night before. Bake at 250 degrees.\n",
    "Inbox.md": "Call the plumber about the leaking kitchen tap.\n",
}


@pytest.fixture(scope="session")
def reference_vault(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """sample_vault/ if it has markdown notes, else a three-note vault in a temp folder."""
    if SAMPLE_VAULT.is_dir() and any(SAMPLE_VAULT.rglob("*.md")):
        return SAMPLE_VAULT
    root = tmp_path_factory.mktemp("reference_vault")
    for rel, text in FALLBACK_VAULT.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def reference_server(reference_vault: Path) -> Iterator[str]:
    """Base URL of the reference chatbot served over loopback for the whole session."""
    # endpoints come from the environment; the suite's autouse scrub is function-scoped,
    # so make sure a developer's EMBEDDINGS_/ANSWER_ settings cannot reach this server
    from evalkit.reference.chatbot import ReferenceConfig

    base_url, stop = start_reference_server(reference_vault, config=ReferenceConfig())
    try:
        yield base_url
    finally:
        stop()

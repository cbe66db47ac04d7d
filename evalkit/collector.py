"""How often the cyclic garbage collector runs while records stream through.

A record, and the answer it is built from, is a few hundred dicts, lists and strings that
die by reference count (JSON holds no cycles), yet every 700 allocations start a
young-generation collection, every tenth of those a middle one, and now and then a full one
over every object the process holds (its imports, the eval set): with answers of real text,
about a tenth of the runner's CPU per case (bench/README.md, "Runner CPU per ask").
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# Young objects allowed before a collection: a few megabytes at most, collected all the same.
YOUNG_THRESHOLD = 50_000


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Run the collector less often inside the block (cycles are still collected, later);
    the thresholds are restored on the way out."""
    old = gc.get_threshold()
    gc.set_threshold(max(old[0], YOUNG_THRESHOLD), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)

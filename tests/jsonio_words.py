"""What the tests of evalkit.jsonio's messages share."""

from __future__ import annotations

import orjson


def orjson_msg(data: bytes) -> str:
    """orjson's own words for `data`'s syntax error, which jsonio quotes: they differ between
    orjson versions (3.9: "unexpected character"; 3.10+: "..., expected a string key")."""
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError as e:
        return e.msg
    raise AssertionError("valid JSON")

"""Token prices and the cost of a judge call.

Built-in figures are list prices in USD per 1 million tokens (standard tier, no batch or
prompt-caching discounts) as published by OpenAI and Anthropic, checked on PRICES_AS_OF.
Prices change: pass `--price-file` to override or extend them. A model is looked up by its
exact id first, then by the longest table key its id starts with, so the dated snapshot
`gpt-4o-mini-2024-07-18` is priced as `gpt-4o-mini`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalkit.errors import JudgeConfigError, Problem
from evalkit.jsonio import read_json

PRICES_AS_OF = "2025-09-01"

# model id or id prefix -> (input, output) USD per 1M tokens
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    # OpenAI
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-2024-05-13": (5.00, 15.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "gpt-4-turbo": (10.00, 30.00),
    "gpt-3.5-turbo": (0.50, 1.50),
    # Anthropic
    "claude-opus-4": (15.00, 75.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-3-opus": (15.00, 75.00),
    "claude-3-haiku": (0.25, 1.25),
}


class _ModelPrice(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: float = Field(ge=0, description="USD per 1M prompt tokens.")
    output: float = Field(ge=0, description="USD per 1M completion tokens.")


class _PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    as_of: str | None = None
    models: dict[str, _ModelPrice]


@dataclass(frozen=True)
class Price:
    input_per_mtok: float
    output_per_mtok: float
    source: str  # "builtin <date>" | "<price file>" | "local (free)"

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """USD = (prompt × input + completion × output) / 1e6."""
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1_000_000


class PriceTable:
    """Prices by model id, with longest-prefix lookup. Free for local servers."""

    def __init__(self, prices: dict[str, tuple[float, float]] | None = None, *, source: str = f"builtin {PRICES_AS_OF}"):
        self._prices = {k: Price(a, b, source) for k, (a, b) in (prices or DEFAULT_PRICES).items()}

    @classmethod
    def load(cls, price_file: Path | None) -> PriceTable:
        """Built-in prices, overridden key by key by `price_file` when given.

        The file is JSON: `{"as_of": "2025-09-01", "models": {"gpt-4o": {"input": 2.5, "output": 10}}}`
        (the bare `models` mapping is accepted too).

        Raises:
            JudgeConfigError: unreadable file or a malformed entry (named by its field).
        """
        table = cls()
        if price_file is None:
            return table
        path = Path(price_file)
        if not path.exists():
            raise JudgeConfigError(Problem("price file not found", path=str(path), field="--price-file"))
        raw = read_json(path, what="the price file", field="--price-file", error=JudgeConfigError)
        if isinstance(raw, dict) and "models" not in raw:
            raw = {"models": raw}
        try:
            parsed = _PriceFile.model_validate(raw)
        except ValidationError as e:
            raise JudgeConfigError(
                [Problem(err["msg"], path=str(path), field=".".join(str(x) for x in err["loc"])) for err in e.errors()]
            ) from None
        source = f"{path.name}{f' {parsed.as_of}' if parsed.as_of else ''}"
        for name, p in parsed.models.items():
            table._prices[name] = Price(p.input, p.output, source)
        return table

    def lookup(self, provider: str, model: str) -> Price | None:
        """The price of `model`, or None when unknown. Local servers are free unless listed."""
        wire = model.split("@", 1)[0] if provider == "openai-compatible" else model
        for name in (model, wire):
            if name in self._prices:
                return self._prices[name]
        best = max((k for k in self._prices if wire.startswith(k)), key=len, default=None)
        if best is not None:
            return self._prices[best]
        if provider == "openai-compatible":
            return Price(0.0, 0.0, "local (free)")
        return None

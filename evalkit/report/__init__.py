"""Terminal output (rich). Only report/ and cli/ import rich."""

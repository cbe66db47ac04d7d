"""Command-line apps: one typer app per script; `evalkit` mounts them all."""

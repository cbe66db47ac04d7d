"""Metric kernels and aggregation. Pure: no I/O, no httpx, no rich."""

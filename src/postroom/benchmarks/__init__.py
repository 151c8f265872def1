"""Benchmarks shipped with postroom, so ``postroom bench`` runs them on any server.

One module per benchmark (``log``, ``queue``; the log's phases in ``log_phases``), each with
``main(argv) -> int`` (the command line) and ``run(url, settings) -> dict`` (the figures), and
``_common`` for what they share: rates and percentiles, the run's context (server settings,
machine, load average), the benchmark's schema, the command line's common options and output.
They work in a schema of their own, dropped and recreated on every run, never in user data.
They use postroom's public API only (an import-linter contract in pyproject.toml).
"""

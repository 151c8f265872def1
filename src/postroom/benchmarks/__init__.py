"""Benchmarks shipped with postroom, so ``postroom bench`` runs them on any server.

Each module exposes ``main(argv) -> int`` (the command line) and ``run(...) -> dict`` (the figures).
They work in a schema of their own, dropped and recreated on every run, never in user data.
"""

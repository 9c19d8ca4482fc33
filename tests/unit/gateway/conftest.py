"""The gateway's unit tests: what a client or an upstream may do wrong is answered, never a crash."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def no_traceback(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> Iterator[None]:
    """Fails the test if anything logged or printed a traceback (aiohttp logs a handler's crash)."""
    caplog.set_level(logging.WARNING)
    yield
    out, err = capsys.readouterr()
    assert not [r for r in caplog.records if r.exc_info], caplog.text
    assert "Traceback" not in caplog.text + out + err

"""Random damage for the property tests of the durable files: one changed byte, or a cut."""

from __future__ import annotations

from hypothesis import HealthCheck, settings, strategies as st

PROPERTY_CASES = 600
"""Examples per property (the issue asks for at least 500)."""

damage_settings = settings(max_examples=PROPERTY_CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
where = st.floats(0, 1, exclude_max=True)
"""Where in the file, as a fraction of its length."""
byte = st.integers(0, 255)


def flipped(data: bytes, where: float, byte: int) -> tuple[bytes, range]:
    """``data`` with the byte at ``where`` changed (to ``byte``, or the next value if equal),
    and the damaged range."""
    at = int(where * len(data))
    value = byte if byte != data[at] else (byte + 1) % 256
    return data[:at] + bytes([value]) + data[at + 1:], range(at, at + 1)


def truncated(data: bytes, where: float) -> tuple[bytes, range]:
    """``data`` cut at ``where`` (what a crash mid-write leaves), and the range lost."""
    at = int(where * len(data))
    return data[:at], range(at, len(data))

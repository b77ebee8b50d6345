"""Sizes in settings, written as RabbitMQ writes them (``1000000``, ``50MB``, ``512MiB``, a
memory watermark as a fraction or an absolute size).

Its own module so that the settings (`config`) can check them without importing the alarms,
which know the broker; the alarms read the same parsed values.
"""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes of a size as RabbitMQ writes them: ``1000000``, ``50MB`` (10^6), ``512MiB``."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 1073741824, 50MB, 512MiB)")
    return int(match.group(1)) * _UNITS[unit]


def memory_limit_bytes(watermark: str, total_bytes: int) -> int:
    """The memory alarm's threshold: a fraction of `total_bytes` or an absolute size."""
    text = watermark.strip()
    if "." in text:
        fraction = float(text)
        if not 0 <= fraction <= 1:
            raise ValueError(f"a relative memory watermark is between 0 and 1, not {text}")
        return int(total_bytes * fraction)
    return parse_size(text)

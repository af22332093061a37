"""Kubernetes resource quantities ("8", "500m", "32Gi", "1k", "1e3"): parse and format.

The one quantity parser of federator. The hub's API validation (apis/),
placement, cluster sync, delegation and the simulator all read quantities
from TrainingJob specs and Node/Pod objects; everything inside works in
integers (CPU in millicores, memory in bytes, devices as counts). This module
turns the Kubernetes text form into those integers and back for messages.
It lives in apis/, the bottom layer, so that every other layer may use it.

Pure: no I/O, no global state. It must never accept input silently: a
malformed, negative, fractional-device or absurdly large quantity raises
`QuantityError` naming the offending text, and nothing is rounded except CPU
and memory, which round *up* the way Kubernetes does.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from math import ceil

__all__ = [
    "BINARY_SUFFIXES",
    "MAX_QUANTITY",
    "QuantityError",
    "format_bytes",
    "format_cpu",
    "parse_bytes",
    "parse_count",
    "parse_millicores",
    "parse_quantity",
    "parse_units",
]

# Kubernetes stores quantities in int64; anything above cannot exist in a real cluster.
MAX_QUANTITY = 2**63 - 1
# The longest legitimate quantity is far shorter; a cap keeps hostile input cheap to reject.
_MAX_TEXT = 64
# Exponents beyond this cannot produce a value in int64 (or above 1e-9) and would make Fraction slow.
_MAX_EXPONENT = 30

BINARY_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?$"
)


class QuantityError(ValueError):
    """A quantity that is not valid Kubernetes syntax, or not valid for its use."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity exactly. Ints and (finite) floats, as JSON
    may carry them, are taken as plain numbers."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string or integer, got {value!r}")
    if isinstance(value, int):
        if abs(value) > MAX_QUANTITY:
            raise QuantityError(f"quantity {value} is out of range")
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"quantity must be finite, got {value!r}")
        if abs(value) > MAX_QUANTITY:
            raise QuantityError(f"quantity {value!r} is out of range")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string or integer, got {type(value).__name__}")
    return _parse_text(value)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    """parse_quantity of a string. Memoised: a hub sees the same few quantities ("100m", "32Gi") on every
    member pod event, and a Fraction is immutable; errors are raised again, never cached."""
    # No stripping: kube-apiserver refuses " 1" too.
    if not text:
        raise QuantityError("quantity is empty")
    if len(text) > _MAX_TEXT:
        raise QuantityError(f"quantity {text[:20]!r}... is longer than {_MAX_TEXT} characters")
    match = _QUANTITY_RE.match(text)
    if match is None:
        raise QuantityError(
            f"quantity {text!r} is not valid: quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (e.g. \"8\", \"500m\", \"32Gi\", \"1e3\")"
        )
    number = Fraction(match["number"])
    if match["exp"] is not None:
        exponent = int(match["exp"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"quantity {text!r} has an exponent out of range")
        number *= Fraction(10) ** exponent
    elif match["suffix"] is not None:
        suffix = match["suffix"]
        number *= BINARY_SUFFIXES[suffix] if suffix in BINARY_SUFFIXES else _DECIMAL[suffix]
    if match["sign"] == "-":
        number = -number
    if abs(number) > MAX_QUANTITY:
        raise QuantityError(f"quantity {text!r} is out of range")
    return number


def _non_negative(value: str | int | float, what: str) -> Fraction:
    quantity = parse_quantity(value)
    if quantity < 0:
        raise QuantityError(f"{what} {value!r} must not be negative")
    return quantity


def parse_millicores(value: str | int | float) -> int:
    """CPU in millicores, rounded up like Kubernetes ("500m" -> 500, "2" -> 2000, "0.1" -> 100)."""
    millicores = ceil(_non_negative(value, "cpu") * 1000)
    if millicores > MAX_QUANTITY:
        raise QuantityError(f"cpu {value!r} is out of range")
    return millicores


def parse_units(value: str | int | float, *, what: str) -> int:
    """A non-negative quantity in base units, rounded up like Kubernetes
    ("32Gi" -> 34359738368, "1k" -> 1000); `what` names it in errors."""
    return ceil(_non_negative(value, what))


def parse_bytes(value: str | int | float) -> int:
    """Memory or storage in bytes, rounded up ("32Gi" -> 34359738368, "1k" -> 1000)."""
    return parse_units(value, what="memory")


def parse_count(value: str | int | float, *, what: str = "count") -> int:
    """A device count such as nvidia.com/gpu or rdma/hca: a whole, non-negative number."""
    quantity = _non_negative(value, what)
    if quantity.denominator != 1:
        raise QuantityError(f"{what} {value!r} must be a whole number")
    return int(quantity)


def format_cpu(millicores: int) -> str:
    """Millicores as Kubernetes writes them: whole cores as "8", otherwise "500m"."""
    if millicores % 1000 == 0:
        return str(millicores // 1000)
    return f"{millicores}m"


def format_bytes(size: int) -> str:
    """Bytes in the largest binary unit that keeps the number exact, e.g. "32Gi"; else "1.5Gi"-style."""
    if size == 0:
        return "0"
    for suffix, factor in sorted(BINARY_SUFFIXES.items(), key=lambda item: -item[1]):
        if size % factor == 0:
            return f"{size // factor}{suffix}"
    for suffix, factor in sorted(BINARY_SUFFIXES.items(), key=lambda item: -item[1]):
        if size >= factor:
            return f"{size / factor:.1f}{suffix}"
    return str(size)

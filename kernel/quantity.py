"""Kubernetes resource quantities (``500m``, ``16Gi``, ``1.5``, ``2e3``) as exact decimals.

The same rules as the Kubernetes Python client's ``kubernetes.utils.parse_quantity`` (and so as
apimachinery's ``resource.Quantity`` for the forms the API server writes): binary suffixes ``Ki``
… ``Ei`` are powers of 1024, decimal suffixes ``n u m k M G T P E`` powers of 1000, no suffix a
plain decimal number (the client's quirks kept: ``mi``, ``ni`` and ``ui`` read as negative powers
of 1024, ``K`` as ``k``). It lives here rather than being imported from the client because importing
anything of ``kubernetes`` loads the whole generated client (seconds on every start), and the
portal reads quantities on every push, also with the manifests driver
(``tests/foundation/test_quantity.py`` checks both agree).
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

_EXPONENTS = {"n": -3, "u": -2, "m": -1, "k": 1, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}


def parse_quantity(quantity: str | int | float | Decimal) -> Decimal:
    """The quantity's value; ``ValueError`` for a malformed number or an unknown suffix."""
    if isinstance(quantity, int | float | Decimal):
        return Decimal(quantity)
    text = str(quantity)
    number, suffix = text, ""
    if len(text) >= 2 and text[-1] == "i" and text[-2] in _EXPONENTS:
        number, suffix = text[:-2], text[-2:]
    elif text and text[-1] in _EXPONENTS:
        number, suffix = text[:-1], text[-1]
    try:
        value = Decimal(number)
    except InvalidOperation:
        raise ValueError(f"Invalid number format: {number}") from None
    if not suffix:
        return value
    if suffix == "ki":  # the binary kilo is "Ki"; the decimal one is "k"
        raise ValueError(f"{text} has unknown suffix")
    base = 1024 if suffix.endswith("i") else 1000
    return value * (base ** Decimal(_EXPONENTS[suffix[0]]))

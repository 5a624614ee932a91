"""Scalar-or-array arithmetic helpers: the model's formulas run on plain floats (one estimate,
no numpy import) and on numpy arrays (the plan search evaluates every layout at once).

Conditions in model code are written as these helpers or as arithmetic masks, never as `if`.
"""

from __future__ import annotations

import math

_NUMBER = (int, float)


def _scalar(*xs: object) -> bool:
    for x in xs:             # a loop, not all() over a generator: this runs for every operation of the model
        if not isinstance(x, _NUMBER):
            return False
    return True


def maximum(a, b):
    """The larger of a and b; NaN if either is NaN (as numpy: an unknown never disappears)."""
    if _scalar(a, b):
        return a if a >= b or a != a else b
    import numpy as np
    return np.maximum(a, b)


def minimum(a, b):
    """The smaller of a and b; NaN if either is NaN (as numpy)."""
    if _scalar(a, b):
        return a if a <= b or a != a else b
    import numpy as np
    return np.minimum(a, b)


def where(condition, a, b):
    """`a` where condition holds, else `b` (both are evaluated)."""
    if _scalar(condition):
        return a if condition else b
    import numpy as np
    return np.where(condition, a, b)


def log2(x):
    if _scalar(x):
        return math.log2(x)
    import numpy as np
    return np.log2(x)


def ceil(x):
    if _scalar(x):
        return float(math.ceil(x))
    import numpy as np
    return np.ceil(x)


def fmod(a, b):
    """The remainder of a / b with the sign of a (C fmod); exact for whole numbers."""
    if _scalar(a, b):
        return math.fmod(a, b)
    import numpy as np
    return np.fmod(a, b)


def gcd(a, b):
    """The greatest common divisor of a and b rounded to whole numbers, as a float."""
    if _scalar(a, b):
        return float(math.gcd(round(a), round(b)))
    import numpy as np
    return np.gcd(np.rint(a).astype(np.int64), np.rint(b).astype(np.int64)).astype(float)


def mask(condition):
    """1.0 where condition holds, else 0.0."""
    if _scalar(condition):
        return 1.0 if condition else 0.0
    import numpy as np
    return np.asarray(condition, dtype=float)


def off(x) -> bool:
    """True when x is the plain number 0 (not an array): a term it multiplies is 0 for every plan,
    so the model may skip computing it (the same numbers, less work)."""
    return _scalar(x) and x == 0


def is_array(x) -> bool:
    """True for a numpy array (the plan search's vectorised layouts), False for a float."""
    return not _scalar(x)


def any_true(condition) -> bool:
    """True where any element of `condition` holds (a bool or a numpy array of bools)."""
    return bool(condition.any()) if is_array(condition) else bool(condition)

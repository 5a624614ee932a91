"""Scalar-or-array arithmetic helpers: the model's formulas run on plain floats (one estimate,
no numpy import) and on numpy arrays (the plan search evaluates every layout at once).

Conditions in model code are written as these helpers or as arithmetic masks, never as `if`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import numpy as np

    Num: TypeAlias = float | np.ndarray     # one number, or one per plan
else:
    # at run time only a name the annotations use (they are strings: `from __future__ import annotations`);
    # typing.Union with a string would compile a ForwardRef at import, start-up time (issue 36)
    Num = "float | np.ndarray"

_NUMBER = (int, float)


def _scalar(*xs: object) -> bool:
    for x in xs:             # a loop, not all() over a generator: this runs for every operation of the model
        if not isinstance(x, _NUMBER):
            return False
    return True


def maximum(a: Num, b: Num) -> Num:
    """The larger of a and b; NaN if either is NaN (as numpy: an unknown never disappears)."""
    if _scalar(a, b):
        return a if a >= b or a != a else b
    import numpy as np
    out: Num = np.maximum(a, b)
    return out


def minimum(a: Num, b: Num) -> Num:
    """The smaller of a and b; NaN if either is NaN (as numpy)."""
    if _scalar(a, b):
        return a if a <= b or a != a else b
    import numpy as np
    out: Num = np.minimum(a, b)
    return out


def where(condition: Num | bool, a: Num, b: Num) -> Num:
    """`a` where condition holds, else `b` (both are evaluated)."""
    if _scalar(condition):
        return a if condition else b
    import numpy as np
    out: Num = np.where(condition, a, b)
    return out


def log2(x: Num) -> Num:
    if _scalar(x):
        return math.log2(x)
    import numpy as np
    return np.log2(x)


def ceil(x: Num) -> Num:
    if _scalar(x):
        return float(math.ceil(x))
    import numpy as np
    out: Num = np.ceil(x)
    return out


def fmod(a: Num, b: Num) -> Num:
    """The remainder of a / b with the sign of a (C fmod); exact for whole numbers."""
    if _scalar(a, b):
        return math.fmod(a, b)
    import numpy as np
    out: Num = np.fmod(a, b)
    return out


def gcd(a: Num, b: Num) -> Num:
    """The greatest common divisor of a and b rounded to whole numbers, as a float."""
    if _scalar(a, b):
        return float(math.gcd(round(float(a)), round(float(b))))
    import numpy as np
    out: Num = np.gcd(np.rint(a).astype(np.int64), np.rint(b).astype(np.int64)).astype(float)
    return out


def mask(condition: Num | bool) -> Num:
    """1.0 where condition holds, else 0.0."""
    if _scalar(condition):
        return 1.0 if condition else 0.0
    import numpy as np
    out: Num = np.asarray(condition, dtype=float)
    return out


def off(x: object) -> bool:
    """True when x is the plain number 0 (not an array): a term it multiplies is 0 for every plan,
    so the model may skip computing it (the same numbers, less work)."""
    return _scalar(x) and x == 0


def is_array(x: object) -> bool:
    """True for a numpy array (the plan search's vectorised layouts), False for a float."""
    return not _scalar(x)


def any_true(condition: Num | bool) -> bool:
    """True where any element of `condition` holds (a bool or a numpy array of bools)."""
    return bool(condition.any()) if not isinstance(condition, (bool, int, float)) else bool(condition)

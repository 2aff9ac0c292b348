"""Checks of the scalar options every entry point shares (scale, threads, and
string choices), so each raises a short ValueError/TypeError naming the
argument instead of reaching pybind's conversions."""
import math
import operator

_MAX_THREADS = 4096  # the range cgdr::Options::threads accepts (src/validate/checks.cc)


def _scale(scale):
    """The scale for the native call: None -> 0.0 (the native layer uses
    1/sqrt(K)); anything else must be a finite non-zero real number, as the
    CLI requires of a case's scale."""
    if scale is None:
        return 0.0
    if isinstance(scale, (bool, str, bytes)):
        raise TypeError(f"scale: expected a number or None (1/sqrt(K)), got {type(scale).__name__}")
    try:
        value = float(scale)
    except OverflowError:
        raise ValueError("scale: expected a finite non-zero number or None (1/sqrt(K)), got a number too large "
                         "for a double") from None
    except (TypeError, ValueError):
        raise TypeError(f"scale: expected a number or None (1/sqrt(K)), got {type(scale).__name__}") from None
    if not math.isfinite(value) or value == 0.0:
        raise ValueError(f"scale: expected a finite non-zero number or None (1/sqrt(K)), got {value!r}")
    return value


def _eps(eps):
    """qk_l2norm_eps: a finite number > 0 (rows are divided by sqrt(sum x^2 + eps))."""
    if isinstance(eps, (bool, str, bytes)):
        raise TypeError(f"qk_l2norm_eps: expected a number, got {type(eps).__name__}")
    try:
        value = float(eps)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"qk_l2norm_eps: expected a number, got {type(eps).__name__}") from None
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"qk_l2norm_eps: expected a finite number > 0, got {value!r}")
    return value


def _threads(threads):
    if threads is None:
        return 0
    try:
        n = None if isinstance(threads, bool) else operator.index(threads)
    except TypeError:
        n = None
    if n is None or not 1 <= n <= _MAX_THREADS:
        shown = threads if n is not None else type(threads).__name__
        raise ValueError(f"threads: expected None (all cores) or an int in [1, {_MAX_THREADS}], got {shown}")
    return n


def _choice(name, value, choices, expected=None):
    """value if it is one of the strings `choices`, else ValueError naming them."""
    if not isinstance(value, str) or value not in choices:
        got = repr(value) if isinstance(value, str) else f"a value of type {type(value).__name__}"
        raise ValueError(f"{name}: expected {expected or 'one of ' + ', '.join(choices)}, got {got}")
    return value


def _lower_bound(name, bound):
    """fla's lower_bound of KDA's bounded gate (g = bound * sigmoid(...)) as
    the native gate_lower_bound: None -> 0.0 (no bound, the softplus gate);
    else a finite number < 0 (0 would make every gate 0, and the native layer
    reads 0 as none)."""
    if bound is None:
        return 0.0
    if isinstance(bound, (bool, str, bytes)):
        raise TypeError(f"{name}: expected a number or None, got {type(bound).__name__}")
    try:
        value = float(bound)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name}: expected a number or None, got {type(bound).__name__}") from None
    if not (math.isfinite(value) and value < 0.0):
        raise ValueError(f"{name}: expected None or a finite number < 0, got {value!r} (the gate's floor in "
                         "log space; 0 would make every gate 0)")
    return value

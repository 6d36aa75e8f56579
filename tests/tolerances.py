"""The one tolerance table of the test suite (STYLE.md, "Numerics").

Closed forms computed two ways (NumPy reference vs Numba kernel, a formula vs its hand-computed
value) agree to about 1e-12 relative in float64 and 1e-5 in float32. Any other tolerance used in a
test carries a comment saying why.
"""

from __future__ import annotations

import numpy as np

#: (rtol, atol) for results of closed forms, per dtype.
CLOSED_FORM = {
    np.dtype(np.float64): (1e-12, 1e-12),
    np.dtype(np.float32): (1e-5, 1e-6),
}

#: Central finite differences with step h have truncation error O(h^2) and round-off
#: O(eps/h); with h = 1e-6 in float64 the achievable agreement is about 1e-7 relative.
FINITE_DIFFERENCE = (1e-6, 1e-7)


def assert_close(actual, desired, *, dtype=np.float64, scale: float = 1.0, err_msg: str = ""):
    """Assert ``actual`` equals ``desired`` to the closed-form tolerance of ``dtype``.

    ``scale`` multiplies both tolerances where a computation legitimately loses more digits (a sum
    of many terms, say); a test that passes a scale says why in a comment.
    """
    rtol, atol = CLOSED_FORM[np.dtype(dtype)]
    np.testing.assert_allclose(
        actual, desired, rtol=rtol * scale, atol=atol * scale, err_msg=err_msg
    )


#: cvxpy oracles (``fairagg.oracles``), absolute tolerance on the argmin. OSQP with polishing
#: solves the active set's linear system directly, so its QP answers are exact to ~1e-14 on
#: well-scaled problems; 1e-9 leaves room for scaled inputs (errors grow with |b| / λ_min(A)).
ORACLE_QP = 1e-9
#: Clarabel on exponential-cone problems (rel_entr, entr, log) stops at a duality gap of
#: 1e-12..1e-8 (the oracles retry with looser tolerances), which bounds the argmin's error at
#: about 1e-6 on entries that span many orders of magnitude.
ORACLE_EXP_CONE = 1e-6

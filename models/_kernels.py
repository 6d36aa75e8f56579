"""Numba kernels shared by the two models: mean cross-entropy, its gradient and the number of
correct predictions over a list of rows, on one flat parameter vector.

These kernels assume validated input (the Python wrappers in ``models/_base.py`` and
``fairagg/local.py`` check and cast); they compile lazily for float32 and float64 and are cached.
The NumPy code in ``logistic.py`` / ``mlp.py`` is the specification they are tested against.

Parameter layouts (row-major blocks, concatenated):

- logistic (``n_hidden == 0``): ``W (p, C) | b (C,)``
- MLP: ``W1 (p, H) | b1 (H,) | W2 (H, C) | b2 (C,)``

``act`` selects the MLP hidden activation: 0 = tanh, 1 = ReLU (derivative 0 at 0).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

ACT_TANH = 0
ACT_RELU = 1


@njit(cache=True)
def work_size(n_hidden: int, n_classes: int) -> int:
    """Length of the scratch buffer ``batch_loss_grad`` needs."""
    return n_classes + 3 * n_hidden


@njit(cache=True)
def _softmax_row(z, C):
    """Turn logits ``z[:C]`` into probabilities in place; return (log-sum-exp, argmax)."""
    zmax = z[0]
    arg = 0
    for c in range(1, C):
        if z[c] > zmax:
            zmax = z[c]
            arg = c
    s = 0.0
    for c in range(C):
        s += np.exp(z[c] - zmax)
    lse = zmax + np.log(s)
    return lse, arg


@njit(cache=True)
def batch_loss_grad(params, X, y, rows, start, stop, n_hidden, n_classes, act, l2, grad, work):
    """Mean cross-entropy (+ l2/2 ||weights||^2) over ``X[rows[start:stop]]``.

    Writes the mean gradient into ``grad`` unless ``grad.size == 0``. Returns ``(loss, correct)``
    where ``correct`` counts argmax predictions equal to the label (first index on ties, as
    ``np.argmax``). ``loss`` is accumulated in float64 whatever the parameter dtype.
    """
    p = X.shape[1]
    C = n_classes
    H = n_hidden
    want = grad.size > 0
    if want:
        grad[:] = 0.0
    z = work[:C]
    loss = 0.0
    correct = 0
    if H == 0:
        bofs = p * C
        for i in range(start, stop):
            r = rows[i]
            for c in range(C):
                z[c] = params[bofs + c]
            for j in range(p):
                xj = X[r, j]
                base = j * C
                for c in range(C):
                    z[c] += xj * params[base + c]
            lse, arg = _softmax_row(z, C)
            yr = y[r]
            loss += lse - z[yr]
            if arg == yr:
                correct += 1
            if want:
                for c in range(C):
                    z[c] = np.exp(z[c] - lse)
                z[yr] -= 1.0
                for j in range(p):
                    xj = X[r, j]
                    base = j * C
                    for c in range(C):
                        grad[base + c] += xj * z[c]
                for c in range(C):
                    grad[bofs + c] += z[c]
        w_lo1, w_hi1, w_lo2, w_hi2 = 0, p * C, 0, 0
    else:
        a = work[C : C + H]
        h = work[C + H : C + 2 * H]
        dh = work[C + 2 * H : C + 3 * H]
        b1 = p * H
        w2 = b1 + H
        b2 = w2 + H * C
        for i in range(start, stop):
            r = rows[i]
            for k in range(H):
                a[k] = params[b1 + k]
            for j in range(p):
                xj = X[r, j]
                base = j * H
                for k in range(H):
                    a[k] += xj * params[base + k]
            for k in range(H):
                if act == ACT_TANH:
                    h[k] = np.tanh(a[k])
                else:
                    h[k] = a[k] if a[k] > 0.0 else 0.0
            for c in range(C):
                z[c] = params[b2 + c]
            for k in range(H):
                hk = h[k]
                base = w2 + k * C
                for c in range(C):
                    z[c] += hk * params[base + c]
            lse, arg = _softmax_row(z, C)
            yr = y[r]
            loss += lse - z[yr]
            if arg == yr:
                correct += 1
            if want:
                for c in range(C):
                    z[c] = np.exp(z[c] - lse)
                z[yr] -= 1.0
                for k in range(H):
                    hk = h[k]
                    base = w2 + k * C
                    s = 0.0
                    for c in range(C):
                        grad[base + c] += hk * z[c]
                        s += params[base + c] * z[c]
                    if act == ACT_TANH:
                        dh[k] = s * (1.0 - hk * hk)
                    else:
                        dh[k] = s if a[k] > 0.0 else 0.0
                for c in range(C):
                    grad[b2 + c] += z[c]
                for j in range(p):
                    xj = X[r, j]
                    base = j * H
                    for k in range(H):
                        grad[base + k] += xj * dh[k]
                for k in range(H):
                    grad[b1 + k] += dh[k]
        w_lo1, w_hi1, w_lo2, w_hi2 = 0, p * H, w2, b2
    nb = stop - start
    reg = 0.0
    if l2 != 0.0:
        for q in range(w_lo1, w_hi1):
            reg += params[q] * params[q]
        for q in range(w_lo2, w_hi2):
            reg += params[q] * params[q]
    if want:
        inv = 1.0 / nb
        for q in range(grad.size):
            grad[q] *= inv
        if l2 != 0.0:
            for q in range(w_lo1, w_hi1):
                grad[q] += l2 * params[q]
            for q in range(w_lo2, w_hi2):
                grad[q] += l2 * params[q]
    return loss / nb + 0.5 * l2 * reg, correct


@njit(cache=True, parallel=True)
def evaluate_segments(params, X, y, offsets, n_hidden, n_classes, act, l2, losses, correct):
    """Write each client's mean loss and correct count; client k owns rows
    ``offsets[k]:offsets[k+1]``."""
    K = offsets.size - 1
    rows = np.arange(X.shape[0])
    no_grad = np.empty(0, dtype=params.dtype)
    for k in prange(K):
        lo = offsets[k]
        hi = offsets[k + 1]
        if hi > lo:
            work = np.empty(work_size(n_hidden, n_classes), dtype=params.dtype)
            lk, ck = batch_loss_grad(
                params, X, y, rows, lo, hi, n_hidden, n_classes, act, l2, no_grad, work
            )
            losses[k] = lk
            correct[k] = ck
        else:
            losses[k] = 0.0
            correct[k] = 0

"""Numba kernels shared by the two models: mean cross-entropy, its gradient and the number of
correct predictions over a list of rows, on one flat parameter vector.

These kernels assume validated input (the Python wrappers in ``models/_base.py`` and
``fairagg/local.py`` check and cast); they compile lazily for float32 and float64 and are cached.
The NumPy code in ``logistic.py`` / ``mlp.py`` is the specification they are tested against.

Parameter layouts (row-major blocks, concatenated; weight matrices are (out, in), as PyTorch's
``nn.Linear.weight``):

- logistic (``n_hidden == 0``): ``W (C, p) | b (C,)``
- MLP: ``W1 (H, p) | b1 (H,) | W2 (C, H) | b2 (C,)``

``act`` selects the MLP hidden activation: 0 = tanh, 1 = ReLU (derivative 0 at 0).

The module is imported as ``fairagg.models._kernels`` (the repository's ``models/`` folder
installs as ``fairagg.models``). Numba's on-disk cache records the module name and is refreshed
only when this file changes: a cache written under an earlier name fails to load with "No module
named 'models'" (delete ``models/__pycache__`` if it ever does).
"""

from __future__ import annotations

import numpy as np
from numba import njit

ACT_TANH = 0
ACT_RELU = 1


@njit(cache=True)
def work_size(n_hidden: int, n_classes: int) -> int:
    """Length of the scratch buffer ``batch_loss_grad`` needs."""
    return n_classes + 3 * n_hidden


@njit(cache=True)
def _cross_entropy_row(z, C, label):
    """Cross-entropy of logits ``z[:C]`` against ``label``; ``z`` becomes dF/dz = softmax − onehot.

    Returns ``(loss, hit)`` with ``hit`` true when the argmax (first on ties) equals the label.
    """
    zy = z[label]
    lse, arg = _softmax_row(z, C)
    z[label] -= 1.0
    return lse - zy, arg == label


@njit(cache=True)
def _softmax_row(z, C):
    """Turn logits ``z[:C]`` into probabilities in place; return (log-sum-exp, argmax).

    One exponential per class: ``z_c - max`` is exponentiated once, summed, and divided.
    """
    zmax = z[0]
    arg = 0
    for c in range(1, C):
        if z[c] > zmax:
            zmax = z[c]
            arg = c
    s = 0.0
    for c in range(C):
        e = np.exp(z[c] - zmax)
        z[c] = e
        s += e
    inv = 1.0 / s
    for c in range(C):
        z[c] *= inv
    return zmax + np.log(s), arg


# reassoc lets LLVM split the length-p dot products over SIMD lanes and several accumulators
# (the loops are otherwise one dependent addition chain); contract allows FMA. No flag that
# changes NaN or infinity semantics is set. Results differ from the NumPy reference only by
# round-off (tested).
_FASTMATH = {"reassoc", "contract"}


@njit(cache=True, fastmath=_FASTMATH, inline="always")
def _dense_forward(params, w_ofs, b_ofs, x, n_in, out, n_out):
    """``out = W x + b`` for W (n_out, n_in) at ``params[w_ofs:]`` and b at ``params[b_ofs:]``."""
    for o in range(n_out):
        base = w_ofs + o * n_in
        acc = params[b_ofs + o]
        for j in range(n_in):
            acc += x[j] * params[base + j]
        out[o] = acc


@njit(cache=True, fastmath=_FASTMATH, inline="always")
def _dense_backward(params, grad, w_ofs, b_ofs, x, n_in, dout, n_out, dx):
    """Accumulate ``dW += dout xᵀ`` and ``db += dout``; also ``dx += Wᵀ dout`` if ``dx.size``."""
    want_dx = dx.size > 0
    for o in range(n_out):
        g = dout[o]
        base = w_ofs + o * n_in
        for j in range(n_in):
            grad[base + j] += g * x[j]
        if want_dx:
            for j in range(n_in):
                dx[j] += g * params[base + j]
        grad[b_ofs + o] += g


@njit(cache=True, fastmath=_FASTMATH)
def batch_loss_grad(params, X, y, rows, start, stop, n_hidden, n_classes, act, l2, grad, work):
    """Mean cross-entropy (+ l2/2 ||weights||^2) over ``X[rows[start:stop]]``.

    Writes the mean gradient into ``grad`` unless ``grad.size == 0``. Returns ``(loss, correct)``
    where ``correct`` counts argmax predictions equal to the label (first index on ties, as
    ``np.argmax``). ``loss`` is accumulated in float64 whatever the parameter dtype. Logistic
    regression is the MLP without its hidden layer: one dense layer instead of two.
    """
    p = X.shape[1]
    C = n_classes
    H = n_hidden
    want = grad.size > 0
    if want:
        grad[:] = 0.0
    z = work[:C]
    a = work[C : C + H]
    h = work[C + H : C + 2 * H]
    dh = work[C + 2 * H : C + 3 * H]
    no_dx = work[:0]
    # Offsets of the blocks: W1 | b1 | W2 | b2 (logistic: W2 | b2 only, with H = 0).
    b1 = H * p
    w2 = b1 + H
    b2 = w2 + C * (H if H > 0 else p)
    loss = 0.0
    correct = 0
    for i in range(start, stop):
        x = X[rows[i]]
        if H == 0:
            _dense_forward(params, w2, b2, x, p, z, C)
        else:
            _dense_forward(params, 0, b1, x, p, a, H)
            for k in range(H):
                if act == ACT_TANH:
                    h[k] = np.tanh(a[k])
                else:
                    h[k] = a[k] if a[k] > 0.0 else 0.0
            _dense_forward(params, w2, b2, h, H, z, C)
        li, hit = _cross_entropy_row(z, C, y[rows[i]])  # z becomes dF/dz
        loss += li
        correct += hit
        if not want:
            continue
        if H == 0:
            _dense_backward(params, grad, w2, b2, x, p, z, C, no_dx)
        else:
            dh[:] = 0.0
            _dense_backward(params, grad, w2, b2, h, H, z, C, dh)
            for k in range(H):
                if act == ACT_TANH:
                    dh[k] *= 1.0 - h[k] * h[k]
                elif a[k] <= 0.0:
                    dh[k] = 0.0
            _dense_backward(params, grad, 0, b1, x, p, dh, H, no_dx)
    # Weight blocks carry the L2 penalty, biases do not.
    w_lo1, w_hi1, w_lo2, w_hi2 = 0, H * p, w2, b2
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


# --- evaluation in blocks of rows (FlatModel._evaluate_rows drives them) ---------------------
# A block's logits come from dense_rows (the same dot products as training), the exponentials
# from NumPy's vectorised np.exp over the whole block: per-row scalar exp calls were most of the
# time of an evaluation.


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def dense_rows(params, w_ofs, b_ofs, X, lo, hi, out):
    """``out[i - lo] = W X[i] + b`` for the rows ``lo:hi`` of ``X``, with W (n_out, n_in) at
    ``params[w_ofs:]`` and b at ``params[b_ofs:]`` (n_in = X.shape[1], n_out = out.shape[1]).

    Four rows at a time share each row of W (one load, four products). Each dot product is summed
    from 0 and the bias added last: started from the bias (as ``_dense_forward`` does), LLVM
    kept the sum in one scalar chain, 4× slower here."""
    n_in = X.shape[1]
    n_out = out.shape[1]
    W = params[w_ofs : w_ofs + n_in * n_out].reshape((n_out, n_in))
    b = params[b_ofs : b_ofs + n_out]
    i = lo
    while i + 4 <= hi:
        x0, x1, x2, x3 = X[i], X[i + 1], X[i + 2], X[i + 3]
        for o in range(n_out):
            w = W[o]
            a0 = a1 = a2 = a3 = 0.0
            for j in range(n_in):
                wj = w[j]
                a0 += x0[j] * wj
                a1 += x1[j] * wj
                a2 += x2[j] * wj
                a3 += x3[j] * wj
            out[i - lo, o] = a0 + b[o]
            out[i + 1 - lo, o] = a1 + b[o]
            out[i + 2 - lo, o] = a2 + b[o]
            out[i + 3 - lo, o] = a3 + b[o]
        i += 4
    while i < hi:
        x = X[i]
        for o in range(n_out):
            w = W[o]
            acc = 0.0
            for j in range(n_in):
                acc += x[j] * w[j]
            out[i - lo, o] = acc + b[o]
        i += 1


@njit(cache=True, nogil=True)
def shift_rows(Z, y, lo, zy, hit):
    """Subtract each row's maximum from the logits ``Z`` (row i is sample ``lo + i``); write the
    shifted logit of the label into ``zy`` and whether the argmax (first index on ties, as
    ``np.argmax``) is the label into ``hit``."""
    n, C = Z.shape
    for i in range(n):
        zmax = Z[i, 0]
        arg = 0
        for c in range(1, C):
            if Z[i, c] > zmax:
                zmax = Z[i, c]
                arg = c
        label = y[lo + i]
        hit[i] = arg == label
        for c in range(C):
            Z[i, c] -= zmax
        zy[i] = Z[i, label]


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def row_sums(E, out):
    """``out[i] = Σ_c E[i, c]`` (the softmax denominators of a block)."""
    n, C = E.shape
    for i in range(n):
        acc = 0.0
        for c in range(C):
            acc += E[i, c]
        out[i] = acc


# --- local SGD (fairagg.local wraps these) ---------------------------------------------------
# They live beside the kernel they call: Numba's on-disk cache is invalidated per source file,
# so a caller in another file would keep running a stale copy of an edited kernel. They release
# the GIL: models._parallel runs one client per call on its threads.


@njit(cache=True, nogil=True)
def sgd_one_client(theta, X, y, n, perm, p0, hyper, delta):
    """Local SGD of one client from ``theta`` (see ``fairagg.local``); writes theta - w into
    ``delta``. F_k(theta) and the training accuracy of theta are not computed here: the caller
    evaluates them with the blocked evaluation of ``FlatModel._evaluate_rows`` (about twice as
    fast as this kernel's row-by-row forward pass, and then equal to ``evaluate_clients`` on the
    client's rows bit for bit).

    The client owns ``n`` rows; ``perm[p0 : p0 + epochs*n]`` holds its visiting order (indices
    into ``X``);
    ``hyper = (epochs, B, lr, mu, prox, H, C, act, l2, pf_m, pf_eps, pf_huber)``; ``pf_m > 0``
    trains on PropFair's surrogate −log(1 − f/M) of each minibatch loss f: the minibatch gradient
    is scaled by 1/(M − f), or by 1/M (1/ε when ``pf_huber``) where M − f < ε (SPEC §6).
    """
    epochs, B, lr, mu, prox, H, C, act, l2, pf_m, pf_eps, pf_huber = hyper
    d = theta.size
    work = np.empty(work_size(H, C), dtype=theta.dtype)
    w = theta.copy()
    v = np.zeros(d, dtype=theta.dtype)
    g = np.empty(d, dtype=theta.dtype)
    for e in range(epochs):
        base = p0 + e * n
        for s in range(0, n, B):
            stop = min(s + B, n)
            f, _ = batch_loss_grad(w, X, y, perm, base + s, base + stop, H, C, act, l2, g, work)
            if pf_m > 0.0:
                gap = pf_m - f
                if gap >= pf_eps:
                    scale = 1.0 / gap
                elif pf_huber:
                    scale = 1.0 / pf_eps
                else:
                    scale = 1.0 / pf_m
                for q in range(d):
                    g[q] *= scale
            if prox != 0.0:
                for q in range(d):
                    g[q] += prox * (w[q] - theta[q])
            if mu != 0.0:
                for q in range(d):
                    v[q] = mu * v[q] + g[q]
                    w[q] -= lr * v[q]
            else:
                for q in range(d):
                    w[q] -= lr * g[q]
    for q in range(d):
        delta[q] = theta[q] - w[q]


# --- one gradient per client (the SGD-type rules: q-FedSGD, AFL) -----------------------------


@njit(cache=True, nogil=True)
def gradient_one_client(theta, X, y, all_rows, lo, hi, perm, p0, bsz, dims, grad):
    """Write ∇F_k(theta) into ``grad``: the full-batch mean gradient over rows ``lo:hi`` when
    ``bsz >= hi - lo``, else the mean over the minibatch ``perm[p0 : p0 + bsz]``. Returns
    (F_k(theta), training accuracy of theta) over all the client's rows; ``dims = (H, C, act,
    l2)``."""
    H, C, act, l2 = dims
    n = hi - lo
    work = np.empty(work_size(H, C), dtype=theta.dtype)
    if bsz >= n:
        loss, correct = batch_loss_grad(theta, X, y, all_rows, lo, hi, H, C, act, l2, grad, work)
    else:
        no_grad = np.empty(0, dtype=theta.dtype)
        loss, correct = batch_loss_grad(theta, X, y, all_rows, lo, hi, H, C, act, l2, no_grad, work)
        batch_loss_grad(theta, X, y, perm, p0, p0 + bsz, H, C, act, l2, grad, work)
    return loss, correct / n

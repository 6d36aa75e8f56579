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


# reassoc lets LLVM split the length-p dot products over SIMD lanes and several accumulators
# (the loops are otherwise one dependent addition chain); contract allows FMA. No flag that
# changes NaN or infinity semantics is set. Results differ from the NumPy reference only by
# round-off (tested).
#
# The softmax helpers below state these flags too. They always ran with them: numba compiles a
# callee without flags of its own with its caller's (batch_loss_grad's), but keeps the first
# version it compiled, on disk too. One compiled by a direct call first (a test, a user) would
# have had none, and every later training run on that machine would have trained other bits.
_FASTMATH = {"reassoc", "contract"}


@njit(cache=True)
def work_size(n_hidden: int, n_classes: int) -> int:
    """Length of the scratch buffer ``batch_loss_grad`` needs."""
    return n_classes + 3 * n_hidden


@njit(cache=True, fastmath=_FASTMATH)
def _cross_entropy_row(z, C, label):
    """Cross-entropy of logits ``z[:C]`` against ``label``; ``z`` becomes dF/dz = softmax − onehot.

    Returns ``(loss, hit)`` with ``hit`` true when the argmax (first on ties) equals the label.
    """
    zy = z[label]
    lse, arg = _softmax_row(z, C)
    z[label] -= 1.0
    return lse - zy, arg == label


@njit(cache=True, fastmath=_FASTMATH)
def _softmax_grad_row(z, C, label):
    """``z[:C]`` becomes dF/dz = softmax − onehot, as in ``_cross_entropy_row``, without the
    loss (no logarithm)."""
    _softmax_probs(z, C)
    z[label] -= 1.0


@njit(cache=True, fastmath=_FASTMATH)
def _softmax_row(z, C):
    """Turn logits ``z[:C]`` into probabilities in place; return (log-sum-exp, argmax)."""
    zmax, arg, s = _softmax_probs(z, C)
    return zmax + np.log(s), arg


@njit(cache=True, fastmath=_FASTMATH)
def _softmax_probs(z, C):
    """Turn logits ``z[:C]`` into probabilities in place; return (max, argmax, Σ exp(z − max)).

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
    return zmax, arg, s


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
def batch_loss_grad(
    params, X, y, rows, start, stop, n_hidden, n_classes, act, l2, grad, work, need_loss
):
    """Mean cross-entropy (+ l2/2 ||weights||^2) over ``X[rows[start:stop]]``.

    Writes the mean gradient into ``grad`` unless ``grad.size == 0``. Returns ``(loss, correct)``
    where ``correct`` counts argmax predictions equal to the label (first index on ties, as
    ``np.argmax``). ``loss`` is accumulated in float64 whatever the parameter dtype. With
    ``need_loss`` false and a gradient wanted, only the gradient is computed (no logarithm, no
    penalty) and ``(0.0, 0)`` is returned: the training steps that do not read the loss. Without
    a gradient the loss is always computed. Logistic
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
        if not want:
            li, hit = _cross_entropy_row(z, C, y[rows[i]])
            loss += li
            correct += hit
            continue
        if need_loss:
            li, hit = _cross_entropy_row(z, C, y[rows[i]])  # z becomes dF/dz
            loss += li
            correct += hit
        else:
            _softmax_grad_row(z, C, y[rows[i]])
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
    if l2 != 0.0 and (need_loss or not want):
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


# --- the clients' shuffles, drawn in the kernel ----------------------------------------------
# ``fairagg.local.client_shuffles`` defines a client's visiting order as successive
# ``rng.permutation(n)`` calls of ``rng = np.random.default_rng(entropy)``. Creating that
# generator costs about 8 µs of Python (SeedSequence's hashing and PCG64's seeding), as much as a
# small client's training; the functions below compute the same numbers in the kernel: NumPy's
# SeedSequence (pool of 4 words), PCG64 (128-bit LCG, XSL-RR output, 32-bit draws served from
# the halves of a 64-bit one), ``random_interval`` (masked rejection) and the Fisher-Yates loop of
# ``Generator.shuffle``. All arithmetic is unsigned 64-bit; 32-bit words are masked explicitly.
# Tested equal to NumPy's generator for many entropies and sizes (tests/test_local.py).

_M32 = np.uint64(0xFFFFFFFF)
_U0 = np.uint64(0)
_U1 = np.uint64(1)
_U16 = np.uint64(16)
_U32 = np.uint64(32)
_U58 = np.uint64(58)
_U63 = np.uint64(63)
_U64 = np.uint64(64)
# SeedSequence's hash constants
_INIT_A = np.uint64(0x43B0D7E5)
_MULT_A = np.uint64(0x931E8875)
_INIT_B = np.uint64(0x8B51F9DD)
_MULT_B = np.uint64(0x58F38DED)
_MIX_MULT_L = np.uint64(0xCA01F9DD)
_MIX_MULT_R = np.uint64(0x4973F715)
# PCG64's multiplier, high and low 64 bits
_PCG_MULT_HI = np.uint64(2549297995355413924)
_PCG_MULT_LO = np.uint64(4865540595714422341)


@njit(cache=True, inline="always")
def _mulhi64(x, y):
    """High 64 bits of the 128-bit product of two unsigned 64-bit integers."""
    x0, x1 = x & _M32, x >> _U32
    y0, y1 = y & _M32, y >> _U32
    w0 = x0 * y0
    t = x1 * y0 + (w0 >> _U32)
    w1 = (t & _M32) + x0 * y1
    return x1 * y1 + (t >> _U32) + (w1 >> _U32)


@njit(cache=True, inline="always")
def _pcg_step(st):
    """state = state · multiplier + inc (mod 2^128); ``st`` starts [state_hi, state_lo, inc_hi,
    inc_lo]."""
    hi, lo = st[0], st[1]
    new_lo = lo * _PCG_MULT_LO
    new_hi = _mulhi64(lo, _PCG_MULT_LO) + lo * _PCG_MULT_HI + hi * _PCG_MULT_LO
    s_lo = new_lo + st[3]
    st[0] = new_hi + st[2] + (_U1 if s_lo < new_lo else _U0)
    st[1] = s_lo


@njit(cache=True)
def _rng_state(entropy):
    """The state of ``np.random.default_rng(entropy)``'s PCG64, ``entropy`` given as the 32-bit
    words its SeedSequence reads (uint64 < 2^32): [state_hi, state_lo, inc_hi, inc_lo, has32,
    word] (``has32``/``word``: the buffered high half of the last 64-bit draw).

    SeedSequence mixes the words into a pool of 4 (hashmix: v ^= h; h *= MULT_A; v *= h;
    v ^= v >> 16; mix(x, y) = (L x − R y) ^ (...) >> 16, all mod 2^32), generates 8 words from
    the pool with a second hash (INIT_B, MULT_B), and PCG64 is seeded with the first two 64-bit
    words as the initial state and the last two as the stream (inc = 2 · stream + 1): state = 0,
    step, state += seed, step."""
    ne = entropy.size
    pool = np.zeros(4, dtype=np.uint64)
    hc = _INIT_A
    for k in range(4 + 12 + 4 * max(ne - 4, 0)):  # every hashmix of the pool's mixing, in order
        if k < 4:
            v, dst = entropy[k] if k < ne else _U0, k
        elif k < 16:
            src, r = divmod(k - 4, 3)  # the 3 destinations of each source
            dst = r if r < src else r + 1
            v = pool[src]
        else:
            src, dst = divmod(k - 16, 4)
            v = entropy[4 + src]
        v = (v ^ hc) & _M32
        hc = (hc * _MULT_A) & _M32
        v = (v * hc) & _M32
        v ^= v >> _U16
        if k < 4:
            pool[dst] = v
        else:  # mix(pool[dst], hashmix(...))
            r = (_MIX_MULT_L * pool[dst] - _MIX_MULT_R * v) & _M32
            pool[dst] = r ^ (r >> _U16)
    st = np.zeros(6, dtype=np.uint64)
    hc = _INIT_B
    for i in range(8):  # generate_state(4, uint64): 8 words cycling over the pool, in st[6:]...
        v = (pool[i % 4] ^ hc) & _M32
        hc = (hc * _MULT_B) & _M32
        v = (v * hc) & _M32
        v ^= v >> _U16
        # ... paired little-endian: words (0, 1) seed_hi, (2, 3) seed_lo, (4, 5) inc_hi, (6, 7)
        st[i // 2] |= v << (_U32 if i % 2 else _U0)
    seed_hi, seed_lo, inc_hi, inc_lo = st[0], st[1], st[2], st[3]
    st[0] = st[1] = _U0
    st[2] = (inc_hi << _U1) | (inc_lo >> _U63)  # inc = (initseq << 1) | 1
    st[3] = (inc_lo << _U1) | _U1
    _pcg_step(st)
    lo = st[1] + seed_lo  # state += initstate
    st[0] = st[0] + seed_hi + (_U1 if lo < seed_lo else _U0)
    st[1] = lo
    _pcg_step(st)
    return st


@njit(cache=True, inline="always")
def _pcg_next32(st):
    """NumPy's PCG64 next_uint32: the low half of a fresh 64-bit draw, then its high half."""
    if st[4] != _U0:
        st[4] = _U0
        return st[5]
    _pcg_step(st)
    hi, lo = st[0], st[1]
    rot = hi >> _U58
    x = hi ^ lo
    out = (x >> rot) | (x << ((_U64 - rot) & _U63))
    st[4] = _U1
    st[5] = out >> _U32
    return out & _M32


@njit(cache=True)
def _shuffle_into(order, st):
    """``order[:] = rng.permutation(order.size)`` for the generator state ``st`` (sizes below
    2^32, where ``random_interval`` draws 32-bit words)."""
    n = order.size
    for i in range(n):
        order[i] = i
    for i in range(n - 1, 0, -1):
        mask = np.uint64(i)
        mask |= mask >> np.uint64(1)
        mask |= mask >> np.uint64(2)
        mask |= mask >> np.uint64(4)
        mask |= mask >> np.uint64(8)
        mask |= mask >> np.uint64(16)
        while True:
            v = _pcg_next32(st) & mask
            if v <= np.uint64(i):
                break
        j = np.int64(v)
        order[i], order[j] = order[j], order[i]


@njit(cache=True, nogil=True)
def shuffles(entropy, n, epochs):
    """``fairagg.local.client_shuffles``' array, shape (epochs, n), for ``default_rng(entropy)``
    given as its SeedSequence words (for tests and for callers that want the orders); n ≤ 2^32
    (above, NumPy draws 64-bit words)."""
    if n > 2**32:
        raise ValueError("n must be at most 2**32")
    st = _rng_state(entropy)
    out = np.empty((epochs, n), dtype=np.int64)
    for e in range(epochs):
        _shuffle_into(out[e], st)
    return out


# --- local SGD (fairagg.local wraps these) ---------------------------------------------------
# They live beside the kernel they call: Numba's on-disk cache is invalidated per source file,
# so a caller in another file would keep running a stale copy of an edited kernel. They release
# the GIL: models._parallel runs one client per call on its threads.


@njit(cache=True, nogil=True)
def sgd_one_client(theta, X, y, lo, n, entropy, hyper, delta):
    """Local SGD of one client from ``theta`` (see ``fairagg.local``); writes theta - w into
    ``delta``. F_k(theta) and the training accuracy of theta are not computed here: the caller
    evaluates them with the blocked evaluation ``FlatModel._evaluate_one`` (about 50 ns a row
    against 170 for this kernel's row-by-row forward pass of the 60 × 10 logistic model, and then
    equal to ``evaluate_clients`` on the client's rows bit for bit).

    The client owns the ``n`` rows ``lo : lo + n`` of ``X``; each epoch visits them in the order
    of a fresh ``rng.permutation(n)`` of ``rng = np.random.default_rng(entropy)`` (``entropy``
    given as its SeedSequence words, see ``shuffles``);
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
    st = _rng_state(entropy)
    order = np.empty(n, dtype=np.int64)
    for _ in range(epochs):
        _shuffle_into(order, st)
        for i in range(n):
            order[i] += lo
        for s in range(0, n, B):
            stop = min(s + B, n)
            f, _ = batch_loss_grad(w, X, y, order, s, stop, H, C, act, l2, g, work, pf_m > 0.0)
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
        loss, correct = batch_loss_grad(
            theta, X, y, all_rows, lo, hi, H, C, act, l2, grad, work, True
        )
    else:
        no_grad = np.empty(0, dtype=theta.dtype)
        loss, correct = batch_loss_grad(
            theta, X, y, all_rows, lo, hi, H, C, act, l2, no_grad, work, True
        )
        batch_loss_grad(theta, X, y, perm, p0, p0 + bsz, H, C, act, l2, grad, work, True)
    return loss, correct / n

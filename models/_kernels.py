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
from llvmlite import ir  # type: ignore[import-untyped]
from numba import njit, types
from numba.extending import intrinsic

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


# integer arithmetic only: the flags (its fast-math caller's, stated) change nothing here
@njit(cache=True, inline="always", fastmath=_FASTMATH)
def _mulhi64(x, y):
    """High 64 bits of the 128-bit product of two unsigned 64-bit integers."""
    x0, x1 = x & _M32, x >> _U32
    y0, y1 = y & _M32, y >> _U32
    w0 = x0 * y0
    t = x1 * y0 + (w0 >> _U32)
    w1 = (t & _M32) + x0 * y1
    return x1 * y1 + (t >> _U32) + (w1 >> _U32)


# integer arithmetic only: the flags (its fast-math caller's, stated) change nothing here
@njit(cache=True, inline="always", fastmath=_FASTMATH)
def _pcg_step(st):
    """state = state · multiplier + inc (mod 2^128); ``st`` starts [state_hi, state_lo, inc_hi,
    inc_lo]."""
    hi, lo = st[0], st[1]
    new_lo = lo * _PCG_MULT_LO
    new_hi = _mulhi64(lo, _PCG_MULT_LO) + lo * _PCG_MULT_HI + hi * _PCG_MULT_LO
    s_lo = new_lo + st[3]
    st[0] = new_hi + st[2] + (_U1 if s_lo < new_lo else _U0)
    st[1] = s_lo


# integer arithmetic only: the flags (its fast-math caller's, stated) change nothing here
@njit(cache=True, fastmath=_FASTMATH)
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


# integer arithmetic only: the flags (its fast-math caller's, stated) change nothing here
@njit(cache=True, inline="always", fastmath=_FASTMATH)
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


# integer arithmetic only: the flags (its fast-math caller's, stated) change nothing here
@njit(cache=True, fastmath=_FASTMATH)
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
# the GIL: fairagg.kernels._threads runs one client per call on its threads.
#
# A training step works on whole minibatches, in scratch arrays whose rows are padded with zeros
# to a multiple of ``_LANES`` entries: the batch's rows gathered into ``Xb`` (nb × P), the
# weights in a padded copy of the parameter vector (W1 (H × P) | b1 | W2 (C × HP) | b2, logistic
# W (C × P) | b; P, HP: p, H rounded up), the momentum, θ and the gradient alike. Every inner loop
# then runs over a multiple of the vector width with no scalar remainder, the logits are computed
# four rows at a time (each weight row loaded once for four dot products), the weight gradients
# as four-row rank updates, and the exponentials and tanh as vectorisable loops (``_exp``,
# ``_tanh``; libm's are scalar calls, about 11 and 22 ns each on the development host against
# 2-3 and 3-6 ns vectorised: 32 tanh a row were the MLP's largest cost). The zero pads stay zero
# (their inputs, weights, gradients and momenta are 0) and are never copied out. Functions with a
# division state ``error_model="numpy"``: Python's zero-division check is an exception path that
# kept LLVM from inlining them and the loops that call them scalar. Equal to
# ``fairagg.local.sgd_reference`` to round-off, step by step (tests/test_local_steps.py): new
# training bits against the kernel of before (issue 38), no change of algorithm.

#: Padding unit of the scratch rows: 8 doubles, one AVX-512 register (two AVX2 ones).
_LANES = 8

_LOG2E = 1.4426950408889634
# fdlibm's split of ln 2: _LN2_HI has 32 trailing zero bits, so k · _LN2_HI is exact for |k| < 2^20
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10


@intrinsic
def _pow2(typingctx, k):
    """2.0 ** k for an int64 k in [-1022, 1023], built from its exponent bits."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        bits = builder.shl(builder.add(args[0], ir.Constant(i64, 1023)), ir.Constant(i64, 52))
        return builder.bitcast(bits, ir.DoubleType())

    return sig, codegen


# Only "contract" (FMA): the range reduction below must be evaluated in the order written, which
# "reassoc" would allow LLVM to change. Stated explicitly so that a fast-math caller's flags are
# never inherited (tests/test_compiled_flags.py).
@njit(cache=True, fastmath={"contract"}, inline="always", error_model="numpy")
def _exp_body(x):
    """e^x in float64 for x ≤ 709 (NaN stays NaN, x < −708 gives 0), in a form LLVM vectorises.

    x = k ln 2 + r with k = round(x / ln 2) and |r| ≤ ln 2 / 2 (Cody-Waite, two-part ln 2), e^r by
    its Taylor polynomial of degree 13 (truncation below 1e-17 relative), times 2^k from its
    bits. Within 2 ulp of ``np.exp`` on [−708, 709] (tested); below −708, e^x < 3.3e-308 is
    returned as 0.
    """
    xc = x if x > -708.0 else -708.0
    kf = np.floor(xc * _LOG2E + 0.5)
    r = (xc - kf * _LN2_HI) - kf * _LN2_LO
    q = 1.0 / 6227020800.0
    q = q * r + 1.0 / 479001600.0
    q = q * r + 1.0 / 39916800.0
    q = q * r + 1.0 / 3628800.0
    q = q * r + 1.0 / 362880.0
    q = q * r + 1.0 / 40320.0
    q = q * r + 1.0 / 5040.0
    q = q * r + 1.0 / 720.0
    q = q * r + 1.0 / 120.0
    q = q * r + 1.0 / 24.0
    q = q * r + 1.0 / 6.0
    q = q * r + 0.5
    q = q * r + 1.0
    q = q * r + 1.0
    e = q * _pow2(np.int64(kf))
    e = e if x >= -708.0 else 0.0
    return x if x != x else e


@njit(cache=True, fastmath={"contract"}, error_model="numpy")
def _exp(x):
    """``_exp_body`` as a function of its own (LLVM inlines it into the loops that call it)."""
    return _exp_body(x)


@njit(cache=True, fastmath={"contract"}, error_model="numpy")
def _tanh(a):
    """tanh(a) in float64, in a form LLVM vectorises: 1 − 2 / (e^{2|a|} + 1) with the sign of a,
    and its Taylor polynomial to a¹⁵ where |a| < 0.15 (truncation below 1e-16 relative; the
    subtraction would lose relative accuracy there). Within 4e-15 relative of ``np.tanh``
    (tested)."""
    ax = abs(a)
    # _exp_body inlined here (a call of _exp inside _tanh kept the callers' loops scalar)
    t = _exp_body(2.0 * (ax if ax < 20.0 else 20.0))  # tanh(20) rounds to 1
    big = 1.0 - 2.0 / (t + 1.0)
    a2 = a * a
    small = a2 * (-929569.0 / 638512875.0) + 21844.0 / 6081075.0
    small = small * a2 - 1382.0 / 155925.0
    small = small * a2 + 62.0 / 2835.0
    small = small * a2 - 17.0 / 315.0
    small = small * a2 + 2.0 / 15.0
    small = small * a2 - 1.0 / 3.0
    small = ax + ax * (small * a2)
    h = small if ax < 0.15 else big
    h = h if a >= 0.0 else -h
    return a if a != a else h


@njit(cache=True, fastmath=_FASTMATH)
def _padded(n):
    """``n`` rounded up to a multiple of ``_LANES``."""
    return (n + _LANES - 1) // _LANES * _LANES


@njit(cache=True, fastmath=_FASTMATH)
def _padded_index(p, H, C):
    """Position in the padded layout of every entry of the flat parameter vector."""
    P = _padded(p)
    if H == 0:
        idx = np.empty(C * p + C, dtype=np.int64)
        q = 0
        for o in range(C):  # W
            for j in range(p):
                idx[q] = o * P + j
                q += 1
        for c in range(C):  # b
            idx[q] = C * P + c
            q += 1
        return idx
    HP = _padded(H)
    idx = np.empty(H * p + H + C * H + C, dtype=np.int64)
    q = 0
    for k in range(H):  # W1
        for j in range(p):
            idx[q] = k * P + j
            q += 1
    for k in range(H):  # b1
        idx[q] = H * P + k
        q += 1
    w2 = H * P + H
    for c in range(C):  # W2
        for k in range(H):
            idx[q] = w2 + c * HP + k
            q += 1
    for c in range(C):  # b2
        idx[q] = w2 + C * HP + c
        q += 1
    return idx


@njit(cache=True, fastmath=_FASTMATH)
def _dense_block(wp, w_ofs, b_ofs, Xin, nb, out, n_out):
    """``out[i] = W Xin[i] + b`` for the rows ``i < nb`` of ``Xin`` (row length n_in, a multiple
    of ``_LANES``, zero-padded), W (n_out, n_in) at ``wp[w_ofs:]``, b at ``wp[b_ofs:]``: four
    rows at a time (then two, then one) share each row of W, every dot product summed from 0 and
    the bias added last (as ``dense_rows``)."""
    n_in = Xin.shape[1]
    i = 0
    while i + 4 <= nb:
        x0, x1, x2, x3 = Xin[i], Xin[i + 1], Xin[i + 2], Xin[i + 3]
        for o in range(n_out):
            w = wp[w_ofs + o * n_in : w_ofs + (o + 1) * n_in]
            a0 = a1 = a2 = a3 = 0.0
            for j in range(n_in):
                wj = w[j]
                a0 += x0[j] * wj
                a1 += x1[j] * wj
                a2 += x2[j] * wj
                a3 += x3[j] * wj
            bo = wp[b_ofs + o]
            out[i, o] = a0 + bo
            out[i + 1, o] = a1 + bo
            out[i + 2, o] = a2 + bo
            out[i + 3, o] = a3 + bo
        i += 4
    if i + 2 <= nb:
        x0, x1 = Xin[i], Xin[i + 1]
        for o in range(n_out):
            w = wp[w_ofs + o * n_in : w_ofs + (o + 1) * n_in]
            a0 = a1 = 0.0
            for j in range(n_in):
                wj = w[j]
                a0 += x0[j] * wj
                a1 += x1[j] * wj
            bo = wp[b_ofs + o]
            out[i, o] = a0 + bo
            out[i + 1, o] = a1 + bo
        i += 2
    if i < nb:
        x = Xin[i]
        for o in range(n_out):
            w = wp[w_ofs + o * n_in : w_ofs + (o + 1) * n_in]
            acc = 0.0
            for j in range(n_in):
                acc += x[j] * w[j]
            out[i, o] = acc + wp[b_ofs + o]


@njit(cache=True, fastmath=_FASTMATH)
def _dense_grad(gp, w_ofs, b_ofs, D, Xin, nb, n_out):
    """Weight and bias gradients of a dense layer: ``W_grad[o] = Σ_i D[i, o] Xin[i]`` (rows
    ``i < nb``, row length n_in a multiple of ``_LANES``) into ``gp[w_ofs:]``, ``b_grad[o] =
    Σ_i D[i, o]`` into ``gp[b_ofs:]``; four rows of ``Xin`` (then two, then one) per pass over a
    gradient row."""
    n_in = Xin.shape[1]
    for o in range(n_out):
        g = gp[w_ofs + o * n_in : w_ofs + (o + 1) * n_in]
        for j in range(n_in):
            g[j] = 0.0
        sb = 0.0
        i = 0
        while i + 4 <= nb:
            x0, x1, x2, x3 = Xin[i], Xin[i + 1], Xin[i + 2], Xin[i + 3]
            d0, d1, d2, d3 = D[i, o], D[i + 1, o], D[i + 2, o], D[i + 3, o]
            for j in range(n_in):
                g[j] += d0 * x0[j] + d1 * x1[j] + d2 * x2[j] + d3 * x3[j]
            sb += (d0 + d1) + (d2 + d3)
            i += 4
        if i + 2 <= nb:
            x0, x1 = Xin[i], Xin[i + 1]
            d0, d1 = D[i, o], D[i + 1, o]
            for j in range(n_in):
                g[j] += d0 * x0[j] + d1 * x1[j]
            sb += d0 + d1
            i += 2
        if i < nb:
            x = Xin[i]
            d0 = D[i, o]
            for j in range(n_in):
                g[j] += d0 * x[j]
            sb += d0
        gp[b_ofs + o] = sb


@njit(cache=True, fastmath=_FASTMATH)
def _hidden_grad(wp, w2, D, dH, nb, C):
    """``dH[i] = Σ_c D[i, c] W2[c]`` for the rows ``i < nb`` (W2 (C, HP) at ``wp[w2:]``, HP the
    padded row length of ``dH``): four rows of W2 per pass over a row of ``dH``."""
    HP = dH.shape[1]
    for i in range(nb):
        dh = dH[i]
        for k in range(HP):
            dh[k] = 0.0
        c = 0
        while c + 4 <= C:
            z0, z1, z2, z3 = D[i, c], D[i, c + 1], D[i, c + 2], D[i, c + 3]
            v0 = wp[w2 + c * HP : w2 + (c + 1) * HP]
            v1 = wp[w2 + (c + 1) * HP : w2 + (c + 2) * HP]
            v2 = wp[w2 + (c + 2) * HP : w2 + (c + 3) * HP]
            v3 = wp[w2 + (c + 3) * HP : w2 + (c + 4) * HP]
            for k in range(HP):
                dh[k] += z0 * v0[k] + z1 * v1[k] + z2 * v2[k] + z3 * v3[k]
            c += 4
        while c < C:
            z0 = D[i, c]
            v0 = wp[w2 + c * HP : w2 + (c + 1) * HP]
            for k in range(HP):
                dh[k] += z0 * v0[k]
            c += 1


@njit(cache=True, fastmath=_FASTMATH, error_model="numpy")
def _softmax_rows(Z, lab, nb, C, inv, need_loss):
    """The rows ``i < nb`` of the logits ``Z`` become ``(softmax − onehot) · inv`` (dF/dz of the
    batch mean); returns Σ_i of the cross-entropy when ``need_loss`` (else 0). The exponentials
    run as one loop over the batch (``_exp``)."""
    loss = 0.0
    for i in range(nb):
        zmax = Z[i, 0]
        for c in range(1, C):
            zmax = Z[i, c] if Z[i, c] > zmax else zmax
        for c in range(C):
            Z[i, c] = Z[i, c] - zmax
        if need_loss:
            loss -= Z[i, lab[i]]
    z = Z[:nb].reshape(nb * C)  # one loop over the batch: whole vectors, few remainders
    for q in range(nb * C):
        z[q] = _exp(np.float64(z[q]))
    for i in range(nb):
        s = 0.0
        for c in range(C):
            s += Z[i, c]
        if need_loss:
            loss += np.log(np.float64(s))
        f = inv / s
        for c in range(C):
            Z[i, c] *= f
        Z[i, lab[i]] -= inv
    return loss


# sgd_one_client is one function with its epoch loop in it (issue 39 item 5 allows a compiled
# kernel a stated reason): numba compiles every compiled callee into its caller's module and
# optimises the whole again there, so a separate epoch function was compiled twice on a
# process's first run, alone and inside sgd_one_client (1-2 s of the first `fairagg run`,
# validate/bench_cold_start.py). The fastmath flags are the epoch loop's; the setup and copy-out
# around it have no sums for them to reorder.
@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def sgd_one_client(theta, X, y, lo, n, entropy, hyper, delta):
    """Local SGD of one client from ``theta`` (see ``fairagg.local``); writes theta - w into
    ``delta``. F_k(theta) and the training accuracy of theta are not computed here: the caller
    evaluates them with the model's blocked evaluation (``models._base.SegmentEvaluation``).

    The client owns the ``n`` rows ``lo : lo + n`` of ``X``; each epoch visits them in the order
    of a fresh ``rng.permutation(n)`` of ``rng = np.random.default_rng(entropy)`` (``entropy``
    given as its SeedSequence words, see ``shuffles``);
    ``hyper = (epochs, B, lr, mu, prox, H, C, act, l2, pf_m, pf_eps, pf_huber)``; ``pf_m > 0``
    trains on PropFair's surrogate −log(1 − f/M) of each minibatch loss f: the minibatch gradient
    is scaled by 1/(M − f), or by 1/M (1/ε when ``pf_huber``) where M − f < ε (SPEC §6).
    Each step computes the batch's mean gradient (+ l2 · weights) in the padded scratch layout
    described above, then ``g ← scale · g + prox (w − θ)``, ``v ← mu v + g``, ``w ← w − lr v``
    (the epoch loop below).
    """
    epochs, B, lr, mu, prox, H, C, act, l2, pf_m, pf_eps, pf_huber = hyper
    dt = theta.dtype
    p = X.shape[1]
    P = _padded(p)
    idx = _padded_index(p, H, C)
    dp = C * P + C if H == 0 else H * P + H + C * _padded(H) + C
    wp = np.zeros(dp, dtype=dt)
    tp = np.zeros(dp, dtype=dt)
    for q in range(theta.size):
        tp[idx[q]] = theta[q]
        wp[idx[q]] = theta[q]
    vp = np.zeros(dp, dtype=dt)
    gp = np.zeros(dp, dtype=dt)
    nbmax = min(B, n)
    HP = max(_padded(H), 1)
    # the batch's scratch: its rows, labels, logits (then dF/dz), pre-activations, hidden
    # activations (zero pads) and dF/dh (then dF/da)
    Xb = np.zeros((nbmax, P), dtype=dt)
    lab = np.empty(nbmax, dtype=np.int64)
    Z = np.empty((nbmax, C), dtype=dt)
    A = np.empty((nbmax, max(H, 1)), dtype=dt)
    Hh = np.zeros((nbmax, HP), dtype=dt)
    dH = np.zeros((nbmax, HP), dtype=dt)
    # offsets in wp: W1 | b1 | W2 | b2 (logistic: W | b, with w2 = w_hi1 = 0)
    if H == 0:
        w2, b2, w_hi1 = 0, C * P, 0
    else:
        w2, b2, w_hi1 = H * P + H, H * P + H + C * HP, H * P
    need_loss = pf_m > 0.0
    # np.int64(0), not 0: a literal argument compiled _dense_block and _dense_grad a second time,
    # for Literal[int](0), in every cold process
    z0 = np.int64(0)
    st = _rng_state(entropy)
    order = np.empty(n, dtype=np.int64)
    for _ in range(epochs):
        _shuffle_into(order, st)  # this epoch's batches: the rows lo + order[s : s + B]
        for s in range(0, n, B):
            nb = min(s + B, n) - s
            for i in range(nb):
                r = lo + order[s + i]
                xr = X[r]
                xb = Xb[i]
                for j in range(p):
                    xb[j] = xr[j]
                lab[i] = y[r]
            inv = 1.0 / nb
            if H == 0:
                _dense_block(wp, z0, b2, Xb, nb, Z, C)
            else:
                _dense_block(wp, z0, w_hi1, Xb, nb, A, H)
                if act == ACT_TANH:  # the test outside the loops: each loop vectorises on its own
                    for i in range(nb):
                        for k in range(H):
                            Hh[i, k] = _tanh(np.float64(A[i, k]))
                else:
                    for i in range(nb):
                        for k in range(H):
                            Hh[i, k] = A[i, k] if A[i, k] > 0.0 else 0.0
                _dense_block(wp, w2, b2, Hh, nb, Z, C)
            f = _softmax_rows(Z, lab, nb, C, inv, need_loss)  # Z becomes dF/dz
            if H == 0:
                _dense_grad(gp, z0, b2, Z, Xb, nb, C)
            else:
                _hidden_grad(wp, w2, Z, dH, nb, C)  # dF/dh = dF/dz W2
                _dense_grad(gp, w2, b2, Z, Hh, nb, C)
                if act == ACT_TANH:
                    for i in range(nb):
                        for k in range(H):
                            dH[i, k] *= 1.0 - Hh[i, k] * Hh[i, k]
                else:
                    for i in range(nb):
                        for k in range(H):
                            dH[i, k] = 0.0 if A[i, k] <= 0.0 else dH[i, k]
                _dense_grad(gp, z0, w_hi1, dH, Xb, nb, H)
            if need_loss:
                reg = 0.0
                if l2 != 0.0:
                    for q in range(w_hi1):
                        reg += wp[q] * wp[q]
                    for q in range(w2, b2):
                        reg += wp[q] * wp[q]
                f = f * inv + 0.5 * l2 * reg
                gap = pf_m - f
                if gap >= pf_eps:
                    scale = 1.0 / gap
                elif pf_huber:
                    scale = 1.0 / pf_eps
                else:
                    scale = 1.0 / pf_m
                if l2 != 0.0:
                    for q in range(w_hi1):
                        gp[q] = (gp[q] + l2 * wp[q]) * scale
                    for q in range(w_hi1, w2):
                        gp[q] *= scale
                    for q in range(w2, b2):
                        gp[q] = (gp[q] + l2 * wp[q]) * scale
                    for q in range(b2, dp):
                        gp[q] *= scale
                else:
                    for q in range(dp):
                        gp[q] *= scale
            elif l2 != 0.0:
                for q in range(w_hi1):
                    gp[q] += l2 * wp[q]
                for q in range(w2, b2):
                    gp[q] += l2 * wp[q]
            if prox != 0.0:
                for q in range(dp):
                    gp[q] += prox * (wp[q] - tp[q])
            if mu != 0.0:
                for q in range(dp):
                    vp[q] = mu * vp[q] + gp[q]
                    wp[q] -= lr * vp[q]
            else:
                for q in range(dp):
                    wp[q] -= lr * gp[q]
    for q in range(theta.size):
        delta[q] = theta[q] - wp[idx[q]]


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

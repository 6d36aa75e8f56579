"""Backends of the aggregation loops equal the NumPy reference (the Verification guide: every
backend against the reference)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairagg import apply_weighted_update, fairavg, fedavg, make_reports
from fairagg.kernels import (
    BACKENDS,
    available_backends,
    gram,
    row_sq_norms,
    two_combinations,
    weighted_sum,
    weighted_update,
)
from tests.conftest import on_simulator
from tests.tolerances import assert_close

# Shapes around the CPU kernels' 4096-column blocks and their 8-, 4- and 2-row unrolling.
CPU_SHAPES = st.tuples(
    st.integers(1, 17), st.sampled_from([1, 2, 3, 7, 2049, 4095, 4096, 4097, 8200])
)
# The CUDA kernels' blocks: 128 threads, 16 × 16 Gram tiles staging 64 columns (on the simulator
# 32 threads, 8 × 8 tiles, at most 4 blocks along d, so that grid-stride loops and partial tiles
# are reached with small inputs). m = 1, d = 1, and d off every multiple.
CUDA_SHAPES = (
    st.tuples(st.integers(1, 9), st.sampled_from([1, 2, 31, 33, 65, 129, 200, 257]))
    if on_simulator()
    else st.tuples(st.integers(1, 40), st.sampled_from([1, 2, 127, 129, 1000, 4097, 70000]))
)


def shapes_for(backend):
    return CUDA_SHAPES if backend == "cuda" else CPU_SHAPES


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1), f32=st.booleans())
@settings(max_examples=15 if on_simulator() else 50)
def test_weighted_update_equals_numpy_reference(backend, data, seed, f32):
    rng = np.random.default_rng(seed)
    m, d = data.draw(shapes_for(backend), label="shape")
    dtype = np.float32 if f32 else np.float64
    D = rng.standard_normal((m, d)).astype(dtype)
    theta = rng.standard_normal(d).astype(dtype)
    w = rng.random(m)
    out, maybe_finite = weighted_update(theta, D, w, backend)
    assert out.dtype == dtype and out.shape == (d,) and maybe_finite
    # The reference in float64 on the same (rounded) inputs.
    ref = theta.astype(np.float64) - w @ D.astype(np.float64)
    # m terms of size O(1) each: round-off grows with m, hence scale=m.
    assert_close(out, ref, dtype=dtype, scale=m)
    assert_close(weighted_sum(w, D, backend), w @ D.astype(np.float64), dtype=dtype, scale=m)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_weighted_update_flags_non_finite(backend, bad):
    D = np.ones((5, 3000))
    D[3, 2500] = bad
    with np.errstate(invalid="ignore", over="ignore"):
        out, maybe_finite = weighted_update(np.zeros(3000), D, np.full(5, 0.2), backend)
    assert not maybe_finite and not np.isfinite(out[2500])
    with pytest.raises(ValueError, match="deltas must be finite"):
        apply_weighted_update(np.zeros(3000), D, np.full(5, 0.2), backend=backend)


def test_finite_overflowing_sum_is_not_an_error(backend):
    # Entries near the float64 maximum: their sum overflows, the entries do not. The witness is
    # then False and the full check must accept the result.
    theta = np.full(4, 1e308)
    out = apply_weighted_update(theta, np.zeros((2, 4)), np.array([0.5, 0.5]), backend=backend)
    assert np.array_equal(out, theta)


@pytest.mark.parametrize("factory", [fedavg, fairavg])
def test_rules_agree_across_backends(factory):
    rng = np.random.default_rng(0)
    D = rng.standard_normal((6, 3001))
    reports = make_reports(D, rng.integers(1, 100, 6))
    theta = rng.standard_normal(3001)
    outs = [
        factory(backend=b).step(theta, reports, factory(backend=b).init(theta, 6)).params
        for b in BACKENDS
    ]
    for other in outs[1:]:
        assert_close(other, outs[0], scale=6)  # 6 terms summed in another order


def test_unknown_backend_is_rejected():
    with pytest.raises(ValueError, match="backend must be one of"):
        fedavg(backend="cuda-but-not-yet")


def test_cuda_backend_without_a_device_is_a_clear_error(monkeypatch):
    from fairagg.kernels import cuda

    monkeypatch.setattr(cuda, "available", lambda: False)
    with pytest.raises(ValueError, match="backend='cuda' needs a CUDA GPU"):
        fedavg(backend="cuda")


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1), f32=st.booleans())
@settings(max_examples=15 if on_simulator() else 50)
def test_row_sq_norms_and_gram_equal_numpy_reference(backend, data, seed, f32):
    rng = np.random.default_rng(seed)
    m, d = data.draw(shapes_for(backend), label="shape")
    dtype = np.float32 if f32 else np.float64
    # Rows of very different sizes: the tolerance is relative to the largest term.
    D = (rng.standard_normal((m, d)) * 10.0 ** rng.integers(-3, 4, (m, 1))).astype(dtype)
    D64 = D.astype(np.float64)
    norms = row_sq_norms(D, backend)
    assert norms.dtype == np.float64 and norms.shape == (m,)
    # Both accumulate float64 squares of the same float64 numbers, in another order: d terms.
    assert_close(norms, np.einsum("ij,ij->i", D64, D64), scale=d)
    G = gram(D, backend)
    assert G.dtype == np.float64 and G.shape == (m, m)
    assert np.array_equal(G, G.T)  # exactly symmetric
    scale = np.sqrt(np.outer(norms, norms))  # |G_ij| ≤ ‖δ_i‖‖δ_j‖ bounds each entry's round-off
    assert np.all(np.abs(G - D64 @ D64.T) <= 1e-13 * d * scale + 1e-300)


def test_norms_and_gram_of_zero_and_single_rows(backend):
    for D in (np.zeros((3, 5)), np.ones((1, 1)), np.array([[3.0, 4.0]])):
        assert_close(row_sq_norms(D, backend), (D * D).sum(axis=1))
        assert_close(gram(D, backend), D @ D.T)


def test_cuda_keeps_device_arrays_on_the_device():
    """A caller that holds its updates on the device gets a device array back and pays no copy
    of the (m, d) matrix (numba's device arrays; the simulator's stand-ins where there is no
    GPU)."""
    from numba import cuda

    rng = np.random.default_rng(1)
    D, theta, w = rng.standard_normal((3, 70)), rng.standard_normal(70), rng.random(3)
    d_D, d_theta = cuda.to_device(D), cuda.to_device(theta)
    out, ok = weighted_update(d_theta, d_D, w, "cuda")
    assert ok and not isinstance(out, np.ndarray)
    assert_close(out.copy_to_host(), theta - w @ D, scale=3)
    assert_close(row_sq_norms(d_D, "cuda"), (D * D).sum(axis=1), scale=70)
    assert_close(gram(d_D, "cuda"), D @ D.T, scale=70)
    total = weighted_sum(w, d_D, "cuda")
    assert not isinstance(total, np.ndarray)
    assert_close(total.copy_to_host(), w @ D, scale=3)
    assert_close(two_combinations(np.stack([w, -w]), d_D, "cuda"), np.stack([w, -w]) @ D, scale=3)


@pytest.mark.parametrize("backend", BACKENDS)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1), f32=st.booleans())
@settings(max_examples=15 if on_simulator() else 50)
def test_two_combinations_equals_the_matrix_product(backend, data, seed, f32):
    """FedFV's final pass (ḡ and the mean update in one pass over the updates) equals the
    float64 (2, m) × (m, d) product; every tail of the four-row and column-block loops (CPU)
    and of the grid-stride loop (CUDA) is drawn."""
    rng = np.random.default_rng(seed)
    m, d = data.draw(shapes_for(backend), label="shape")
    W = rng.normal(size=(2, m))
    D = rng.normal(size=(m, d)).astype(np.float32 if f32 else np.float64)
    V = two_combinations(W, D, backend)
    assert V.dtype == np.float64 and V.shape == (2, d)
    # Reassociated sums of m terms: scale the closed-form tolerance by m.
    assert_close(V, W @ D.astype(np.float64), scale=m)


def test_available_backends_leave_the_simulator_out_of_benchmarks():
    from fairagg.kernels import available_backends

    assert available_backends()[:2] == ("numpy", "numba")
    if on_simulator():
        assert available_backends() == ("numpy", "numba")
        assert available_backends(simulator=True) == BACKENDS


BACKEND_RULES = sorted(
    name
    for name, spec in __import__("fairagg").RULES.items()
    if "backend" in __import__("inspect").signature(spec.factory).parameters
)


@pytest.mark.parametrize("name", BACKEND_RULES)
def test_every_rule_with_a_backend_agrees_across_backends(name, backend):
    """Each registered rule that takes ``backend=`` gives the reference's step on every backend
    (two rounds, so that state carried between rounds goes through the kernels too)."""
    from fairagg import make_rule
    from tests.strategies import rule_round

    m, d = 4, 150
    theta, reports, K = rule_round(name, m, d, np.random.default_rng(7))
    results = {}
    for b in ("numpy", backend):
        rule = make_rule(name, backend=b)
        agg = rule.step(theta, reports, rule.init(theta, K))
        agg = rule.step(agg.params, reports, agg.state)
        results[b] = agg.params
    # Sums of m terms (and m × d for norms and Gram entries) in another order.
    assert_close(results[backend], results["numpy"], scale=m * d)


def test_fedfv_with_a_window_agrees_across_backends(backend):
    """FedFV's Gram path with earlier rounds' updates in the window (τ = 2, changing client
    sets, so that U = [D; H] has rows of both kinds) gives the reference's steps and weights on
    every backend; the vector method, the readable specification, is NumPy only."""
    from fairagg.rules.fedfv import fedfv

    rng = np.random.default_rng(11)
    K, m, d = 7, 3, 90
    theta0 = rng.standard_normal(d)
    rounds = [
        make_reports(
            rng.standard_normal((m, d)),
            np.full(m, 10),
            losses=rng.random(m),
            client_ids=ids,
            num_clients=K,
        )
        for ids in ([0, 1, 2], [3, 4, 5], [6, 0, 3], [1, 2, 4])
    ]
    out = {}
    for b in ("numpy", backend):
        rule = fedfv(alpha=0.0, tau=2, backend=b)
        theta, state, infos = theta0, rule.init(theta0, K), []
        for reports in rounds:
            agg = rule.step(theta, reports, state)
            theta, state = agg.params, agg.state
            infos.append(agg.info)
        out[b] = theta, infos
    assert any(info["history_weights"].any() for info in out["numpy"][1])  # H took part
    assert_close(out[backend][0], out["numpy"][0], scale=m * d)
    for got, want in zip(out[backend][1], out["numpy"][1], strict=True):
        assert_close(got["weights"], want["weights"], scale=m * d)
        assert_close(got["history_weights"], want["history_weights"], scale=m * d)
        assert got["projections"] == want["projections"]
    if backend != "numpy":
        with pytest.raises(ValueError, match="method='gram'"):
            fedfv(method="vector", backend=backend)


# The rules whose step is a weighted average of the round's updates: on backend="cuda" they take
# θ and the updates as device arrays and keep the round there.
DEVICE_RULES = (
    "fedavg",
    "fairavg",
    "term",
    "propfair",
    "fedmgda",
    "qffl-eg",
    "term-eg",
    "propfair-eg",
    "aaggff-s",
    "aaggff-d",
)


def _round(rng, m, d, K):
    return dict(
        deltas=rng.standard_normal((m, d)),
        num_samples=rng.integers(1, 50, m),
        losses=rng.uniform(0.1, 2.0, m),
        client_ids=np.arange(m),
        num_clients=K,
    )


@pytest.mark.parametrize("name", DEVICE_RULES)
def test_weighted_average_rules_keep_a_round_on_the_device(name):
    """θ and the updates passed as device arrays stay there: the new θ is a device array, equal
    to the reference's over two rounds (the second starts from the first's device result)."""
    from numba import cuda

    from fairagg import RULES, make_rule

    rng = np.random.default_rng(3)
    m, d = 4, 120
    K = m if RULES[name].full_participation else m + 2
    theta = rng.standard_normal(d)
    rounds = [_round(rng, m, d, K) for _ in range(2)]
    ref = make_rule(name, backend="numpy")
    state, params = ref.init(theta, K), theta
    for r in rounds:
        agg = ref.step(params, make_reports(**r), state)
        params, state = agg.params, agg.state
    rule = make_rule(name, backend="cuda")
    state, d_params = rule.init(theta, K), cuda.to_device(theta)
    for r in rounds:
        reports = make_reports(**{**r, "deltas": cuda.to_device(r["deltas"])})
        assert not isinstance(reports.deltas, np.ndarray)  # not copied by make_reports
        agg = rule.step(d_params, reports, state)
        d_params, state = agg.params, agg.state
        assert not isinstance(d_params, np.ndarray)
    assert_close(d_params.copy_to_host(), params, scale=m * d)


@pytest.mark.parametrize("name", ["fedavg", "fedmgda"])
def test_a_non_finite_device_update_is_a_clear_error(name):
    from numba import cuda

    from fairagg import make_rule

    rng = np.random.default_rng(4)
    r = _round(rng, 3, 50, 3)
    r["deltas"][1, 17] = np.nan
    rule = make_rule(name, backend="cuda")
    reports = make_reports(**{**r, "deltas": cuda.to_device(r["deltas"])})
    with pytest.raises(ValueError, match="deltas must be finite"):
        rule.step(cuda.to_device(np.zeros(50)), reports, rule.init(np.zeros(50), 3))


def test_device_arrays_need_the_cuda_backend_and_a_rule_that_takes_them():
    from numba import cuda

    from fairagg import make_rule

    rng = np.random.default_rng(5)
    r = _round(rng, 3, 40, 3)
    reports = make_reports(**{**r, "deltas": cuda.to_device(r["deltas"])})
    theta = np.zeros(40)
    rule = make_rule("fedavg", backend="numba")
    with pytest.raises(TypeError, match="need backend='cuda'"):
        rule.step(cuda.to_device(theta), reports, rule.init(theta, 3))
    with pytest.raises(TypeError, match="need backend='cuda'"):
        apply_weighted_update(theta, reports.deltas, np.full(3, 1 / 3), backend="numpy")
    for name in ("qfedavg", "fedfv", "fedfa"):  # host rules say so, even on backend="cuda"
        rule = make_rule(name, backend="cuda")
        with pytest.raises(TypeError, match="takes NumPy arrays"):
            rule.step(theta, reports, rule.init(theta, 3))
    with pytest.raises(TypeError, match="deltas must be a float32 or float64 device array"):
        make_reports(cuda.to_device(np.zeros((2, 3), dtype=np.int64)), [1, 1])


@pytest.mark.parametrize(
    "shape", [(6, 2048 * 33 + 1), (5, 2048 * 64), (130, 300), (49, 999), "at limit", "past limit"]
)
@pytest.mark.parametrize("wide", [True, False])
def test_numba_gram_over_many_column_chunks_and_past_its_row_limit(shape, wide, monkeypatch):
    """The Numba Gram kernel sums more column blocks than its fixed 32 chunks (each chunk then
    adds several blocks), with 4 × 4 tiles (AVX-512 hosts) and with 4 × 2 tiles (the others), and
    above its row limit ``gram`` hands over to BLAS: all equal the float64 product."""
    from fairagg.kernels import cpu

    monkeypatch.setattr(cpu, "_GRAM_WIDE", wide)
    if shape == "at limit":  # the kernel's last row count
        shape = (cpu.GRAM_MAX_M, 37)
    elif shape == "past limit":  # BLAS's first
        shape = (cpu.GRAM_MAX_M + 1, 37)
    rng = np.random.default_rng(shape[0])
    D = rng.standard_normal(shape)
    m, d = shape
    G = gram(D, "numba")
    assert np.array_equal(G, G.T)
    assert np.all(np.abs(G - D @ D.T) <= 1e-13 * d * np.sqrt(np.outer(np.diag(G), np.diag(G))))
    assert cpu.use_gram_kernel(cpu.GRAM_MAX_M) and not cpu.use_gram_kernel(cpu.GRAM_MAX_M + 1)


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("m", range(1, 20))
def test_numba_gram_tiles_cover_every_entry(m, wide, monkeypatch):
    """Every entry of G on or above the diagonal is computed exactly once, whatever m mod 6,
    m mod 4 and the tile width leave at the edges (six-row panels, then four-row tiles, then
    single rows): every product and sum below is exact, so an entry missed (left 0) or added
    twice shows. The pass that also copies D computes the same G and copies every entry."""
    from fairagg.kernels import cpu

    monkeypatch.setattr(cpu, "_GRAM_WIDE", wide)
    D = np.zeros((m, 3))
    D[:, 0] = 2.0 ** np.arange(m)
    D[:, 2] = 1.0
    want = np.outer(D[:, 0], D[:, 0]) + 1.0
    assert np.array_equal(cpu.gram(D), want)
    out = np.full_like(D, np.nan)
    assert np.array_equal(cpu._gram_and_copy(D, out), want)
    assert np.array_equal(out, D)


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_gram_and_copy_is_gram_and_an_exact_copy_over_many_blocks(wide, dtype, monkeypatch):
    """Over many column blocks and a partial last one, the Gram pass that copies D returns
    ``gram``'s bits and writes every entry of D, in D's dtype."""
    from fairagg.kernels import cpu

    monkeypatch.setattr(cpu, "_GRAM_WIDE", wide)
    D = np.random.default_rng(7).standard_normal((15, 2048 * 33 + 5)).astype(dtype)
    out = np.full_like(D, np.nan)
    np.testing.assert_array_equal(cpu._gram_and_copy(D, out), cpu.gram(D))
    np.testing.assert_array_equal(out, D)
    with pytest.raises(ValueError, match="out must have the shape and dtype of deltas"):
        cpu._gram_and_copy(D, out[:, 1:])


@pytest.mark.parametrize("m", [13, 38])
@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_gram_and_copy_at_every_alignment(m, wide, dtype, monkeypatch):
    """The Gram kernel reads each column block from D (13 rows) or from an aligned copy of it
    (38 rows, from ``_STAGE_MIN_M`` on) and writes the copy of D by whole 64-byte lines between
    single entries at the ends of each row: with D and ``out`` starting at every entry offset of
    a 64-byte line, G has the same bits, and ``out`` gets every entry of D and nothing outside
    its rows (panels, tiles and single rows; d = 1541 over blocks of both widths and a partial
    last one)."""
    from fairagg.kernels import cpu

    monkeypatch.setattr(cpu, "_GRAM_WIDE", wide)
    assert (m >= cpu._STAGE_MIN_M) == (m == 38)
    d = 1541
    per_line = 64 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(11)
    ref = rng.standard_normal((m, d)).astype(dtype)
    want = cpu.gram(ref)
    for shift in range(per_line):
        raw = np.empty(m * d + 2 * per_line, dtype)
        start = (-raw.ctypes.data % 64) // raw.itemsize + shift
        D = raw[start : start + m * d].reshape(m, d)
        D[...] = ref
        np.testing.assert_array_equal(cpu.gram(D), want)
        sink = np.full(m * d + 2 * per_line, np.nan, dtype)
        first = (-sink.ctypes.data % 64) // sink.itemsize + (shift * 3) % per_line
        out = sink[first : first + m * d].reshape(m, d)
        np.testing.assert_array_equal(cpu._gram_and_copy(D, out), want)
        np.testing.assert_array_equal(out, ref)
        assert np.isnan(sink[:first]).all() and np.isnan(sink[first + m * d :]).all()


@pytest.mark.parametrize("plain", [True, False])
def test_numba_gram_kernel_asks_for_512_bit_vectors(plain):
    """The Gram kernel's compiled function carries LLVM's "prefer-vector-width"="512" (on
    AVX-512 hosts its 6 × 4 tiles then run on 512-bit registers, twice the 256-bit default's
    width); the hint is dropped silently if llvmlite refuses it, which this test would show.
    The plain version has no copy in it: its ``may_copy`` is a constant, so its copy branches
    (non-temporal stores) are never compiled (what makes it compile faster); the whole version
    has them."""
    import numba

    from fairagg.kernels import cpu

    # a fresh compilation of the same function: numba does not show the IR of cached code
    kernel = cpu._gram_chunks_for(plain=plain)
    fresh = numba.njit(nogil=True, fastmath={"reassoc", "contract"})(kernel.py_func)
    D = np.ones((2, 3))
    fresh(D, np.zeros((1, 2, 2)), 0, 1, True, 512, False, False, D)
    ir = "".join(fresh.inspect_llvm().values())
    assert '"prefer-vector-width"="512"' in ir
    assert ("!nontemporal" in ir) == (not plain)


@pytest.mark.parametrize("shape", [(512, 1), (513, 7), (1000, 300), (515, 32768), (512, 32769)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numba_sums_of_many_short_rows(shape, dtype):
    """Many rows of short updates are summed by row chunks on the Numba backend (m ≥ 512,
    d ≤ 32768; d = 32769 is back on column blocks): the same sums, in the input dtype, with the
    finiteness witness."""
    rng = np.random.default_rng(shape[0] + shape[1])
    m, d = shape
    D = rng.standard_normal(shape).astype(dtype)
    theta = rng.standard_normal(d).astype(dtype)
    w = rng.random(m)
    ref = w @ D.astype(np.float64)
    out, ok = weighted_update(theta, D, w, "numba")
    total = weighted_sum(w, D, "numba")
    assert ok and out.dtype == dtype and total.dtype == dtype
    assert_close(out, theta.astype(np.float64) - ref, dtype=dtype, scale=m)
    assert_close(total, ref, dtype=dtype, scale=m)
    D[m // 2, d // 2] = np.nan
    assert not weighted_update(theta, D, w, "numba")[1]


# --------------------------------------------------------------------------------------------
# Every public kernel checks its arguments before compiled code runs, and one dtype rule holds on
# every backend (the module docstring of fairagg.kernels).
# --------------------------------------------------------------------------------------------

KERNELS = (
    "weighted_sum",
    "weighted_update",
    "weighted_sum_sq_norms",
    "row_sq_norms",
    "gram",
    "two_combinations",
)


def _kernel_call(name, w, D, theta, W2, backend):
    """The kernel ``name`` on (weights, deltas, theta, (2, m) weights), and its float64
    reference on the same numbers, as tuples of arrays."""
    import fairagg.kernels as K

    w64, D64, t64, W64 = (np.asarray(a, dtype=np.float64) for a in (w, D, theta, W2))
    f = getattr(K, name)
    if name == "weighted_sum":
        return (f(w, D, backend),), (w64 @ D64,)
    if name == "weighted_update":
        return (f(theta, D, w, backend)[0],), (t64 - w64 @ D64,)
    if name == "weighted_sum_sq_norms":
        return f(w, D, backend), (w64 @ D64, (D64 * D64).sum(axis=1))
    if name == "row_sq_norms":
        return (f(D, backend),), ((D64 * D64).sum(axis=1),)
    if name == "gram":
        return (f(D, backend),), (D64 @ D64.T,)
    return (f(W2, D, backend),), (W64 @ D64,)


def _expected_dtypes(name, dtype):
    # Sums keep the float dtype of deltas; bool/integer/float16 count as float64 numbers.
    sums = np.dtype(dtype) if np.dtype(dtype) in (np.float32, np.float64) else np.float64
    return {
        "weighted_sum": (sums,),
        "weighted_update": (sums,),  # theta has deltas' dtype here
        "weighted_sum_sq_norms": (sums, np.float64),
        "row_sq_norms": (np.float64,),
        "gram": (np.float64,),
        "two_combinations": (np.float64,),
    }[name]


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize(
    "dtype", [np.bool_, np.int8, np.int64, np.uint16, np.float16, np.float32, np.float64]
)
def test_every_kernel_computes_numbers_in_every_dtype_on_every_backend(backend, name, dtype):
    # Integer and bool updates are numbers: fractional weights must not be cast to integers
    # (kernels.weighted_sum(0.25 * ones(4), arange(20).reshape(4, 5)) once returned zeros).
    rng = np.random.default_rng(3)
    m, d = 4, 5
    if dtype is np.bool_:
        D = rng.random((m, d)) < 0.5
    else:
        D = rng.integers(0, 6, (m, d)).astype(dtype)
    theta = rng.integers(-3, 4, d).astype(dtype)
    w = np.array([0.25, 0.5, 0.125, 0.375])
    W2 = np.vstack([w, 1 - w])
    got, ref = _kernel_call(name, w, D, theta, W2, backend)
    for g, r, want in zip(got, ref, _expected_dtypes(name, dtype), strict=True):
        g = g.copy_to_host() if hasattr(g, "copy_to_host") else g
        assert g.dtype == want, (name, backend, g.dtype)
        # Small integers times dyadic weights: exact in float32 and float64 alike.
        np.testing.assert_array_equal(g, r)


def test_weighted_update_result_dtype_promotes_theta_and_deltas(backend):
    D32 = np.ones((2, 3), dtype=np.float32)
    w = np.array([0.5, 0.25])
    out32, _ = weighted_update(np.ones(3, np.float32), D32, w, backend)
    out64, _ = weighted_update(np.ones(3), D32, w, backend)
    out_int, _ = weighted_update(np.ones(3, np.int64), D32, w, backend)
    assert (out32.dtype, out64.dtype, out_int.dtype) == (np.float32, np.float64, np.float64)
    np.testing.assert_array_equal(out64, np.full(3, 0.25))


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("m,d", [(0, 0), (0, 3), (3, 0)])
def test_every_kernel_handles_empty_dimensions(backend, name, m, d):
    D = np.ones((m, d))
    got, ref = _kernel_call(name, np.ones(m), D, np.ones(d), np.ones((2, m)), backend)
    for g, r in zip(got, ref, strict=True):
        g = g.copy_to_host() if hasattr(g, "copy_to_host") else g
        assert g.shape == r.shape
        np.testing.assert_array_equal(g, r)


def _bad_kernel_calls():
    """(kernel, args, exception, message) for each family of bad input."""
    D, w, th = np.ones((4, 5)), np.ones(4), np.ones(5)
    return [
        ("weighted_sum", (np.ones(3), D), ValueError, r"weights must have shape \(4,\)"),
        ("weighted_sum", (np.ones((4, 1)), D), ValueError, "weights must be 1-D"),
        ("weighted_sum", (w, np.ones(5)), ValueError, r"deltas must be 2-D, shape \(m, d\)"),
        ("weighted_sum", (w, np.ones((4, 5, 1))), ValueError, "deltas must be 2-D"),
        ("weighted_sum", (w, D.astype(complex)), TypeError, "deltas must hold real numbers"),
        ("weighted_sum", (w.astype(object), D), TypeError, "weights must hold real numbers"),
        ("weighted_sum", (w, [[1, 2], [3]]), TypeError, "deltas must be an array of real"),
        ("weighted_sum", (w, "deltas"), TypeError, "deltas must hold real numbers"),
        ("weighted_update", (np.zeros(0), D, w), ValueError, r"theta must have shape \(5,\)"),
        ("weighted_update", (None, D, w), TypeError, "theta must hold real numbers.*NoneType"),
        ("weighted_update", (th, D, np.ones(5)), ValueError, r"weights must have shape \(4,\)"),
        ("weighted_update", (th[:, None], D, w), ValueError, "theta must be 1-D"),
        ("weighted_sum_sq_norms", (np.ones(2), D), ValueError, "weights must have shape"),
        ("weighted_sum_sq_norms", (w, D.astype("U1")), TypeError, "deltas must hold real"),
        ("row_sq_norms", (np.ones(5),), ValueError, "deltas must be 2-D"),
        ("row_sq_norms", (None,), TypeError, "deltas must hold real numbers"),
        ("gram", (D.astype(np.complex64),), TypeError, "deltas must hold real numbers"),
        ("gram", (np.ones((2, 2, 2)),), ValueError, "deltas must be 2-D"),
        ("two_combinations", (np.ones((2, 3)), D), ValueError, r"weights must have shape \(2, 4\)"),
        ("two_combinations", (w, D), ValueError, "weights must be 2-D"),
        ("two_combinations", (np.ones((2, 4), complex), D), TypeError, "weights must hold real"),
    ]


@pytest.mark.parametrize("case", _bad_kernel_calls(), ids=lambda c: f"{c[0]}-{c[3][:24]}")
def test_bad_kernel_input_is_refused_naming_the_argument(case):
    # The checks run before the backend dispatch; the compiled backends are checked in a
    # subprocess below (a regression there could crash the interpreter).
    import fairagg.kernels as K

    name, args, exc, msg = case
    with pytest.raises(exc, match=msg):
        getattr(K, name)(*args, backend="numpy")


def test_bad_kernel_input_never_reaches_compiled_code():
    # These once crashed the interpreter (glibc abort: kernels.weighted_update(np.zeros(0),
    # np.ones((4, 5)), np.ones(4), backend="numba")) or read past the end of an array in the
    # Numba kernels; run them in a fresh interpreter so that a crash fails this test instead of
    # taking the test session down.
    import os
    import pathlib
    import subprocess
    import sys

    code = """
import re
from fairagg.kernels import available_backends
import fairagg.kernels as K
from tests.test_kernels import _bad_kernel_calls
for backend in available_backends(simulator=True)[1:]:
    for name, args, exc, msg in _bad_kernel_calls():
        try:
            getattr(K, name)(*args, backend=backend)
        except exc as e:
            print("ok" if re.search(msg, str(e)) else f"message {name}: {e}")
        else:
            print(f"accepted {name} {msg}")
"""
    root = pathlib.Path(__file__).resolve().parents[1]
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    backends = 2 if "cuda" in available_backends(simulator=True) else 1
    assert run.stdout.split("\n")[:-1] == ["ok"] * (backends * len(_bad_kernel_calls())), run.stdout


def _split_infinities():
    """Inputs whose +inf and −inf land in different partial sums of the numba kernels (column
    chunks of the Gram matrix, row chunks of the many-short-rows sums): their NaN is summed
    outside the compiled code, in NumPy."""
    g = np.zeros((2, 2 * 2048))
    g[0, 0] = g[0, 2048] = np.inf
    g[1, 0], g[1, 2048] = 1.0, -1.0  # G[0, 1] = inf (chunk 0) + (-inf) (chunk 1)
    rows = np.zeros((600, 4))
    rows[0, 0], rows[599, 0] = np.inf, -np.inf  # first and last of 16 row chunks
    w = np.ones(600)
    return {
        "gram": lambda b: gram(g, b),
        "weighted_sum": lambda b: weighted_sum(w, rows, b),
        "weighted_update": lambda b: weighted_update(np.zeros(4), rows, w, b)[0],
        "two_combinations": lambda b: two_combinations(np.ones((2, 2)), g, b),
        "row_sq_norms": lambda b: row_sq_norms(rows, b),
    }


@pytest.mark.parametrize("name", list(_split_infinities()))
def test_numba_backend_propagates_infinities_silently_as_numpy_does(name):
    """Values are not checked in fairagg.kernels: NaN and infinity propagate without a warning on
    every backend (a RuntimeWarning from NumPy's reduction of the kernels' partial sums became an
    error where warnings are errors), and the numba backend gives NumPy's non-finite pattern."""
    call = _split_infinities()[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, want = call("numba"), call("numpy")
    assert not np.isfinite(got).all()  # the case does reach a NaN or an infinity
    nonfinite = np.where(np.isfinite(got), 0.0, got), np.where(np.isfinite(want), 0.0, want)
    assert np.array_equal(*nonfinite, equal_nan=True)  # NaN and ±inf at the same places

"""FedFV's rule reuses the memory of its states' histories (``fairagg.rules.fedfv._BufferPool``)
only once nothing can reach it: a state a caller keeps, or any array derived from its history,
is never written by a later step, and the reuse changes no result.

The rule API is functional: the conformance harness, and a user, may keep an old state and step
it again, so these tests keep old states, slices and views while the rule steps on.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from fairagg import make_reports
from fairagg.rules import fedfv as fedfv_module
from fairagg.rules.fedfv import fedfv

#: m × d × 8 bytes above the pool's 1 MiB threshold; d odd: rows start off 64-byte boundaries
M, D_LEN = 4, 40_001


def _reports(D, ids, K, rng):
    losses = rng.random(len(D))
    return make_reports(D, np.ones(len(D), np.int64), losses=losses, client_ids=ids, num_clients=K)


def _round(rng, m=M, d=D_LEN):
    return rng.standard_normal((m, d))


def _buffer(state):
    """The pooled buffer behind a state's history (the lease is the array's NumPy base)."""
    return state.history.updates.base.buffer


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_kept_state_is_never_overwritten_by_later_steps(backend):
    """Round 0's state is kept while the rule steps it, and its successors, again and again:
    every new history takes other memory, and the kept one holds round 0's updates bit for bit."""
    rng = np.random.default_rng(0)
    rule = fedfv(tau=1, backend=backend)
    theta = np.zeros(D_LEN)
    D0 = _round(rng)
    kept = rule.step(theta, _reports(D0, np.arange(M), M, rng), rule.init(theta, M)).state
    assert isinstance(kept.history.updates.base, fedfv_module._Lease)  # pooled
    state = kept
    for _ in range(4):  # each step drops the state before: its buffer goes back to the pool
        state = rule.step(theta, _reports(_round(rng), np.arange(M), M, rng), state).state
        again = rule.step(theta, _reports(_round(rng), np.arange(M), M, rng), kept).state
        assert not np.shares_memory(state.history.updates, kept.history.updates)
        assert not np.shares_memory(again.history.updates, kept.history.updates)
        del again
        gc.collect()
    np.testing.assert_array_equal(kept.history.updates, D0)


def _derive(updates, keep):
    if keep == "slice":
        return updates[1:]
    if keep == "view of a view":
        return updates[1:][:, 2:]
    if keep == "reshape":
        return updates.reshape(-1)
    if keep == "memoryview":
        return memoryview(updates)
    return np.frombuffer(memoryview(updates), dtype=updates.dtype)


@pytest.mark.parametrize("keep", ["slice", "view of a view", "reshape", "memoryview", "frombuffer"])
def test_an_array_derived_from_a_history_keeps_its_memory(keep):
    """Only a slice, a view, a reshape or a buffer of the history's updates survives the state:
    the memory stays out of the pool until that array is gone (NumPy's view of a view has the
    first array, not the view, as its base: a pool that watched only the array it handed out
    would reuse this memory while the slice still reads it)."""
    rng = np.random.default_rng(1)
    rule = fedfv(tau=1)
    theta = np.zeros(D_LEN)
    D0 = _round(rng)
    state = rule.step(theta, _reports(D0, np.arange(M), M, rng), rule.init(theta, M)).state
    derived = _derive(state.history.updates, keep)
    want = np.array(derived, copy=True)
    del state
    gc.collect()
    state = rule.init(theta, M)
    for _ in range(4):  # the states before are dropped: their buffers are reused
        state = rule.step(theta, _reports(_round(rng), np.arange(M), M, rng), state).state
        gc.collect()
    np.testing.assert_array_equal(np.asarray(derived), want)


def test_a_history_nothing_reaches_is_reused():
    """The pool does its work: in a run (each state dropped once stepped) the histories take
    turns in two buffers, 64-byte aligned, not a new one each round."""
    rng = np.random.default_rng(2)
    rule = fedfv(tau=1, backend="numba")
    theta = np.zeros(D_LEN)
    state = rule.init(theta, M)
    seen = []
    for _ in range(6):
        state = rule.step(theta, _reports(_round(rng), np.arange(M), M, rng), state).state
        assert state.history.updates.ctypes.data % 64 == 0
        seen.append(id(_buffer(state)))
    assert len(set(seen)) == 2, seen


def test_reuse_changes_no_result():
    """Seven rounds of 4 of 7 clients with a window of two rounds (histories of changing
    shapes, rows taken from the history before): the same bits with and without the pool, and
    an old state stepped again gives the same bits as the first time."""

    def run():
        rng = np.random.default_rng(3)
        rule = fedfv(alpha=0.0, tau=2, backend="numba")
        theta = rng.standard_normal(D_LEN)
        state = rule.init(theta, 7)
        out, firsts = [], []
        for t in range(7):
            ids = rng.choice(7, 4, replace=False)
            rep = _reports(_round(rng) + 0.5 * np.sin(t), ids, 7, rng)
            agg = rule.step(theta, rep, state)
            firsts.append((theta, rep, state, agg.params))
            theta, state = agg.params, agg.state
            out.append(theta)
        return out, firsts, rule

    pooled, firsts, rule = run()
    original = fedfv_module._BufferPool.empty
    try:
        fedfv_module._BufferPool.empty = lambda self, shape, dtype: np.empty(shape, dtype)
        plain, _, _ = run()
    finally:
        fedfv_module._BufferPool.empty = original
    for a, b in zip(pooled, plain, strict=True):
        np.testing.assert_array_equal(a, b)
    for theta, rep, state, params in firsts:  # old states, stepped again after the run
        np.testing.assert_array_equal(rule.step(theta, rep, state).params, params)


def test_the_pool_keeps_at_most_two_free_buffers_and_small_arrays_are_plain():
    pool = fedfv_module._BufferPool()
    arrays = [pool.empty((M, D_LEN), np.float64) for _ in range(4)]
    del arrays
    gc.collect()
    assert len(pool._free) == 2
    small = pool.empty((3, 5), np.float64)
    assert small.base is None and small.shape == (3, 5)

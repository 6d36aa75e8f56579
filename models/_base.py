"""What the two models share: input checks, prediction, accuracy and the Numba entry points."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels._threads import run_tasks, threads_for
from . import _kernels

__all__ = ["FlatModel", "check_dims", "check_init_args", "l2_penalty"]


def _check_real_array(x: Any, name: str, ndim: int) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a float32 or float64 array; got dtype {arr.dtype}")
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional; got shape {arr.shape}")
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite; got NaN or infinity")
    return arr


def check_init_args(seed: Any, dtype: Any) -> tuple[int, np.dtype]:
    """``init_params``' arguments: a seed for ``np.random.default_rng`` (an integer ≥ 0) and
    the parameters' dtype (float32 or float64, the dtypes of the kernels)."""
    import numbers

    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an integer; got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be >= 0; got {seed}")
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"dtype must be float32 or float64; got {dtype!r}") from exc
    if dt not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64; got {dt}")
    return int(seed), dt


class FlatModel:
    """Base of the models: every model is a function of one flat parameter vector.

    Local training ([`train_clients`][fairagg.local.train_clients],
    [`client_gradients`][fairagg.local.client_gradients],
    [`trained_accuracies`][fairagg.local.trained_accuracies]), the evaluation of a run and
    [`simulate`][fairagg.simulation.simulate] take any subclass. A subclass must provide, in NumPy
    (the specification):

    - ``n_features``, ``n_classes``: the input dimension p and the number of classes C, compared
      with the data's;
    - ``num_params``: the length d of the parameter vector (a property);
    - ``init_params(seed=0, dtype=np.float64)``: θ⁰, shape (d,), in ``dtype`` (float32 or float64:
      training runs in the dtype of the parameters);
    - ``logits(params, X)``: the scores, shape (n, C), whose argmax is the predicted class;
    - ``loss_and_grad(params, X, y)``: the mean loss over the rows of ``X`` (plus any penalty) and
      its gradient with respect to the flat parameter vector, shape (d,).

    From these the base class derives what training and evaluation call:
    [`check_params`][models.FlatModel.check_params],
    [`check_data`][models.FlatModel.check_data],
    [`predict`][models.FlatModel.predict],
    [`accuracy`][models.FlatModel.accuracy], [`loss`][models.FlatModel.loss],
    [`grad`][models.FlatModel.grad] and
    [`evaluate_clients`][models.FlatModel.evaluate_clients]; a subclass may override
    them (``loss`` without the gradient, say), keeping their meaning. The methods must not change
    ``self`` or their arguments.

    A model trains on the NumPy reference loop of
    [`sgd_reference`][fairagg.local.sgd_reference] (the same shuffles and update formula) and
    is evaluated with ``loss`` and ``accuracy``. The built-in
    [`LogisticRegression`][models.LogisticRegression] and [`MLP`][models.MLP] run
    compiled kernels instead (a private acceleration, tested equal to that loop to round-off),
    unless a subclass redefines one of the NumPy methods above: it then trains on the reference
    loop like any other model.
    """

    # Declared for type checkers; the concrete frozen dataclasses define them as fields.
    n_features: int
    n_classes: int
    l2: float  # the built-in models' L2 coefficient, which their kernels read

    # --- to be provided by subclasses -------------------------------------------------------
    @property
    def num_params(self) -> int:
        """Length d of the flat parameter vector."""
        raise NotImplementedError(_missing(self, "the property num_params"))

    def init_params(self, seed: int = 0, dtype: Any = np.float64) -> np.ndarray:
        """The initial parameters θ⁰, shape (num_params,), drawn from ``seed``."""
        raise NotImplementedError(_missing(self, "init_params(seed, dtype)"))

    def _kernel_dims(self) -> tuple[int, int] | None:
        """(n_hidden, activation code) of the built-in compiled kernel
        (``models._kernels.batch_loss_grad``) that computes this model's NumPy methods, or None
        (the default): local training and evaluation then run on the NumPy methods."""
        return None

    def _same_maths(self, cls: type) -> bool:
        """Whether this model's NumPy methods are those of the built-in class ``cls``: a
        subclass that redefines one of them must not run ``cls``'s kernel."""
        return _same_maths(type(self), cls)

    def _dims(self) -> tuple[int, int]:
        """``_kernel_dims`` of a model known to have the compiled kernel."""
        dims = self._kernel_dims()
        if dims is None:
            raise TypeError(f"{type(self).__name__} has no compiled kernel")
        return dims

    # --- validation ---------------------------------------------------------------------------
    def check_params(self, params: Any) -> np.ndarray:
        """``params`` as a 1-D float32 or float64 array of length ``num_params`` (other float
        dtypes become float64), refusing any other shape or dtype kind and NaN or infinity.

        Raises
        ------
        TypeError
            When ``params`` is not a float array.
        ValueError
            When its shape is not (num_params,) or it holds NaN or infinity.
        """
        p = _check_real_array(params, "params", 1)
        if p.shape[0] != self.num_params:
            raise ValueError(
                f"params must have shape ({self.num_params},) for {self!r}; got {p.shape}"
            )
        return p

    def check_data(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(X, y)`` checked: ``X`` a finite float array of shape (n, n_features) with n ≥ 1,
        ``y`` its n integer labels in [0, n_classes), returned as int64.

        Raises
        ------
        TypeError
            When ``X`` is not a float array or ``y`` not an integer one.
        ValueError
            When a shape, a label or a value is out of range.
        """
        Xa = self._check_X(X)
        if Xa.shape[0] == 0:
            raise ValueError("X must hold at least one sample; got 0 rows")
        return Xa, self._check_y(y, Xa.shape[0])

    def _check_params(self, params: Any) -> np.ndarray:
        return self.check_params(params)

    def _check_X(self, X: Any) -> np.ndarray:
        arr = _check_real_array(X, "X", 2)
        if arr.shape[1] != self.n_features:
            raise ValueError(f"X must have {self.n_features} columns; got shape {arr.shape}")
        return arr

    def _check_y(self, y: Any, n: int) -> np.ndarray:
        arr = np.asarray(y)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"y must hold integer class labels; got dtype {arr.dtype}")
        if arr.shape != (n,):
            raise ValueError(f"y must have shape ({n},) to match X; got {arr.shape}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n_classes):
            raise ValueError(
                f"y must hold labels in [0, {self.n_classes}); got range [{arr.min()}, {arr.max()}]"
            )
        return arr.astype(np.int64, copy=False)

    def _check_data(self, X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        return self.check_data(X, y)

    # --- shared NumPy API -----------------------------------------------------------------------
    def logits(self, params: Any, X: Any) -> np.ndarray:
        """Scores of every row of ``X``, shape (n, n_classes): the predicted class is their
        argmax."""
        raise NotImplementedError(_missing(self, "logits(params, X)"))

    def predict(self, params: Any, X: Any) -> np.ndarray:
        """Predicted class of every row of ``X``: argmax of the logits (first index on ties).

        Returns
        -------
        ndarray of int64, shape (n,)
        """
        return np.argmax(self.logits(params, X), axis=1).astype(np.int64)

    def accuracy(self, params: Any, X: Any, y: Any) -> float:
        """Fraction of rows of ``X`` whose prediction equals ``y``, in [0, 1]."""
        Xa, ya = self._check_data(X, y)
        return float(np.mean(self.predict(params, Xa) == ya))

    def loss(self, params: Any, X: Any, y: Any) -> float:
        """The mean loss over the rows of ``X`` (plus any penalty): the first value of
        [`loss_and_grad`][models.FlatModel.loss_and_grad]. For the built-in models, the
        mean cross-entropy plus ``l2/2 * ||weights||^2``."""
        return self.loss_and_grad(params, X, y)[0]

    def grad(self, params: Any, X: Any, y: Any) -> np.ndarray:
        """Gradient of [`loss`][models.FlatModel.loss] with respect to the flat parameter
        vector, shape (d,)."""
        return self.loss_and_grad(params, X, y)[1]

    def loss_and_grad(self, params: Any, X: Any, y: Any) -> tuple[float, np.ndarray]:
        """The model's mean loss over the rows of ``X`` (plus any penalty) and its gradient with
        respect to the flat parameter vector, shape (d,)."""
        raise NotImplementedError(_missing(self, "loss_and_grad(params, X, y)"))

    # --- Numba entry points ---------------------------------------------------------------------
    def loss_and_grad_numba(self, params: Any, X: Any, y: Any) -> tuple[float, np.ndarray]:
        """[`loss_and_grad`][models.FlatModel.loss_and_grad] computed by the Numba kernel, in
        the dtype of ``params``.

        ``X`` is cast to the dtype of ``params`` (float32 or float64). Equal to the NumPy
        reference to round-off (tested). Built-in models only: a model without the compiled
        kernel raises TypeError.
        """
        p = self._check_params(params)
        Xa, ya = self._check_data(X, y)
        Xa = np.ascontiguousarray(Xa, dtype=p.dtype)
        p = np.ascontiguousarray(p)
        H, act = self._dims()
        grad = np.empty_like(p)
        work = np.empty(_kernels.work_size(H, self.n_classes), dtype=p.dtype)
        rows = np.arange(Xa.shape[0], dtype=np.int64)
        loss, _ = _kernels.batch_loss_grad(
            p, Xa, ya, rows, 0, Xa.shape[0], H, self.n_classes, act, self.l2, grad, work, True
        )
        return float(loss), grad

    def evaluate_clients(
        self, params: Any, X: Any, y: Any, offsets: Any
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean loss and accuracy of ``params`` on each client's rows, in parallel over clients.

        Parameters
        ----------
        params : ndarray, shape (d,)
        X : ndarray, shape (N, n_features)
            All clients' rows, concatenated in client order.
        y : ndarray of int, shape (N,)
        offsets : ndarray of int, shape (K + 1,)
            Client k owns rows ``offsets[k]:offsets[k + 1]``; every client must own at least one.

        Returns
        -------
        losses : ndarray of float64, shape (K,)
        accuracies : ndarray of float64, shape (K,)
        """
        p = np.ascontiguousarray(self._check_params(params))
        return self._evaluate_rows(p, *self._evaluation_set(X, y, offsets, p.dtype))

    def _evaluation_set(
        self, X: Any, y: Any, offsets: Any, dtype: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[`evaluate_clients`][models.FlatModel.evaluate_clients]' data checked once:
        ``(X, y, offsets)`` as ``_evaluate_rows`` takes them, ``X`` in ``dtype`` (the
        parameters')."""
        Xa = np.ascontiguousarray(self._check_X(X), dtype=dtype)
        ya = self._check_y(y, Xa.shape[0])
        off = np.asarray(offsets, dtype=np.int64)
        if off.ndim != 1 or off.size < 2 or off[0] != 0 or off[-1] != Xa.shape[0]:
            raise ValueError(
                f"offsets must be a 1-D array from 0 to len(X) = {Xa.shape[0]}; got {off}"
            )
        sizes = np.diff(off)
        if np.any(sizes <= 0):
            raise ValueError("offsets must give every client at least one row")
        return Xa, ya, off

    def _evaluate_rows(
        self,
        p: np.ndarray,
        X: np.ndarray,
        y: np.ndarray,
        offsets: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """[`evaluate_clients`][models.FlatModel.evaluate_clients] on checked input: ``p`` and
        ``X`` C-contiguous of one dtype, ``y`` int64, ``offsets`` int64 from 0 to len(X) with every
        client owning a row.

        The rows are cut into blocks of about ``EVAL_BLOCK_MACS`` multiply-adds, computed on
        the threads of ``fairagg.kernels._threads`` (each block by one thread, so the result
        does not depend on the thread count), or in the calling thread when the whole evaluation
        is below ``_threads.MIN_PARALLEL_MACS``;
        a client's loss is the sum of its rows' losses, in row order, over its size, plus the L2
        penalty. A model without the compiled kernel is evaluated client by client in the calling
        thread, with its [`loss`][models.FlatModel.loss] and
        [`accuracy`][models.FlatModel.accuracy].
        """
        if self._kernel_dims() is None:
            return self._evaluate_reference(p, X, y, offsets)
        N = X.shape[0]
        row_loss = np.empty(N, dtype=np.float64)
        hit = np.empty(N, dtype=np.int64)
        size = self._block_rows(N)

        def block(lo: int) -> None:
            self._evaluate_block(p, X, y, lo, min(lo + size, N), row_loss, hit)

        run_tasks(block, range(0, N, size), threads_for(N * self._macs_per_row()))
        first = offsets[:-1]
        sizes = np.diff(offsets)
        losses = np.add.reduceat(row_loss, first) / sizes + self._penalty(p)
        return losses, np.add.reduceat(hit, first) / sizes

    def _evaluate_reference(
        self, p: np.ndarray, X: np.ndarray, y: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``_evaluate_rows`` of a model without the compiled kernel: its NumPy ``loss`` and
        ``accuracy`` on each client's rows."""
        K = offsets.size - 1
        losses = np.empty(K, dtype=np.float64)
        accs = np.empty(K, dtype=np.float64)
        for k in range(K):
            lo, hi = offsets[k], offsets[k + 1]
            losses[k] = self.loss(p, X[lo:hi], y[lo:hi])
            accs[k] = self.accuracy(p, X[lo:hi], y[lo:hi])
        return losses, accs

    def _macs_per_row(self) -> int:
        """Multiply-adds of one forward pass over one row."""
        H, _ = self._dims()
        p_in, C = self.n_features, self.n_classes
        return p_in * H + H * C if H else p_in * C

    def _block_rows(self, N: int) -> int:
        """Rows of an evaluation block of ``N`` rows: equal blocks of about
        ``EVAL_BLOCK_MACS`` multiply-adds, a multiple of 4 rows (``dense_rows``' groups),
        from the sizes alone (a row's bits do not depend on the thread count)."""
        nblk = -(-N * self._macs_per_row() // EVAL_BLOCK_MACS)  # ceil(work / EVAL_BLOCK_MACS)
        per = -(-N // nblk)  # ceil(N / nblk) rows a block ...
        return -(-per // 4) * 4  # ... rounded up to a multiple of 4

    def _penalty(self, p: np.ndarray) -> float:
        """``l2/2 · ||weights||²`` of ``p`` in float64 (biases carry no penalty)."""
        H, _ = self._dims()
        p_in, C = self.n_features, self.n_classes
        w2 = H * p_in + H if H else 0  # offset of the output layer's weights
        b2 = w2 + C * (H if H else p_in)
        weights = [p[: H * p_in], p[w2:b2]] if H else [p[:b2]]
        return l2_penalty(self.l2, *(w.astype(np.float64) for w in weights))

    def _evaluate_block(
        self,
        p: np.ndarray,
        X: np.ndarray,
        y: np.ndarray,
        lo: int,
        hi: int,
        row_loss: np.ndarray,
        hit: np.ndarray,
    ) -> None:
        """Cross-entropy (without the penalty) and hit of the rows ``lo:hi`` of ``X`` into
        ``row_loss[lo:hi]`` and ``hit[lo:hi]``: one block of ``_evaluate_rows``, ``lo`` a
        multiple of 4 (a row's logits are computed with the three rows beside it, in
        ``dense_rows``' groups of 4 counted from row 0, so its bits do not depend on the block
        size)."""
        Z = np.empty((hi - lo, self.n_classes), dtype=p.dtype)
        zy = np.empty(hi - lo, dtype=p.dtype)
        self._shifted_logits(p, X, y, lo, hi, Z, zy, hit[lo:hi])
        _row_losses(Z, zy, row_loss[lo:hi])

    def _shifted_logits(
        self,
        p: np.ndarray,
        X: np.ndarray,
        y: np.ndarray,
        lo: int,
        hi: int,
        Z: np.ndarray,
        zy: np.ndarray,
        hit: np.ndarray,
    ) -> None:
        """The first half of an evaluation of the rows ``lo:hi`` of ``X`` (the logits in
        ``dense_rows``' groups of 4 counted from row ``lo``): their logits less each row's
        maximum into ``Z`` (hi − lo, C), the label's entry of that into ``zy``, whether the
        argmax is the label into ``hit``. ``_row_losses`` finishes the rows' losses."""
        H, act = self._dims()
        C = self.n_classes
        p_in = X.shape[1]
        w2 = H * p_in + H if H else 0  # offset of the output layer's weights
        b2 = w2 + C * (H if H else p_in)
        if H:
            A = np.empty((hi - lo, H), dtype=p.dtype)
            _kernels.dense_rows(p, 0, H * p_in, X, lo, hi, A)
            if act == _kernels.ACT_TANH:
                np.tanh(A, out=A)
            else:
                np.maximum(A, 0.0, out=A)
            _kernels.dense_rows(p, w2, b2, A, 0, hi - lo, Z)
        else:
            _kernels.dense_rows(p, 0, b2, X, lo, hi, Z)
        _kernels.shift_rows(Z, y, lo, zy, hit)


class SegmentEvaluation:
    """The evaluation of several clients whose rows lie apart (``train_clients``' reports of
    F_k(θ^t) and the accuracy of θ^t), in two halves: each client's ``_shifted_logits`` by
    ``client`` (on any thread; the rows of one client in one call), then the exponentials,
    logarithms and means of them all at once by ``finish``, a few NumPy calls in all rather than
    a dozen a client. Each client's numbers are those of ``evaluate_clients`` on its rows alone,
    to the bit (tests/test_local.py): its logits are grouped from its first row as there, every
    later operation is elementwise or row by row, and its mean is ``np.add.reduceat`` over its
    own rows.

    ``sizes``: the clients' row counts, in the order of ``client``'s index ``i``."""

    def __init__(self, model: FlatModel, p: np.ndarray, sizes: np.ndarray) -> None:
        self.model, self.p = model, p
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.starts = np.zeros(self.sizes.size, dtype=np.int64)
        np.cumsum(self.sizes[:-1], out=self.starts[1:])
        N = int(self.sizes.sum())
        self.Z = np.empty((N, model.n_classes), dtype=p.dtype)
        self.zy = np.empty(N, dtype=p.dtype)
        self.hit = np.empty(N, dtype=np.int64)

    def client(self, i: int, X: np.ndarray, y: np.ndarray, lo: int) -> None:
        """The first half for client ``i``, whose rows are ``X[lo : lo + sizes[i]]``."""
        a = int(self.starts[i])
        b = a + int(self.sizes[i])
        hi = lo + (b - a)
        self.model._shifted_logits(self.p, X, y, lo, hi, self.Z[a:b], self.zy[a:b], self.hit[a:b])

    def finish(self, penalty: float) -> tuple[np.ndarray, np.ndarray]:
        """(losses, accuracies), shape (m,) each, of every client; ``penalty`` from
        ``_penalty``."""
        row_loss = np.empty(self.zy.size, dtype=np.float64)
        _row_losses(self.Z, self.zy, row_loss)
        losses = np.add.reduceat(row_loss, self.starts) / self.sizes + penalty
        return losses, np.add.reduceat(self.hit, self.starts) / self.sizes


def _row_losses(Z: np.ndarray, zy: np.ndarray, row_loss: np.ndarray) -> None:
    """The second half of an evaluation: each row's cross-entropy log Σ_c e^{Z[i, c]} − zy[i]
    from ``_shifted_logits``' shifted logits (``Z`` is overwritten) into ``row_loss``."""
    np.exp(Z, out=Z)
    s = np.empty(Z.shape[0], dtype=Z.dtype)
    _kernels.row_sums(Z, s)
    np.log(s, out=s)
    np.subtract(s, zy, out=row_loss, casting="unsafe")


#: The NumPy methods a built-in model's compiled kernel reproduces: a subclass that redefines one
#: of them trains and is evaluated on the NumPy reference instead (``FlatModel._same_maths``).
_KERNEL_MATHS = ("logits", "loss_and_grad", "loss", "grad", "predict", "accuracy")


#: ``_same_maths``' answers by (class, built-in class): asked for at every kernel call.
_SAME_MATHS: dict[tuple[type, type], bool] = {}


def _same_maths(kind: type, cls: type) -> bool:
    """Whether the class ``kind`` has the NumPy methods of ``cls``."""
    key = (kind, cls)
    if key not in _SAME_MATHS:
        _SAME_MATHS[key] = all(getattr(kind, n) is getattr(cls, n) for n in _KERNEL_MATHS)
    return _SAME_MATHS[key]


def _missing(model: FlatModel, what: str) -> str:
    return (
        f"{type(model).__name__} must define {what}: a model is a subclass of"
        " fairagg.models.FlatModel that provides n_features, n_classes, num_params, init_params,"
        " logits and loss_and_grad"
    )


#: Multiply-adds per evaluation block at most (3500 rows of the 60 × 10 logistic model, 940 of the
#: 60-32-10 MLP): large enough that the Python calls of a block (about 10 µs) cost little, small
#: enough that a block's activations stay in cache and the rows split evenly between threads.
EVAL_BLOCK_MACS = 2**21


#: The most parameters a model may have (2^40 float64 are 8 TiB): a product of dimensions beyond
#: it is refused naming them, not by numpy when the parameter vector is allocated.
_MAX_PARAMS = 2**40


def l2_penalty(l2: float, *weights: np.ndarray) -> float:
    """``l2/2 · Σ ||W||²`` over the weight blocks: exactly 0 when ``l2`` is 0 (not 0 · inf = NaN
    for weights whose squares overflow), +inf when the penalty itself exceeds float64."""
    if l2 == 0:
        return 0.0
    with np.errstate(over="ignore"):
        return float(0.5 * l2 * sum(float(np.sum(w * w)) for w in weights))


def check_dims(n_features: Any, n_classes: Any, l2: Any, n_hidden: Any = None) -> None:
    for name, v, low in (("n_features", n_features, 1), ("n_classes", n_classes, 2)) + (
        (("n_hidden", n_hidden, 1),) if n_hidden is not None else ()
    ):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer; got {type(v).__name__}")
        if v < low:
            raise ValueError(f"{name} must be >= {low}; got {v}")
    dims = [int(n_features), int(n_classes)] + ([int(n_hidden)] if n_hidden is not None else [])
    if math.prod(dims) > _MAX_PARAMS:
        names = " · ".join(["n_features", "n_classes"] + (["n_hidden"] if n_hidden else []))
        raise ValueError(f"{names} = {math.prod(dims)} exceeds {_MAX_PARAMS} parameters")
    if isinstance(l2, bool) or not isinstance(l2, (int, float, np.floating, np.integer)):
        raise TypeError(f"l2 must be a real number; got {type(l2).__name__}")
    if not np.isfinite(l2) or l2 < 0:
        raise ValueError(f"l2 must be a finite number >= 0; got {l2}")

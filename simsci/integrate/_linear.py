r"""Exact transitions of linear time-invariant SDEs, and the matrix exponential.

Over an interval of length :math:`\Delta`, ``dz = (A z + b) dt + L dW`` has the Gaussian
transition :math:`z(t+\Delta) \mid z(t) \sim \mathcal N(F z + c, Q)` with
:math:`F = e^{A\Delta}`, :math:`c = \int_0^\Delta e^{As} b\,ds`,
:math:`Q = \int_0^\Delta e^{As} L L^\top e^{A^\top s}\,ds`: all three from ONE
:math:`(2d+1)`-square exponential (Van Loan 1978, IEEE TAC 23, with the affine part
folded in) over :math:`\Delta / 2^s`, then doubled s times on (F, c, Q) themselves.
:func:`lti_transition` computes them; :func:`expm` is the batched exponential (scaling
and squaring of a Paterson–Stockmeyer Taylor polynomial).

They live here, below both of their users: the exact linear-SDE simulator
(``simsci.systems``, method "exact") and SDEVI's Gauss–Markov posterior
(``simsci.models.sdevi``), which reads the derivation in full.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["expm", "lti_transition"]


def _sym(P: Tensor) -> Tensor:
    """The symmetric (Hermitian, for complex P) part of P."""
    return 0.5 * (P + P.mH)


def expm(M: Tensor, degree: int | None = None) -> Tensor:
    """Matrix exponential of ``M`` (..., k, k) by scaling and squaring with a Taylor
    polynomial of ``degree`` on ``M / 2^s``, ``||M / 2^s||_1 <= 1/2``.

    Why not ``torch.linalg.matrix_exp``: its backward exponentiates a ``2k``-square block
    matrix per entry and took 70% of an SDEVI training step; this one is plain matmuls
    whose autograd is cheap. Truncation error <= ``0.5^(degree+1)/(degree+1)!`` relative
    (~1e-11 at degree 10, the float64 default; 2e-6 at degree 6, the float32 default,
    near float32's resolution) before squaring; each matrix of a batch gets its own
    ``s`` (:func:`_scaled`). The polynomial is evaluated by Paterson–Stockmeyer (powers
    up to ``q ~ sqrt(degree)``, then Horner in ``X^q``): 3 matrix products at degree 6
    and 5 at degree 10, against Horner's 5 and 9.
    """
    if degree is None:
        degree = _degree(M.dtype)
    if degree < 1:
        raise ValueError(f"degree must be >= 1, got {degree}")
    X, plan = _scaled(M)
    (E,) = _doubled((_taylor(X, degree),), plan, lambda E: (E @ E,))
    return E


def _degree(dtype: torch.dtype) -> int:
    """The Taylor degree that reaches ``dtype``'s resolution at norm 1/2."""
    return 10 if dtype == torch.float64 else 6


#: batches of at least this many matrices are sorted by their squaring counts and each
#: round squares a prefix (_scaled); smaller ones square all in every round and keep the
#: result where it is due: the same numbers, and there the sort and the slices cost more
#: than the products they save (SDEVI's sequential non-linear chain, 64 matrices a call:
#: 22% slower per training step sorted)
_PER_MATRIX_FROM = 256


def _scaled(M: Tensor):
    """``M`` (..., k, k) as a flat batch ``X = M_i / 2^{s_i}`` with each matrix's own
    ``s_i`` (the least with ``||X_i||_1 <= 1/2``), sorted by ``s_i`` descending, and the
    plan :func:`_doubled` needs to square each result back ``s_i`` times.

    Why per matrix: one ``s`` for the batch (the largest norm's) made every matrix pay
    the squarings of the longest step. In an SDEVI training batch (32 pendulum episodes,
    1,888 intervals) the ``s_i`` were 2 for half the intervals and 6 for one: 2.1x the
    squaring products that per-matrix counts need (a training step 11-13% faster).
    Sorted, the matrices still to square at round ``r`` are a prefix of the batch: a
    slice, not a gather. Batches under ``_PER_MATRIX_FROM`` are squared whole each round
    and keep the square where it is due (``torch.where``). Either way each matrix's
    result does not depend on the batch it came in (a prediction at two times equals the
    same two times inside a dense grid)."""
    shape = M.shape
    flat = M.reshape(-1, *shape[-2:])
    norm = flat.detach().abs().sum(-2).amax(-1)  # 1-norms, (N,)
    s = torch.ceil(torch.log2(norm / 0.5)).clamp_min(0).nan_to_num(0.0)  # norm 0: -inf -> 0
    top = int(s.max()) if s.numel() else 0
    if top == 0:
        return flat, (shape, None, [])
    rounds = torch.arange(top, device=s.device)[:, None]
    if len(flat) < _PER_MATRIX_FROM:  # every round on all, kept where s_i says
        X = flat * torch.exp2(-s).to(flat.dtype)[:, None, None]
        return X, (shape, None, list(s[None, :] > rounds))
    s, order = torch.sort(s, descending=True, stable=True)
    counts = [int(n) for n in (s[None, :] > rounds).sum(1)]
    X = flat.index_select(0, order) * torch.exp2(-s).to(flat.dtype)[:, None, None]
    return X, (shape, order, counts)


def _doubled(state: tuple, plan, step) -> tuple:
    """Apply ``step`` (a function of the state tuple, each of leading size N) to the
    prefix of ``counts[r]`` matrices at round r, then undo :func:`_scaled`'s sorting;
    every result keeps its flat leading axis (N, ...) with the batch shape restored by
    the caller through ``plan[0]``."""
    shape, order, counts = plan
    for n in counts:
        if torch.is_tensor(n):  # a mask: the round computed on all, kept where it is due
            new = step(*state)
            state = tuple(
                torch.where(n.view(-1, *[1] * (x.dim() - 1)), a, x) for a, x in zip(new, state)
            )
        elif n == len(state[0]):
            state = step(*state)
        else:
            head = step(*(x[:n] for x in state))
            state = tuple(torch.cat([a, x[n:]]) for a, x in zip(head, state))
    if order is not None:
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order), device=order.device)
        state = tuple(x.index_select(0, inverse) for x in state)
    batch = shape[:-2]
    return tuple(x.reshape(*batch, *x.shape[1:]) for x in state)


def _taylor(X: Tensor, degree: int) -> Tensor:
    """``sum_{j <= degree} X^j / j!`` by Paterson–Stockmeyer: with ``q ~ sqrt(degree)``
    and blocks ``B_k = sum_{j < q} X^j / (kq + j)!``, ``p = B_0 + X^q (B_1 + X^q (B_2 +
    ...))``."""
    coef = [1.0 / math.factorial(j) for j in range(degree + 1)]
    q = max(1, math.ceil(math.sqrt(degree + 1)))
    powers = [None, X]  # powers[j] = X^j
    for _ in range(q - 1):
        powers.append(powers[-1] @ X)
    eye = torch.eye(X.shape[-1], dtype=X.dtype, device=X.device)

    def block(lo: int) -> Tensor:  # B_{lo / q}; a constant (k, k) matrix if it has no X
        out = coef[lo] * eye
        for j in range(1, min(q - 1, degree - lo) + 1):
            out = torch.add(out, powers[j], alpha=coef[lo + j])
        return out

    r = degree // q
    if degree == r * q and r > 0:  # B_r is the constant coef[degree] I: no product
        E = torch.add(block((r - 1) * q), powers[q], alpha=coef[degree])
        r -= 1
    else:
        E = block(r * q)
    for k in range(r - 1, -1, -1):
        E = torch.add(block(k * q), powers[q] @ E)
    return E


def lti_transition(A: Tensor, b: Tensor, L: Tensor, dt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Exact transition ``(F, c, Q)`` of ``dz = (A z + b) dt + L dW`` over ``dt``.

    A (..., d, d), b (..., d), L (..., d, m), dt (...) broadcastable to the batch;
    returns F (..., d, d), c (..., d), Q (..., d, d) (symmetric). ``dt >= 0``.

    A time-invariant SDE (A, b, L without batch axes, e.g. a shared prior) over a batch
    of steps is exponentiated once per *distinct* step and gathered back: the same
    values, a fraction of the cost when steps repeat (times on a grid, padding).
    """
    if bool((torch.as_tensor(dt) < 0).any()):
        raise ValueError("time steps must be >= 0 (times must not decrease)")
    dt = torch.as_tensor(dt, dtype=A.dtype, device=A.device)
    if A.dim() == 2 and b.dim() == 1 and L.dim() == 2 and dt.dim() > 0 and not dt.requires_grad:
        steps, where = torch.unique(dt, return_inverse=True)
        if steps.numel() < dt.numel():
            flat = where.reshape(-1)
            return tuple(
                x.index_select(0, flat).view(*dt.shape, *x.shape[1:])
                for x in _lti_transition(A, b, L, steps)
            )
    return _lti_transition(A, b, L, dt)


def _lti_transition(A: Tensor, b: Tensor, L: Tensor, dt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    d = A.shape[-1]
    batch = torch.broadcast_shapes(A.shape[:-2], b.shape[:-1], L.shape[:-2], dt.shape)
    h = dt.expand(batch)[..., None]
    Ah = A * h[..., None]
    LLth = (L @ L.transpose(-1, -2)) * h[..., None]
    bh = (b * h)[..., None, :]
    # one exponential for F, c and Q (Van Loan with the affine part folded in):
    # exp(h [[-A, [LL^T, 0]], [0, At]]) with At = [[A, b], [0, 0]]^T has the lower-right
    # block exp(h At) = [[F, c], [0, 1]]^T and the upper-right block's first d columns
    # H12 with Q = F H12. Rows of h M: [-Ah, LL^T h, 0], [0, (Ah)^T, 0], [0, (bh)^T, 0];
    # assembled by concatenation (whose backward only slices), scaled by h block-wise
    zero = Ah.new_zeros(())
    rows = [
        [-Ah, LLth, zero.expand(*batch, d, 1)],
        [zero.expand(*batch, d, d), Ah.transpose(-1, -2), zero.expand(*batch, d, 1)],
        [zero.expand(*batch, 1, d), bh, zero.expand(*batch, 1, 1)],
    ]
    rows = [[x.expand(*batch, *x.shape[-2:]) for x in row] for row in rows]
    M = torch.cat([torch.cat(row, -1) for row in rows], -2)
    # Scaling and squaring, with the squaring done on (F, c, Q) rather than on the
    # exponential: Q = F H12 cancels e^{-decay h} against e^{+decay h} and, in float32,
    # turned the noise of a fast mode over a long gap into garbage (a non-positive-
    # definite Q once decay x h reached ~10: SDEVI's exact inference on sparse pendulum
    # data). The exponential is taken over h / 2^s only, where ||M|| <= 1/2 and the
    # cancellation is harmless, and the doubling Q(2h) = Q(h) + F(h) Q(h) F(h)^T,
    # c(2h) = c(h) + F(h) c(h), F(2h) = F(h)^2 adds positive terms only. Each matrix
    # is scaled and doubled by its own count (_scaled).
    X, plan = _scaled(M)
    E = _taylor(X, _degree(M.dtype))
    # only the middle column block is read: [H12; F^T; c^T]
    H12, Ft, ct = E[..., d : 2 * d].split([d, d, 1], dim=-2)
    F = Ft.transpose(-1, -2)

    def double(F, c, Q):
        return F @ F, c + (F @ c[..., None])[..., 0], _sym(Q + F @ Q @ F.transpose(-1, -2))

    return _doubled((F, ct[..., 0, :], _sym(F @ H12)), plan, double)

"""``lti_transition`` against the closed form of independent OU processes, stiff ones
included."""

import pytest
import torch

from simsci.integrate import lti_transition


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("h", [0.01, 0.5, 2.0, 30.0])
def test_ou_transition_matches_the_closed_form_for_fast_and_slow_modes(dtype, h):
    r"""dz = -lam z dt + sqrt(2 lam) dW + b dt: F = e^{-lam h}, c = b (1 - F) / lam,
    Q = 1 - e^{-2 lam h}. Decay x step up to 3810: the plain Van Loan product Q = F H12
    overflowed (NaN in float32 at lam h = 254)."""
    lam = torch.tensor([0.01, 1.0, 10.0, 127.0], dtype=dtype)
    b = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=dtype)
    A, L = -torch.diag(lam), torch.diag(torch.sqrt(2 * lam))
    F, c, Q = lti_transition(A, b, L, torch.tensor(h, dtype=dtype))
    decay = torch.exp(-lam * h)
    # float32: 13 squarings at the longest step double a 1e-7 error 13 times
    tol = 2e-3 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(F, torch.diag(decay), rtol=tol, atol=1e-30)
    torch.testing.assert_close(c, b * (1 - decay) / lam, rtol=tol, atol=0.0)
    torch.testing.assert_close(Q.diagonal(), 1 - decay**2, rtol=tol, atol=0.0)
    assert (Q - torch.diag(Q.diagonal())).abs().max() <= tol * 1e-2

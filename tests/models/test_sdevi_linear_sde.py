"""SDEVI's bound on the exact linear-SDE set: with the true prior and observation model,
the path-free ELBO never exceeds the exact Kalman evidence of a generated file and
reaches it when the posterior is fitted (the true smoother is a Gauss-Markov chain)."""

import torch

from simsci import data, systems
from simsci.models._series import observed_mask
from simsci.models.sdevi import kalman_log_likelihood, linear_gaussian_elbo, lti_transition
from simsci.models.sdevi._model import _tril


def test_elbo_reaches_the_exact_evidence_of_a_generated_linear_sde_file(tmp_path):
    path = systems.generate(
        "linear_sde", 2, t_end=3.0, dt=0.1, keep=0.3, obs_noise=0.2, out=tmp_path / "lin.h5",
        seed=0, progress=False,
    )  # fmt: skip
    traj = data.open(path)
    system = systems.get("linear_sde")
    A, b, L, m0, P0 = system.linear_form()
    H, R = system.observation_model(traj.meta)
    ep = traj[0]
    t = torch.as_tensor(ep["t"])[None]
    y = torch.as_tensor(ep["x"], dtype=torch.float64)[None]
    batch = {"x": y, "valid": torch.ones(t.shape, dtype=torch.bool)}
    mask = observed_mask(batch)
    # the prior at the first kept time (z(0) ~ N(m0, P0) at t = 0)
    F, c, Q = lti_transition(A, b, L, t[:, 0])
    prior = {"A": A, "b": b, "L": L, "m0": (F @ m0 + c)[0], "P0": (F @ P0 @ F.mT + Q)[0]}
    logp, _, _ = kalman_log_likelihood(y, mask, t, A, b, L, prior["m0"], prior["P0"], H, R)

    torch.manual_seed(0)
    n, d = t.shape[1], 2
    params = {
        "m1": torch.zeros(1, d, dtype=torch.float64, requires_grad=True),
        "l1": torch.zeros(1, d * d, dtype=torch.float64, requires_grad=True),
        "A": A.expand(1, n - 1, d, d).clone().requires_grad_(),
        "b": torch.zeros(1, n - 1, d, dtype=torch.float64, requires_grad=True),
        "L": torch.zeros(1, n - 1, d * d, dtype=torch.float64, requires_grad=True),
    }
    # L-BFGS: the bound is smooth and deterministic (no path sampling), so a
    # quasi-Newton method closes the gap in a few hundred evaluations
    opt = torch.optim.LBFGS(params.values(), lr=1, max_iter=400, line_search_fn="strong_wolfe")

    def elbo():
        l1 = _tril(params["l1"], d)
        post = {"m1": params["m1"], "P1": l1 @ l1.mT, "A": params["A"], "b": params["b"],
                "L": _tril(params["L"], d)}  # fmt: skip
        return linear_gaussian_elbo(y, mask, t, post, prior, H, R)[0]

    values = []

    def closure():
        opt.zero_grad()
        value = elbo()
        values.append(value.item())
        (-value).backward()
        return -value

    start = elbo().item()
    opt.step(closure)
    assert max(values) <= logp.item() + 1e-8  # a lower bound at every evaluation
    gap = logp.item() - elbo().item()
    assert gap < 0.01 * (logp.item() - start), (start, elbo().item(), logp.item())
    assert gap < 0.05, gap

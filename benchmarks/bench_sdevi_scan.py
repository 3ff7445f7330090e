"""SDEVI's marginals by a parallel-prefix scan vs the sequential loop: forward + backward.

Claim checked (issue 6): the Python loop over intervals in ``propagate`` (and its
backward) was the largest cost of an SDEVI training step after the matrix
exponentials; an associative scan over the affine Gaussian maps ``(F, c, Q)``, with
the gradient by the adjoint scan, takes ``O(log n)`` sequential steps instead of ``n``.

Same run, same chains (batch 32, latent 8, float32 like the model, one thread): the
posterior's marginals and the chain KL against a shared prior, plus a fixed linear
function of the marginals (standing in for the expected log-likelihood), then
backward to the transitions ``(F, c, Q)`` of both chains and to ``q(z_1)``:

- ``loop``: the marginals by the loop as it was before the scan (``F[:, i]`` per
  interval, autograd through it) -- the peer;
- ``loop_unbind``: the same loop over ``unbind``-ed transitions (the backward of ``n``
  selects zero-fills ``n`` full-size gradients: quadratic in ``n``), autograd through it;
- ``scan``: :func:`simsci.models.sdevi.propagate` (odd/even scan, adjoint backward).

All three feed the same :func:`chain_kl` (``marginals=``), so the difference is the
propagation alone; ``*_propagate_only`` rows time the propagation and the readout
without the KL. Medians of repeats, warm. Usage: ``python
benchmarks/bench_sdevi_scan.py [--quick]``; writes ``benchmarks/results/sdevi_scan_cpu.json``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from simsci.bench import time_call, write_result
from simsci.models.sdevi import chain_kl, lti_transition, propagate
from simsci.models.sdevi._gauss_markov import _propagate_loop

RESULTS = Path(__file__).resolve().parent / "results"


def loop_before(m0, P0, F, c, Q):
    """The sequential recursion as ``propagate`` had it before the scan."""
    sym = lambda P: 0.5 * (P + P.transpose(-1, -2))  # noqa: E731
    means, covs = [m0], [sym(P0)]
    for i in range(F.shape[1]):
        Fi = F[:, i]
        means.append((Fi @ means[-1][..., None])[..., 0] + c[:, i])
        covs.append(sym(Fi @ covs[-1] @ Fi.transpose(-1, -2) + Q[:, i]))
    return torch.stack(means, 1), torch.stack(covs, 1)


def chains(B: int, n: int, d: int, dtype, seed: int = 0):
    """A posterior-like LTV chain and a shared stable prior on irregular steps."""
    g = torch.Generator().manual_seed(seed)
    eye = torch.eye(d, dtype=torch.float64)
    A = 3.0 * torch.tanh(torch.randn(B, n - 1, d, d, generator=g, dtype=torch.float64) / 3)
    b = torch.randn(B, n - 1, d, generator=g, dtype=torch.float64)
    L = 0.3 * torch.randn(B, n - 1, d, d, generator=g, dtype=torch.float64).tril() + 0.1 * eye
    dt = 0.1 * torch.randint(1, 6, (B, n - 1), generator=g).double() / 12.0  # grid gaps
    W = 0.3 * torch.randn(d, d, generator=g, dtype=torch.float64)
    A_p = -0.5 * eye + W - W.T
    with torch.no_grad():
        q = lti_transition(A, b, L, dt)
        p = lti_transition(A_p, torch.zeros(d, dtype=torch.float64), 0.5 * eye, dt)
    m1 = torch.randn(B, d, generator=g, dtype=torch.float64)
    M = torch.randn(B, d, d, generator=g, dtype=torch.float64)
    P1 = 0.1 * M @ M.transpose(-1, -2) + 0.1 * eye
    leaves = [x.to(dtype).requires_grad_() for x in (m1, P1, *q, *p)]
    weights = (
        torch.randn(B, n, d, generator=g, dtype=torch.float64).to(dtype),
        torch.randn(B, n, d, d, generator=g, dtype=torch.float64).to(dtype),
    )
    return leaves, weights


def objective(marginals_fn, leaves, weights):
    m1, P1, F_q, c_q, Q_q, F_p, c_p, Q_p = leaves
    B, d = m1.shape
    means, covs = marginals_fn(m1, P1, F_q, c_q, Q_q)
    m0 = torch.zeros(d, dtype=m1.dtype).expand(B, d)
    P0 = torch.eye(d, dtype=m1.dtype).expand(B, d, d)
    kl = chain_kl(m1, P1, (F_q, c_q, Q_q), m0, P0, (F_p, c_p, Q_p), marginals=(means, covs))
    return (means * weights[0]).sum() + (covs * weights[1]).sum() + kl.sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    B, d, dtype = 32, 8, torch.float32
    sizes = (16, 64, 256) if args.quick else (16, 64, 256, 1024)
    methods = {"loop": loop_before, "loop_unbind": _propagate_loop, "scan": propagate}
    rows = []
    for n in sizes:
        leaves, weights = chains(B, n, d, dtype)
        row = {"n": n}
        grads = {}
        for part in ("propagate_chain_kl", "propagate"):
            for name, fn in methods.items():

                def step(fn=fn, leaves=leaves, weights=weights, part=part):
                    for x in leaves:
                        x.grad = None
                    if part == "propagate":
                        means, covs = fn(*leaves[:5])
                        ((means * weights[0]).sum() + (covs * weights[1]).sum()).backward()
                    else:
                        objective(fn, leaves, weights).backward()

                repeat = 3 if (args.quick or (name == "loop" and n >= 1024)) else 9
                key = name if part == "propagate_chain_kl" else f"{name}_propagate_only"
                row[f"{key}_s"] = time_call(step, repeat=repeat).median
                if part == "propagate_chain_kl":
                    step()
                    grads[name] = [x.grad.double().clone() for x in leaves]
        # the three agree to float32 round-off (relative to each gradient's size)
        row["max_rel_grad_diff_scan_vs_loop"] = max(
            float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
            for a, b in zip(grads["scan"], grads["loop"])
        )
        row["speedup_vs_loop"] = row["loop_s"] / row["scan_s"]
        row["speedup_vs_loop_unbind"] = row["loop_unbind_s"] / row["scan_s"]
        row["propagate_only_speedup_vs_loop"] = (
            row["loop_propagate_only_s"] / row["scan_propagate_only_s"]
        )
        rows.append(row)
        print(
            f"n={n:5d}: loop {row['loop_s'] * 1e3:8.1f} ms, loop (unbind) "
            f"{row['loop_unbind_s'] * 1e3:7.1f} ms, scan {row['scan_s'] * 1e3:7.1f} ms: "
            f"{row['speedup_vs_loop']:.1f}x ({row['speedup_vs_loop_unbind']:.1f}x vs unbind); "
            f"propagate alone {row['loop_propagate_only_s'] * 1e3:.1f} / "
            f"{row['loop_unbind_propagate_only_s'] * 1e3:.1f} / "
            f"{row['scan_propagate_only_s'] * 1e3:.1f} ms; "
            f"max rel grad diff {row['max_rel_grad_diff_scan_vs_loop']:.1e}",
            flush=True,
        )
    result = {
        "what": "propagate + chain_kl (marginals given) + linear readout, forward + backward",
        "batch": B,
        "latent": d,
        "dtype": "float32",
        "rows": rows,
    }
    out = args.out or RESULTS / "sdevi_scan_cpu.json"
    print(f"wrote {write_result(out, result)}")


if __name__ == "__main__":
    main()

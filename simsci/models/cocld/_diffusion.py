r"""The diffusion-based latent interpolator: p(h | t, g), the population's latent law.

At calendar time t the individuals of population g have latent states
:math:`\{h_i(t)\}`; their distribution :math:`q_t` drifts with t (the population's
distributional shift). A conditional DDPM learns it from the individual latents the
neural ODEs produce at event times, conditioned on the population latent
:math:`z(t, g)`:

.. math::

    x_s = \sqrt{\bar\alpha_s}\,\tilde h + \sqrt{1 - \bar\alpha_s}\,\varepsilon, \qquad
    \mathcal L = \mathbb E_{s, \varepsilon}\,
        \lVert \varepsilon - \varepsilon_\psi(x_s, s, z(t, g)) \rVert^2 / d,

with :math:`\tilde h = (h - \mu)/\sigma` standardised by running statistics (buffers,
no gradient, so the loss cannot be lowered by shrinking the latents: the scale is
fixed per step), the cosine schedule of Nichol & Dhariwal (2021) with S steps, and an
MLP :math:`\varepsilon_\psi` reading :math:`[x_s, \text{emb}(s), z]`. Ancestral
sampling takes the posterior mean from the clean estimate
:math:`\hat x_0 = (x_s - \sqrt{1-\bar\alpha_s}\,\varepsilon_\psi)/\sqrt{\bar\alpha_s}`
clipped to ±4 (standardised units), the usual DDPM guard. Because z is a
continuous function of t, the model interpolates the population law at times where no
individual was observed and generates population latents at any time by ancestral
sampling (:meth:`LatentDiffusion.sample`).

The same loss, with gradients into the individual latents too, is CoCLD's alignment
term: it is the (negative, up to constants) ELBO of an individual latent under the
population law at its time, so minimising it pulls individual latents towards states
the population holds at that time, and pulls z(t, g) towards a description of the
population.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def cosine_schedule(steps: int) -> torch.Tensor:
    """ᾱ_s for s = 0..S (ᾱ_0 = 1), the cosine schedule with offset 0.008, clipped so
    that every β_s <= 0.999."""
    s = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((s + 0.008) / 1.008 * math.pi / 2) ** 2
    abar = f / f[0]
    beta = (1 - abar[1:] / abar[:-1]).clamp(max=0.999)
    return torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(1 - beta, 0)])


class LatentDiffusion(nn.Module):
    """ε-prediction DDPM over (N, dim) latents conditioned on (N, cond_dim)."""

    def __init__(
        self, dim: int, cond_dim: int, *, hidden: int = 64, steps: int = 50, clip: float = 4.0
    ):
        super().__init__()
        self.clip = float(clip)  # clean estimates are clipped to ±clip standard deviations
        if steps < 2:
            raise ValueError(f"diffusion steps must be >= 2, got {steps}")
        self.dim, self.steps = int(dim), int(steps)
        self.register_buffer("abar", cosine_schedule(steps).float())
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.net = nn.Sequential(
            nn.Linear(dim + 16 + cond_dim, hidden),
            nn.SiLU(),
            nn.Linear(hidden, hidden),
            nn.SiLU(),
            nn.Linear(hidden, dim),
        )

    def _embed(self, s: torch.Tensor) -> torch.Tensor:
        freq = torch.exp(torch.linspace(0, math.log(100.0), 8, device=s.device))
        x = s[:, None].float() / self.steps * freq * math.pi
        return torch.cat([x.sin(), x.cos()], -1)

    def eps(self, x: torch.Tensor, s: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, self._embed(s), cond], -1))

    @torch.no_grad()
    def update_stats(self, h: torch.Tensor, momentum: float = 0.05) -> None:
        """Running mean/variance of the latents (the standardisation)."""
        if h.shape[0] < 2:
            return
        self.mean.lerp_(h.mean(0), momentum)
        self.var.lerp_(h.var(0), momentum)

    def loss(self, h: torch.Tensor, cond: torch.Tensor, generator=None) -> torch.Tensor:
        """The denoising loss per latent dimension, averaged over the N rows."""
        x0 = (h - self.mean) / self.var.clamp_min(1e-6).sqrt()
        s = torch.randint(1, self.steps + 1, (h.shape[0],), device=h.device, generator=generator)
        noise = torch.randn(h.shape, device=h.device, dtype=h.dtype, generator=generator)
        a = self.abar[s][:, None].to(h)
        xs = a.sqrt() * x0 + (1 - a).sqrt() * noise
        return ((self.eps(xs, s, cond) - noise) ** 2).mean()

    @torch.no_grad()
    def sample(self, cond: torch.Tensor, generator=None) -> torch.Tensor:
        """(N, dim) latents drawn from p(h | cond) by ancestral DDPM sampling, in the
        latents' own units (the standardisation undone)."""
        n = cond.shape[0]
        x = torch.randn(n, self.dim, device=cond.device, dtype=cond.dtype, generator=generator)
        for s in range(self.steps, 0, -1):
            a, a_prev = self.abar[s].to(x), self.abar[s - 1].to(x)
            beta = 1 - a / a_prev
            eps = self.eps(x, torch.full((n,), s, device=x.device), cond)
            # the posterior mean from the clipped clean estimate: at the first steps
            # (beta near 0.999) an unclipped estimate amplifies the eps error ~30x and
            # draws reached |h| ~ 85 where real latents stay below 3
            x0 = ((x - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-self.clip, self.clip)
            x = (a_prev.sqrt() * beta * x0 + (1 - beta).sqrt() * (1 - a_prev) * x) / (1 - a)
            if s > 1:
                sigma = (beta * (1 - a_prev) / (1 - a)).sqrt()
                x = x + sigma * torch.randn(
                    x.shape, device=x.device, dtype=x.dtype, generator=generator
                )
        return x * self.var.clamp_min(1e-6).sqrt() + self.mean

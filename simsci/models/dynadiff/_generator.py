r"""DynaDiff's generator: conditional diffusion in the latent space of expert weights.

Pipeline (one model, :class:`DynaDiff`, trained in two stages by :func:`train_generator`):

1. **Weight autoencoder.** An expert's weights are z-scored per coordinate over the zoo,
   ``u = (w - w_mean) / w_std`` (the experts are fine-tuned from one pooled model, so
   their differences are small next to the weights; z-scoring makes them visible), turned
   into a neuron graph (:mod:`._graph`), and encoded by edge-gated graph attention into a
   latent ``h`` (``latent_dim``). An MLP decodes ``h`` back to ``u``. Loss: weight
   reconstruction + the **functional loss** (below); latents are perturbed by Gaussian
   noise of 0.1 of their spread while training so that the decoder is smooth near the
   zoo, where the diffusion model's samples land.
2. **Decoder refinement.** The zoo is encoded once (the latents are then fixed) and
   the decoder alone is trained further on those latents with the same losses: cheap
   (no graph attention in the loop) and it closes most of the gap between decoded and
   true experts that a noisy-latent autoencoder leaves.
3. **Conditional diffusion** over the normalised latents ``z0`` of the zoo
   (variance-preserving, cosine schedule with ``diffusion_steps`` levels,
   ``z_t = sqrt(abar_t) z0 + sqrt(1 - abar_t) eps``). An MLP denoiser predicts ``z0``
   from ``(z_t, t, p)`` with ``p`` the prompt of a context trajectory of the expert's
   environment (:class:`._prompter.Prompter`, trained with the denoiser; contexts are
   random windows of that environment's training episodes, so the prompter sees many
   contexts per expert). Loss: ``||z0_hat - z0||^2`` + the functional loss of the decoded
   ``z0_hat``. The autoencoder is frozen in this stage.

**The functional loss.** Decoded weights are run with ``torch.func.functional_call`` on
frames of the expert's environment, and their one-frame predictions are matched to the
expert's predictions and to the data's next frames (normalised units, mean of the two).
It makes generated models *behave* like the experts, not just look like them.

**The prompt** is the prompter's hand-built physical and spectral features
(:mod:`._prompter`) next to a GRU summary of the context's frames in normalised units
(trained with the denoiser). With the weak-form rate regression fitted jointly over
the context episodes (issue 24), a linear probe of the prompt recovers Lotka-Volterra's
(beta, delta) with R^2 0.80 / 0.36 from one 10-frame context and 0.999 / 0.96 from two
(``benchmarks/bench_dynadiff_prompt.py``).

**Generation** (:meth:`DynaDiff.generate`): the prompt of the given context, then
deterministic DDIM (eta = 0) with ``sample_steps`` steps from ``candidates`` noise draws,
decode, and keep the candidate whose rollouts of the context episodes (from their first
frames) have the smallest error. Scoring candidates on the context costs a few forward
passes and uses the only data of the new environment there is; it is still one call,
with no gradient step on any weight. Optionally (``refine_steps`` > 0) the sampled
latents are first moved towards the context by a few Adam steps on the latent only
(:meth:`DynaDiff.refine_latents`: the diffusion sample as the prior, the context as the
likelihood); off by default, because it costs most of a fine-tuning run's time.

**Guidance** (``guidance`` g > 0, issue 24): the context is used during sampling too, as
in classifier guidance with the context's rollout error as the log-likelihood. At each
DDIM step the denoiser's x0 estimate is moved down the gradient of the context loss of
its decoded weights (:meth:`DynaDiff.context_fit`, the same windowed loss CoDA and
fine-tuning minimise): ``z0 <- z0 - g sqrt(1 - abar_t) grad / rms(grad)``. The step is
normalised (the raw gradient's scale varies by orders of magnitude between systems and
candidates, which made a raw-gradient scale untunable) and shrinks with the noise level,
so the late, low-noise steps pull a moved estimate back towards the zoo's latents.
``polish_steps`` more moves at noise 0 can follow; both are settings chosen on
validation environments (:func:`._pipeline.tune_methods`). Only the S x L latent numbers
move, never a weight, so the cost is ``sample_steps`` (+ ``polish_steps``) backward
passes through the decoder and one short rollout per candidate: 0.2-0.5 s on one CPU
thread for the ODE protocols, about what 100 fine-tuning steps cost. Measured on the
old 5 x 5 Lotka-Volterra zoo (seed 0): in-domain RMSE 0.230 unguided, 0.168 guided, CoDA
(tuned) 0.167, nearest expert 0.172.

Design choices the paper left open, and why: an x0-predicting denoiser (the zoo is
small, tens of experts; x0 prediction is the better-conditioned target at high noise
and feeds the functional loss directly); diffusion in a latent rather than over all
weights (thousands of coordinates for tens of samples); two stages instead of joint
training (the diffusion targets must not move).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from simsci.models.dynadiff._baselines import context_loss, context_windows
from simsci.models.dynadiff._experts import (
    ExpertSpec,
    functional_template,
    rk4_frame,
    unflatten_params,
)
from simsci.models.dynadiff._graph import WeightGraphEncoder, stacked_weights_to_batch
from simsci.models.dynadiff._prompter import MIN_CONTEXT_STEPS, Prompter, context_features
from simsci.models.dynadiff._zoo import rollout_mse

__all__ = ["DynaDiff", "ContextData", "STAGES"]

STAGES = ("autoencoder", "decoder", "diffusion")
#: the first polishing move of guided sampling, in latent spread units (RMS over the
#: latent's coordinates); the moves shrink linearly to 0 over ``polish_steps``
POLISH_SCALE = 0.05


def _mlp(sizes, act=nn.SiLU):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def _time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding of t in [0, 1]: ``(B,)`` -> ``(B, dim)``."""
    half = dim // 2
    freqs = torch.exp(torch.arange(half, device=t.device, dtype=t.dtype) * (-math.log(1e4) / half))
    ang = 1000.0 * t[:, None] * freqs[None]
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


class ContextData(torch.utils.data.Dataset):
    """Training items of the generator: ``(env, context, inputs, targets)``.

    For item i: environment ``e = i mod E``; ``context`` ``(M, K, *S)`` — M random
    episodes of e, each a random window of K frames; ``inputs``/``targets``
    ``(n_pairs, *S)`` — random frames of e and the frames after them (functional loss).
    Deterministic in i (a seeded generator per item).
    """

    def __init__(
        self, episodes, *, context_steps, context_episodes, n_pairs=32, per_env=64, seed=0
    ):
        self.episodes = [x.detach().cpu().float() for x in episodes]
        self.K, self.M, self.n_pairs = int(context_steps), int(context_episodes), int(n_pairs)
        self.per_env, self.seed = int(per_env), int(seed)
        T = self.episodes[0].shape[1]
        if T < self.K:
            raise ValueError(
                f"training episodes have {T} frames, fewer than the context length {self.K}"
            )

    def __len__(self):
        return len(self.episodes) * self.per_env

    def __getitem__(self, i):
        E = len(self.episodes)
        e = i % E
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = self.episodes[e]
        n, T = x.shape[0], x.shape[1]
        eps = torch.randint(0, n, (self.M,), generator=g)
        starts = torch.randint(0, T - self.K + 1, (self.M,), generator=g)
        ctx = torch.stack([x[a, s : s + self.K] for a, s in zip(eps.tolist(), starts.tolist())])
        pe = torch.randint(0, n, (self.n_pairs,), generator=g)
        pt = torch.randint(0, T - 1, (self.n_pairs,), generator=g)
        return {
            "env": torch.tensor(e),
            "context": ctx,
            "inputs": x[pe, pt],
            "targets": x[pe, pt + 1],
        }


class DynaDiff(nn.Module):
    """The weight-space generator (module docstring).

    Registry name ``dynadiff`` (``simsci.models.REGISTRY``): it trains from a zoo and the
    zoo's data, not from one trajectory file alone (``simsci train dynadiff --param
    zoo=ZOO.pt`` or ``simsci dynadiff train``), and it follows the training contract, so
    :class:`simsci.train.Trainer` trains it and :func:`simsci.train.load_model` reads it.

    Build it from a zoo with :meth:`from_zoo`; train with :func:`train_generator`
    (``simsci dynadiff train``); deploy with :meth:`generate` (``simsci dynadiff adapt``).

    Args (all recorded in ``init_args``): spec, num_experts, state_shape, dt, mean, std
    (the zoo's), system, param_names, context_steps K and context_episodes M (the
    context the prompter reads), latent_dim, prompt_dim, hidden (denoiser width),
    diffusion_steps, sample_steps, candidates, refine_steps, functional_weight, seed.
    """

    def __init__(
        self,
        spec: dict,
        num_experts: int,
        state_shape: list,
        dt: float,
        mean: list,
        std: list,
        *,
        system: str = "",
        param_names: list | None = None,
        param_range: dict | None = None,
        context_steps: int = 10,
        context_episodes: int = 1,
        latent_dim: int = 32,
        prompt_dim: int = 32,
        hidden: int = 256,
        encoder_hidden: int = 32,
        diffusion_steps: int = 200,
        sample_steps: int = 20,
        candidates: int = 16,
        refine_steps: int = 0,
        guidance: float = 0.0,
        polish_steps: int = 0,
        window: int = 4,
        functional_weight: float = 1.0,
        seed: int = 0,
    ):
        super().__init__()
        self.spec = ExpertSpec.from_dict(spec)
        if int(context_steps) < MIN_CONTEXT_STEPS:
            raise ValueError(
                f"context_steps must be >= {MIN_CONTEXT_STEPS} (the prompter's minimum), "
                f"got {context_steps}"
            )
        self.init_args = dict(
            spec=self.spec.to_dict(),
            num_experts=int(num_experts),
            state_shape=[int(s) for s in state_shape],
            dt=float(dt),
            mean=[float(v) for v in mean],
            std=[float(v) for v in std],
            system=str(system),
            param_names=list(param_names or []),
            param_range={k: [float(a), float(b)] for k, (a, b) in (param_range or {}).items()},
            context_steps=int(context_steps),
            context_episodes=int(context_episodes),
            latent_dim=int(latent_dim),
            prompt_dim=int(prompt_dim),
            hidden=int(hidden),
            encoder_hidden=int(encoder_hidden),
            diffusion_steps=int(diffusion_steps),
            sample_steps=int(sample_steps),
            candidates=int(candidates),
            refine_steps=int(refine_steps),
            guidance=float(guidance),
            polish_steps=int(polish_steps),
            window=int(window),
            functional_weight=float(functional_weight),
            seed=int(seed),
        )
        a = self.init_args
        self.state_shape = tuple(a["state_shape"])
        self.dt = a["dt"]
        self.K, self.M = a["context_steps"], a["context_episodes"]
        self.window = a["window"]
        E, P, L = a["num_experts"], self.spec.num_params, a["latent_dim"]
        edge_dim = self.spec.edge_dim()
        self.encoder = WeightGraphEncoder(
            edge_dim, hidden=a["encoder_hidden"], heads=4, num_layers=2, latent_dim=L,
            max_layers=max(8, self.spec.depth), max_positions=max(256, self.spec.channels),
        )  # fmt: skip
        self.decoder = _mlp([L, 256, 256, P])
        self.prompter = Prompter(
            state_shape=self.state_shape, dt=self.dt, out_dim=a["prompt_dim"], hidden=128
        )
        # a learned summary of the context sequence next to the prompter's hand-built
        # features: a GRU over per-frame descriptors in the zoo's normalised units
        seq_in = 2 * self.spec.channels if self.spec.kind == "mlp" else 6 * self.spec.channels
        self.sequence = nn.GRU(seq_in, a["prompt_dim"], batch_first=True)
        self.denoiser = _mlp(
            [L + 64 + 2 * a["prompt_dim"], a["hidden"], a["hidden"], a["hidden"], L]
        )
        self.register_buffer("norm_mean", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("norm_std", torch.tensor(std, dtype=torch.float32))
        self.register_buffer("zoo_weights", torch.zeros(E, P))
        self.register_buffer("w_mean", torch.zeros(P))
        self.register_buffer("w_std", torch.ones(P))
        self.register_buffer("latents", torch.zeros(E, L))  # normalised, set before stage 2
        self.register_buffer("latent_mean", torch.zeros(L))
        self.register_buffer("latent_std", torch.ones(L))
        self.register_buffer(
            "env_params", torch.zeros(E, len(a["param_names"]), dtype=torch.float64)
        )
        T = a["diffusion_steps"]
        s = 0.008
        steps = torch.arange(T + 1, dtype=torch.float64) / T
        abar = torch.cos((steps + s) / (1 + s) * math.pi / 2) ** 2
        abar = (abar / abar[0]).clamp(1e-5, 1.0)
        self.register_buffer("abar", abar.float())  # abar[0] = 1 (clean) ... abar[T]
        self.stage = "autoencoder"

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_zoo(cls, zoo, *, context_steps=10, context_episodes=1, **kwargs) -> DynaDiff:
        """A generator for ``zoo`` (a loaded :class:`._zoo.Zoo`), its buffers filled."""
        kwargs.setdefault("window", int(zoo.record.get("window", 4)))
        model = cls(
            zoo.spec.to_dict(), zoo.num_experts, list(zoo.state_shape), zoo.dt,
            zoo.mean.tolist(), zoo.std.tolist(), system=zoo.system,
            param_names=zoo.param_names, param_range=zoo.param_range(),
            context_steps=context_steps, context_episodes=context_episodes, **kwargs,
        )  # fmt: skip
        from simsci.models.dynadiff._experts import flatten_params

        flat = flatten_params(zoo.weights, zoo.spec).float()
        model.zoo_weights.copy_(flat)
        model.w_mean.copy_(flat.mean(0))
        # floor: a coordinate that no expert moved would otherwise blow up to 1/eps
        spread = flat.std(0) if flat.shape[0] > 1 else torch.zeros_like(flat[0])
        model.w_std.copy_(spread.clamp_min(1e-3 * float(spread.mean().clamp_min(1e-8))))
        model.env_params.copy_(zoo.env_params)
        return model

    def check_zoo(self, zoo) -> None:
        """Refuse a zoo whose experts do not have this generator's architecture."""
        if zoo.spec != self.spec:
            raise ValueError(
                f"the zoo's experts have architecture {zoo.spec.to_dict()}, but this "
                f"generator makes {self.spec.to_dict()}; train a generator on this zoo"
            )

    # -- pieces ---------------------------------------------------------------------------
    def weights_of(self, u: torch.Tensor) -> dict[str, torch.Tensor]:
        """Normalised flat weights ``(B, P)`` -> ``{name: (B, *shape)}`` in weight units."""
        return unflatten_params(self.w_mean + self.w_std * u, self.spec)

    def encode(self, u: torch.Tensor) -> torch.Tensor:
        """Normalised flat weights ``(B, P)`` -> latents ``(B, L)`` (graph attention)."""
        layers = self.spec.graph_layers(unflatten_params(u, self.spec))
        return self.encoder(stacked_weights_to_batch(layers))

    def _normalise_state(self, x):
        return (x - self.norm_mean.to(x)) / self.norm_std.to(x)

    def _functional_loss(self, u_hat, batch):
        """One-frame predictions of the decoded weights vs the expert's and the data's."""
        net = functional_template(self.spec)
        w_hat = self.weights_of(u_hat)
        w_exp = unflatten_params(self.zoo_weights[batch["env"]], self.spec)
        x = self._normalise_state(batch["inputs"].float())
        y = self._normalise_state(batch["targets"].float())

        def step(params, z):
            return rk4_frame(lambda s: functional_call(net, params, (s,)), z, self.spec.substeps)

        pred = torch.func.vmap(step)(w_hat, x)
        with torch.no_grad():
            ref = torch.func.vmap(step)(w_exp, x)
        return 0.5 * (F.mse_loss(pred, ref) + F.mse_loss(pred, y))

    def condition(self, context: torch.Tensor) -> torch.Tensor:
        """The prompt of contexts ``(B, M, K, *S)`` (raw units): the prompter's output and
        the GRU summary (mean over the M episodes), ``(B, 2 * prompt_dim)``."""
        if context.ndim == len(self.state_shape) + 2:
            context = context[:, None]
        B, M, K = context.shape[:3]
        z = self._normalise_state(context.float()).reshape(B * M, K, *self.state_shape)
        if self.spec.kind == "mlp":
            frames = z
        else:  # per frame: channel means, stds and mean |Laplacian| (periodic, grid units)
            lap = (
                torch.roll(z, 1, 2) + torch.roll(z, -1, 2) + torch.roll(z, 1, 3)
                + torch.roll(z, -1, 3) - 4 * z
            )  # fmt: skip
            frames = torch.cat([z.mean((2, 3)), z.std((2, 3)), lap.abs().mean((2, 3))], dim=-1)
        steps = torch.cat([frames, torch.diff(frames, dim=1, prepend=frames[:, :1])], dim=-1)
        _, h = self.sequence(steps)
        seq = h[-1].reshape(B, M, -1).mean(1)
        return torch.cat([self.prompter(context), seq], dim=-1)

    def _denoise(self, z_t, t_frac, prompt):
        return self.denoiser(torch.cat([z_t, _time_embedding(t_frac, 64), prompt], dim=-1))

    # -- training contract ---------------------------------------------------------------
    def training_step(self, batch):
        env = batch["env"]
        lam = self.init_args["functional_weight"]
        if self.stage in ("autoencoder", "decoder"):
            if self.stage == "autoencoder":
                # encode each expert of the batch once (the graph encoder is the costly part)
                uniq, inverse = torch.unique(env, return_inverse=True)
                h = self.encode((self.zoo_weights[uniq] - self.w_mean) / self.w_std)[inverse]
                h = h + 0.1 * h.detach().std(0, keepdim=True) * torch.randn_like(h)
            else:
                z = self.latents[env]
                z = z + 0.02 * torch.randn_like(z)  # keep the decoder smooth between experts
                h = z * self.latent_std + self.latent_mean
            u_hat = self.decoder(h)
            rec = F.mse_loss(u_hat, (self.zoo_weights[env] - self.w_mean) / self.w_std)
            fun = self._functional_loss(u_hat, batch)
            return {
                "loss": rec + lam * fun,
                "reconstruction": rec.detach(),
                "functional": fun.detach(),
            }
        z0 = self.latents[env]
        B = z0.shape[0]
        T = self.init_args["diffusion_steps"]
        t = torch.randint(1, T + 1, (B,), device=z0.device)
        ab = self.abar[t][:, None]
        noise = torch.randn_like(z0)
        z_t = ab.sqrt() * z0 + (1 - ab).sqrt() * noise
        prompt = self.condition(batch["context"])
        z0_hat = self._denoise(z_t, t.float() / T, prompt)
        den = F.mse_loss(z0_hat, z0)
        h = z0_hat * self.latent_std + self.latent_mean
        u_hat = torch.func.functional_call(
            self.decoder, {k: v.detach() for k, v in self.decoder.named_parameters()}, (h,)
        )
        fun = self._functional_loss(u_hat, batch)
        return {"loss": den + lam * fun, "denoise": den.detach(), "functional": fun.detach()}

    def validation_step(self, batch):
        with torch.no_grad():
            out = self.training_step(batch)
        return out

    # -- stage switching -----------------------------------------------------------------
    @torch.no_grad()
    def fit_prompt_normalisation(self, dataset, max_items: int = 512) -> None:
        n = min(len(dataset), max_items)
        ctx = torch.stack([dataset[i]["context"] for i in range(n)]).to(self.w_mean.device)
        feats = context_features(ctx, self.dt, self.state_shape)
        self.prompter.fit_normalization(feats)

    @torch.no_grad()
    def freeze_latents(self) -> None:
        """Encode the zoo once (after stage 1) and store the normalised latents."""
        was = self.training
        self.eval()
        u = (self.zoo_weights - self.w_mean) / self.w_std
        h = torch.cat([self.encode(u[i : i + 64]) for i in range(0, u.shape[0], 64)])
        self.latent_mean.copy_(h.mean(0))
        self.latent_std.copy_(h.std(0).clamp_min(1e-6) if h.shape[0] > 1 else torch.ones_like(h[0]))
        self.latents.copy_((h - self.latent_mean) / self.latent_std)
        self.train(was)

    def set_stage(self, stage: str) -> None:
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
        self.stage = stage
        self.encoder.requires_grad_(stage == "autoencoder")
        self.decoder.requires_grad_(stage in ("autoencoder", "decoder"))
        for mod in (self.prompter, self.sequence, self.denoiser):
            mod.requires_grad_(stage == "diffusion")

    # -- generation ----------------------------------------------------------------------
    def check_context(self, context: torch.Tensor) -> torch.Tensor:
        """``(K, *S)``, ``(M, K, *S)`` or ``(1, M, K, *S)`` -> ``(1, M, K, *S)`` (float)."""
        if not isinstance(context, torch.Tensor):
            context = torch.as_tensor(np.asarray(context))
        S = self.state_shape
        if context.ndim == len(S) + 1:
            context = context[None, None]
        elif context.ndim == len(S) + 2:
            context = context[None]
        if context.ndim != len(S) + 3 or tuple(context.shape[3:]) != S or context.shape[0] != 1:
            raise ValueError(
                f"a context is (K, *S), (M, K, *S) or (1, M, K, *S) with S = {S}, got "
                f"{tuple(context.shape)}"
            )
        K = context.shape[2]
        if K < MIN_CONTEXT_STEPS:
            raise ValueError(
                f"context trajectory too short for the prompter: it needs at least "
                f"{MIN_CONTEXT_STEPS} time points per episode, got {K}; pass a longer context"
            )
        if not torch.isfinite(context).all():
            bad = int((~torch.isfinite(context)).sum())
            raise ValueError(f"the context has {bad} non-finite values; clean it first")
        return context.to(self.w_mean.device, torch.float32)

    def context_fit(self, z: torch.Tensor, windows: torch.Tensor) -> torch.Tensor:
        """Per-candidate context loss ``(S,)`` of normalised latents ``z`` ``(S, L)``:
        the rollout MSE of the decoded weights over the context windows ``(N, w + 1, *S)``
        (normalised units, :func:`._baselines.context_windows`), differentiable in ``z``
        (the decoder's own parameters are held fixed). An overflowing candidate gives a
        non-finite value."""
        frozen = {k: p.detach() for k, p in self.decoder.named_parameters()}
        u = functional_call(self.decoder, frozen, (z * self.latent_std + self.latent_mean,))
        params = unflatten_params(self.w_mean + self.w_std * u, self.spec)
        net = functional_template(self.spec)
        return torch.func.vmap(lambda p: context_loss(net, p, windows))(params)

    def _guide(self, z0: torch.Tensor, windows: torch.Tensor, scale: float) -> torch.Tensor:
        """One guidance move of the x0 estimates ``(S, L)``: a step of ``scale`` (latent
        spread units, RMS over coordinates) down the gradient of :meth:`context_fit`."""
        with torch.enable_grad():
            zg = z0.detach().requires_grad_(True)
            fit = self.context_fit(zg, windows)
            # an overflowed candidate has no useful gradient: it does not move
            ok = torch.isfinite(fit)
            (grad,) = torch.autograd.grad(torch.where(ok, fit, 0.0).sum(), zg)
        grad = torch.nan_to_num(grad, nan=0.0, posinf=0.0, neginf=0.0)
        rms = grad.pow(2).mean(-1, keepdim=True).sqrt()
        step = torch.where(rms > 0, grad / rms.clamp_min(1e-30), torch.zeros_like(grad))
        return z0 - scale * step

    @torch.no_grad()
    def sample_latents(
        self, context, *, candidates=None, steps=None, seed=None, guidance=None,
        polish_steps=None,
    ):  # fmt: skip
        """DDIM (eta = 0) from ``candidates`` noise draws -> normalised latents (S, L).

        With ``guidance`` g > 0 (default ``init_args["guidance"]``), each step's x0
        estimate is first moved down the gradient of the context loss
        (:meth:`context_fit`): ``z0 <- z0 - g sqrt(1 - abar_t) grad / rms(grad)``, then
        the DDIM update uses the moved ``z0`` with the denoiser's own noise estimate. The
        move shrinks with the noise level; the later denoising steps pull a moved
        estimate back towards the zoo's latents. ``polish_steps`` n_p (default
        ``init_args``) more moves follow at noise level 0, of ``POLISH_SCALE (1 - k/n_p)``,
        k = 0..n_p-1: they fit the context where the zoo's latents do not reach (e.g.
        outside the training grid), at the risk of over-fitting a short context, which
        is why n_p is a setting tuned on validation environments
        (:func:`._pipeline.tune_methods`).
        """
        context = self.check_context(context)
        S = int(candidates or self.init_args["candidates"])
        n = int(steps or self.init_args["sample_steps"])
        g_scale = float(self.init_args["guidance"] if guidance is None else guidance)
        n_polish = self.init_args["polish_steps"] if polish_steps is None else polish_steps
        T = self.init_args["diffusion_steps"]
        seed = self.init_args["seed"] if seed is None else int(seed)
        g = torch.Generator(device="cpu").manual_seed(seed)
        L = self.init_args["latent_dim"]
        z = torch.randn(S, L, generator=g).to(self.w_mean)
        prompt = self.condition(context).expand(S, -1)
        windows = None
        if g_scale > 0:
            windows = context_windows(self._normalise_state(context[0]), self.window)
        grid = torch.linspace(T, 0, n + 1).round().long().tolist()
        for t, t_prev in zip(grid[:-1], grid[1:]):
            tt = torch.full((S,), t / T, device=z.device)
            z0 = self._denoise(z, tt, prompt)
            ab, ab_prev = self.abar[t], self.abar[t_prev]
            eps = (z - ab.sqrt() * z0) / (1 - ab).clamp_min(1e-8).sqrt()
            if g_scale > 0:
                z0 = self._guide(z0, windows, g_scale * float((1 - ab).sqrt()))
            z = ab_prev.sqrt() * z0 + (1 - ab_prev).sqrt() * eps
        if g_scale > 0:
            for k in range(int(n_polish)):
                z = self._guide(z, windows, POLISH_SCALE * (1 - k / int(n_polish)))
        return z

    @torch.no_grad()
    def decode_latents(self, z: torch.Tensor) -> torch.Tensor:
        """Normalised latents ``(S, L)`` -> flat weights ``(S, P)`` in weight units."""
        u = self.decoder(z * self.latent_std + self.latent_mean)
        return self.w_mean + self.w_std * u

    @torch.no_grad()
    def context_error(self, flat: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Rollout MSE (normalised units) of weights ``(S, P)`` on the context episodes,
        all candidates in one ``vmap``; a candidate that overflows scores ``inf``."""
        z = self._normalise_state(self.check_context(context)[0])
        return rollout_mse(self.spec, unflatten_params(flat, self.spec), z)

    def refine_latents(self, z: torch.Tensor, context, *, steps: int, lr: float = 0.05):
        """Move sampled latents ``(S, L)`` towards the context: ``steps`` Adam steps on
        ``J(z) = context MSE(decode(z)) / v + 0.01 ||z - z_sampled||^2`` (v the context's
        per-frame variance in normalised units), all candidates at once. The diffusion
        sample is the prior (where the zoo's experts live), the context the likelihood;
        only the S x L latent numbers move, never the predictor's weights."""
        context = self.check_context(context)
        zc = self._normalise_state(context[0])
        v = float(torch.diff(zc, dim=1).pow(2).mean().clamp_min(1e-8))
        start = z.detach()
        z = start.clone().requires_grad_(True)
        opt = torch.optim.Adam([z], lr=lr)
        frozen = {k: p.detach() for k, p in self.decoder.named_parameters()}

        for _ in range(int(steps)):
            opt.zero_grad()
            u = functional_call(self.decoder, frozen, (z * self.latent_std + self.latent_mean,))
            params = unflatten_params(self.w_mean + self.w_std * u, self.spec)
            fit = rollout_mse(self.spec, params, zc)
            loss = (fit.clamp_max(1e6) / v).sum()  # an overflowed candidate stops pulling
            loss = loss + 0.01 * ((z - start) ** 2).sum()
            loss.backward()
            opt.step()
        return z.detach()

    def generate(
        self, context, *, candidates=None, steps=None, seed=None, refine_steps=None,
        guidance=None, polish_steps=None,
    ):  # fmt: skip
        """A predictor for the context's environment: ``(Predictor, info)``.

        Samples ``candidates`` latents by DDIM, guided by the context when ``guidance`` >
        0 (:meth:`sample_latents`, with ``polish_steps``), optionally refines them
        (:meth:`refine_latents`, ``refine_steps``; defaults: ``init_args``), decodes, and
        keeps the one with the smallest context rollout error. No weight of the
        predictor is ever a gradient step's variable: only the S x L latent numbers
        move. ``info``: each candidate's context error and the chosen index.
        """
        from simsci.models.dynadiff._predictor import Predictor

        was = self.training
        self.eval()
        with torch.no_grad():
            z = self.sample_latents(
                context, candidates=candidates, steps=steps, seed=seed, guidance=guidance,
                polish_steps=polish_steps,
            )  # fmt: skip
        n = self.init_args["refine_steps"] if refine_steps is None else int(refine_steps)
        if n > 0:
            with torch.enable_grad():
                z = self.refine_latents(z, context, steps=n)
        with torch.no_grad():
            flat = self.decode_latents(z)
            err = self.context_error(flat, context)
        best = int(torch.argmin(err))
        self.train(was)
        model = Predictor.with_weights(
            flat[best], self.spec, self.norm_mean.tolist(), self.norm_std.tolist(), self.dt,
            system=self.init_args["system"], source="dynadiff",
        )  # fmt: skip
        return model, {"context_mse": err.cpu().tolist(), "chosen": best}

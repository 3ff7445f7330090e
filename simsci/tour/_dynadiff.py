"""DynaDiff generates a predictor for an unseen Lotka-Volterra from a 10-frame context.

19. write the Lotka-Volterra protocol of CoDA (81 training environments, beta and delta
    on a 9 x 9 grid over [0.5, 1]; unseen in-domain environments; --quick: 3 x 3);
20. build the model zoo (a pooled model, then one expert per environment, all trained
    at once with vmap)
    and train the generator (weight autoencoder, then latent diffusion conditioned on
    the prompt of a 10-frame context);
21. for each unseen environment, generate a predictor from one 10-frame context, with
    and without guidance of the reverse diffusion by the context's rollout error, and
    compare its rollout error and deploy time with fine-tuning the pooled model on
    the same context (100 steps) and with the nearest expert.
"""

from __future__ import annotations

import time
import warnings

from simsci.tour._common import Context, banner


def run(ctx: Context) -> dict:
    """DynaDiff generates a predictor for an unseen Lotka-Volterra environment; against
    fine-tuning the pooled model and the nearest expert."""
    from simsci.models import dynadiff as dd

    zoo_steps, ae, diff = (30, 10, 30) if ctx.quick else (200, 50, 250)
    banner("19. data: the CoDA Lotka-Volterra protocol (a grid of training environments)")
    data_dir = ctx.out / "dynadiff_data"
    paths = dd.make_environments("lotka_volterra", data_dir, seed=ctx.seed, quick=ctx.quick)
    banner(f"20. zoo: pooled model + one expert per environment at once ({zoo_steps} steps)")
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyG's torch.jit deprecation note
        zoo = dd.load_zoo(
            dd.build_zoo(
                data_dir,
                ctx.fresh("dynadiff") / "zoo.pt",
                steps=zoo_steps,
                pool_steps=zoo_steps,
                device=str(ctx.device),
                seed=ctx.seed,
            )  # fmt: skip
        )
        print(
            f"{zoo.num_experts} experts of {zoo.spec.num_params} weights; "
            f"{zoo.record['experts_per_minute']:.0f} experts/min; validation RMSE median "
            f"{float(zoo.val_rmse.median()):.3f}"
        )
        gen = dd.train_generator(
            zoo, paths["train"], ctx.out / "dynadiff" / "gen", autoencoder_steps=ae,
            diffusion_train_steps=diff, context_steps=10, device=str(ctx.device),
            seed=ctx.seed,
        )  # fmt: skip
    print(f"[zoo + generator trained in {time.perf_counter() - start:.0f} s]")
    banner("21. adapt to unseen environments from a 10-frame context")
    res = dd.compare_methods(
        gen, zoo, paths["in_domain"],
        methods=("dynadiff", "dynadiff_guided", "finetune", "nearest", "pooled"),
        seed=ctx.seed,
    )  # fmt: skip
    for name, r in res["summary"].items():
        print(f"{name:>15s}: rollout RMSE {r['rmse']:.4f}   deploy {1000 * r['seconds']:8.1f} ms")
    print("[`simsci dynadiff adapt GEN --context FILE --out pred.pt` writes a checkpoint]")
    return res["summary"]

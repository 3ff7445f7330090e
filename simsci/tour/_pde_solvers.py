"""Two Burgers solvers at matched accuracy: ETDRK4 vs finite differences + RK4.

5. run ETDRK4 and finite differences + RK4 over resolutions and steps, report the
   speed-up at matched accuracy and plot the Pareto fronts to OUT/burgers_pareto.png.
"""

from __future__ import annotations

from simsci.tour._common import Context, banner


def run(ctx: Context) -> dict:
    """One PDE, two solvers: ETDRK4 (pseudo-spectral, 4th order) against explicit finite
    differences with RK4, each over a sweep of resolutions and steps; error against a
    fine reference, warm time per trajectory, speed-up at matched accuracy, Pareto plot."""
    from simsci.bench import format_table, pde_benchmark, plot_pareto

    banner("5. benchmark two Burgers solvers: ETDRK4 vs finite differences + RK4")
    result = pde_benchmark(
        "burgers",
        methods=("etdrk4", "rk4"),
        quick=True,
        pypde=False,
        device=ctx.device,
        repeat=1 if ctx.quick else 3,
    )
    print(format_table(result))
    plot = None
    try:
        plot = str(plot_pareto(result, ctx.out / "burgers_pareto.png"))
        print(f"plot: {plot}")
    except ImportError as exc:
        print(f"({exc})")
    speedups = [s for s in result["speedups"] if s.get("overlap")]
    return {"speedups": speedups, "plot": plot}

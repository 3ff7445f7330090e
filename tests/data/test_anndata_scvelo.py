"""``simsci.data.import_anndata`` on files made with scVelo itself: its simulator's
AnnData (spliced/unspliced layers, ``true_t`` and the true rates) through the import,
a short GFG training and the motif scoring; and (slow) scVelo's dynamical model's own
velocity layers. Skipped when scVelo is not installed."""

import math

import numpy as np
import pytest
from test_anndata import _train_and_score_motifs  # same folder: pytest puts it on the path

import simsci.data as sd


def _scvelo():
    return pytest.importorskip(
        "scvelo",
        reason="scVelo is not installed (pip install scvelo): the tests on a file made with "
        "scVelo's own simulator are skipped; test_anndata.py covers the importer without it",
    )


def _kinetic_velocities(adata):
    """du/dt = alpha(t) - beta u, ds/dt = beta u - gamma s from the simulator's true rates
    (transcription at rate true_alpha until the gene's switch time true_t_, then none:
    the simulator's default alpha_ = 0), at the observed states."""
    var, t = adata.var, adata.obs["true_t"].to_numpy()
    on = t[:, None] < var["true_t_"].to_numpy()[None, :]
    alpha = np.where(on, var["true_alpha"].to_numpy()[None, :], 0.0)
    beta, gamma = var["true_beta"].to_numpy(), var["true_gamma"].to_numpy()
    u, s = adata.layers["unspliced"], adata.layers["spliced"]
    return alpha - beta * u, beta * u - gamma * s


def test_scvelo_simulation_import_train_and_motifs(tmp_path, capsys):
    scv = _scvelo()
    adata = scv.datasets.simulation(n_obs=150, n_vars=4, random_seed=0)
    du, ds_ = _kinetic_velocities(adata)
    adata.layers["velocity_u"], adata.layers["velocity"] = du, ds_
    src = tmp_path / "simulation.h5ad"
    adata.write_h5ad(src)
    genes = [str(g) for g in adata.var_names]
    # scVelo's simulated genes are independent: a reference ring with both signs
    net = tmp_path / "ring.csv"
    net.write_text(
        "source,target,sign\n"
        + "".join(f"{genes[k]},{genes[(k + 1) % 4]},{(-1) ** k}\n" for k in range(4))
    )
    path = sd.import_anndata(src, tmp_path / "simulation.h5", network=net)
    assert sd.check_file(path) == []
    ds = sd.open(path)
    eps = [ds[i] for i in range(len(ds))]
    x = np.concatenate([e["x"] for e in eps])
    v = np.concatenate([e["v"] for e in eps])
    t = np.concatenate([e["t"] for e in eps])
    u, s = adata.layers["unspliced"], adata.layers["spliced"]
    assert np.array_equal(x, np.concatenate([u, s], axis=1))
    assert np.array_equal(v, np.concatenate([du, ds_], axis=1))
    assert np.array_equal(t, adata.obs["true_t"].to_numpy())  # time_key="auto" -> true_t
    assert ds.meta["import"]["time_key"] == "true_t" and ds.meta["genes"] == genes
    assert len(ds.meta["network"]["edges"]) == 4 and ds.meta["network_rates"] == "unknown"

    motifs = _train_and_score_motifs(tmp_path, capsys, path)
    assert motifs["n_edges"] == 4 and motifs["n_pairs"] == 12
    for kind in ("signed", "activation", "repression", "edge"):
        assert 0 <= motifs[f"auroc_{kind}"] <= 1 and 0 <= motifs[f"ambient_auroc_{kind}"] <= 1
    assert math.isfinite(motifs["sign_accuracy"])
    # edges without kinetics: no true-field ceiling is claimed
    assert not any(k.startswith("truth_") for k in motifs)


@pytest.mark.slow  # ~20 s (scVelo's neighbours and fits); the fast test above guards the import
def test_scvelo_dynamical_model_velocity_layers(tmp_path):
    scv = _scvelo()
    adata = scv.datasets.simulation(n_obs=300, n_vars=4, random_seed=0)
    scv.pp.moments(adata, n_pcs=None, n_neighbors=15)
    scv.tl.recover_dynamics(adata, n_jobs=1)
    scv.tl.velocity(adata, mode="dynamical")
    src = tmp_path / "dynamical.h5ad"
    adata.write_h5ad(src)
    path = sd.import_anndata(src, tmp_path / "dynamical.h5", unspliced="Mu", spliced="Ms")
    ds = sd.open(path)
    fitted = ~np.isnan(adata.layers["velocity"]).all(axis=0)
    genes = [str(g) for g, ok in zip(adata.var_names, fitted) if ok]
    assert genes and ds.meta["genes"] == genes  # scVelo's unfitted genes (NaN) left out
    assert ds.meta["import"]["genes_without_velocity"] == [
        str(g) for g, ok in zip(adata.var_names, fitted) if not ok
    ]
    eps = [ds[i] for i in range(len(ds))]
    x = np.concatenate([e["x"] for e in eps])
    v = np.concatenate([e["v"] for e in eps])
    layers = adata.layers
    assert np.array_equal(x, np.concatenate([layers["Mu"], layers["Ms"]], axis=1)[:, _cols(fitted)])
    assert np.array_equal(
        v, np.concatenate([layers["velocity_u"], layers["velocity"]], axis=1)[:, _cols(fitted)]
    )


def _cols(fitted):
    """Columns of [u, s] for the genes marked in ``fitted``."""
    idx = np.flatnonzero(fitted)
    return np.concatenate([idx, idx + len(fitted)])

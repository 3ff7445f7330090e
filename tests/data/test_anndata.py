"""``simsci.data.import_anndata``: RNA-velocity data in scVelo's AnnData layout as
gene-network snapshots (layout and values, sparse layers, velocities, genes,
normalisation, times, reference networks, errors, the CLI, and GFG's motif pipeline on
the result). AnnData objects are built by hand here (anndata only); the file made with
scVelo's own simulator is tested in test_anndata_scvelo.py."""

import json
import math
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse

import simsci.data as sd
from simsci.cli import main
from simsci.errors import FormatError, MissingExtraError, UnknownNameError

GENES = ["Gata1", "Spi1", "Klf1", "Cebpa", "Fli1"]


def _anndata():
    return pytest.importorskip(
        "anndata",
        reason="the optional package anndata is not installed (pip install 'simsci[anndata]')",
    )


def _counts(n=40, genes=GENES, seed=0):
    """Whole-number unspliced and spliced counts, velocities, a cell time (by hand)."""
    rng = np.random.default_rng(seed)
    G = len(genes)
    rate = rng.uniform(1.0, 20.0, size=G)
    u = rng.poisson(rate * 0.3, size=(n, G)).astype(np.float32)
    s = rng.poisson(rate, size=(n, G)).astype(np.float32)
    u[0, 1] = 0.0
    s[0, 1] = 0.0  # a cell with none of one gene (a zero stored implicitly when sparse)
    v_u = rng.normal(size=(n, G)).astype(np.float32)
    v_s = (0.5 * u - 0.3 * s).astype(np.float32)
    t = np.sort(rng.uniform(0.0, 5.0, size=n))
    return u, s, v_u, v_s, t


def _adata(*, n=40, genes=GENES, sparse=True, velocity=True, obs=None, seed=0):
    """An AnnData of ``_counts`` (sparse or dense counts; velocity layers unless not)."""
    ad = _anndata()
    import pandas as pd  # an anndata dependency

    u, s, v_u, v_s, t = _counts(n, genes, seed)
    make = scipy.sparse.csr_matrix if sparse else np.asarray
    layers = {"unspliced": make(u), "spliced": make(s)}
    if velocity:
        layers |= {"velocity_u": v_u, "velocity": v_s}
    obs = {"true_t": t} if obs is None else obs
    return ad.AnnData(
        X=make(s),
        obs=pd.DataFrame(obs, index=[f"cell{i}" for i in range(n)]),
        var=pd.DataFrame(index=list(genes)),
        layers=layers,
    )


def _write(tmp_path, adata, name="cells.h5ad"):
    path = tmp_path / name
    adata.write_h5ad(path)
    return path


def _arrays(path):
    ds = sd.open(path)
    eps = [ds[i] for i in range(len(ds))]
    x = np.concatenate([e["x"] for e in eps])
    v = np.concatenate([e["v"] for e in eps]) if "v" in ds.step_fields else None
    t = np.concatenate([e["t"] for e in eps])
    return ds, x, v, t


@pytest.mark.parametrize("sparse", [True, False])
def test_layout_values_and_splits(tmp_path, sparse):
    adata = _adata(sparse=sparse)
    src = _write(tmp_path, adata)
    path = sd.import_anndata(src, tmp_path / "cells.h5")
    assert sd.check_file(path) == []
    ds, x, v, t = _arrays(path)
    u, s, v_u, v_s, times = _counts()
    assert ds.kind == "state" and ds.system == "anndata:cells" and len(ds) == 40
    assert all(len(ds[i]["t"]) == 1 for i in range(len(ds)))  # one snapshot per cell
    # x = [u, s] (unspliced first, as the grn_* data sets), v = [du/dt, ds/dt]
    assert x.dtype == np.float64 and np.array_equal(x, np.concatenate([u, s], axis=1))
    assert np.array_equal(v, np.concatenate([v_u, v_s], axis=1).astype(np.float64))
    assert np.array_equal(t, times)  # obs "true_t", found by time_key="auto"
    names = [f"u_{g}" for g in GENES] + [f"s_{g}" for g in GENES]
    assert ds.names("x") == names and ds.names("v") == names
    assert ds.column("source_index").tolist() == list(range(40))
    assert np.bincount(ds.column("split"), minlength=3).tolist() == [32, 4, 4]
    meta = ds.meta
    assert meta["genes"] == GENES and meta["split"] == {"train": 32, "val": 4, "test": 4}
    assert meta["import"]["velocity"] == ["velocity_u", "velocity"]
    assert meta["import"]["time_key"] == "true_t" and meta["import"]["normalise"] == "none"
    assert meta["source"]["integer_counts"] is True and meta["source"]["cells"] == 40
    assert "network" not in meta
    # the same cells from the AnnData object itself; another seed, another split
    again = sd.import_anndata(adata, tmp_path / "obj.h5", seed=1)
    ds2, x2, v2, _ = _arrays(again)
    assert ds2.system == "anndata" and np.array_equal(x2, x) and np.array_equal(v2, v)
    assert not np.array_equal(ds2.column("split"), ds.column("split"))
    assert np.bincount(ds2.column("split"), minlength=3).tolist() == [32, 4, 4]


def test_velocity_layers_auto_layers_none(tmp_path):
    # neither layer: states only under "auto"; "layers" requires them
    src = _write(tmp_path, _adata(velocity=False))
    ds, _, v, _ = _arrays(sd.import_anndata(src, tmp_path / "a.h5"))
    assert v is None and ds.meta["import"]["velocity"] is None
    with pytest.raises(FormatError, match=r"no velocity layer 'velocity_u' or 'velocity'") as e:
        sd.import_anndata(src, tmp_path / "b.h5", velocity="layers")
    assert e.value.rule == "import-layout" and "mode='dynamical'" in str(e.value)
    # only ds/dt (scVelo's stochastic mode): GFG needs du/dt too
    only = _adata(velocity=False)
    only.layers["velocity"] = _counts()[3]
    src = _write(tmp_path, only, "only.h5ad")
    with pytest.raises(FormatError, match=r"no velocity layer 'velocity_u' \(layers: ") as e:
        sd.import_anndata(src, tmp_path / "c.h5")
    assert "velocity, spliced, unspliced" not in str(e.value)  # sorted listing
    assert "spliced, unspliced, velocity" in str(e.value) and "velocity='none'" in str(e.value)
    _, _, v, _ = _arrays(sd.import_anndata(src, tmp_path / "d.h5", velocity="none"))
    assert v is None
    # another vkey
    renamed = _adata(velocity=False)
    renamed.layers["rna_u"], renamed.layers["rna"] = _counts()[2], _counts()[3]
    src = _write(tmp_path, renamed, "renamed.h5ad")
    _, _, v, _ = _arrays(sd.import_anndata(src, tmp_path / "e.h5", vkey="rna"))
    assert v.shape == (40, 10)


def test_missing_layers_name_what_is_there(tmp_path):
    adata = _adata(velocity=False)
    del adata.layers["unspliced"]
    src = _write(tmp_path, adata)
    with pytest.raises(FormatError, match=r"has no layer 'unspliced'; its layers: spliced") as e:
        sd.import_anndata(src, tmp_path / "a.h5")
    assert e.value.rule == "import-layout" and "Mu" in str(e.value)
    with pytest.raises(FormatError, match=r"no layer 'Mu' or 'Ms'; its layers: spliced"):
        sd.import_anndata(src, tmp_path / "a.h5", unspliced="Mu", spliced="Ms")
    # a file that is not AnnData at all, and one that is not HDF5
    other = sd.write(
        tmp_path / "traj.h5", [{"t": np.zeros(1), "x": np.ones((1, 2))}], kind="state", system="s"
    )
    with pytest.raises(FormatError, match="is not an AnnData .h5ad file"):
        sd.import_anndata(other, tmp_path / "a.h5")
    (tmp_path / "text.h5ad").write_text("not hdf5")
    with pytest.raises(FormatError, match="not an HDF5 file"):
        sd.import_anndata(tmp_path / "text.h5ad", tmp_path / "a.h5")
    assert not (tmp_path / "a.h5").exists()


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize(
    ("value", "rule", "what"),
    [(np.nan, "import-nonfinite", "is not finite"), (-2.0, "import-negative", "is negative")],
)
def test_nan_and_negative_counts_are_refused(tmp_path, sparse, value, rule, what):
    adata = _adata(sparse=sparse, velocity=False)
    s = adata.layers["spliced"]
    s = s.toarray() if sparse else np.array(s)
    s[7, 3] = value
    adata.layers["spliced"] = scipy.sparse.csr_matrix(s) if sparse else s
    src = _write(tmp_path, adata)
    dst = tmp_path / "out.h5"
    dst.write_bytes(b"an earlier file")
    with pytest.raises(FormatError) as e:
        sd.import_anndata(src, dst)
    assert e.value.rule == rule and e.value.field == "spliced"
    assert f"cell 'cell7' (row 7), gene 'Cebpa' {what}" in str(e.value)
    assert dst.read_bytes() == b"an earlier file"  # untouched
    # leaving the gene out imports the rest
    keep = [g for g in GENES if g != "Cebpa"]
    ds, x, _, _ = _arrays(sd.import_anndata(src, dst, genes=keep))
    assert ds.meta["genes"] == keep and np.isfinite(x).all()


def test_velocities_scvelo_did_not_fit_and_non_finite(tmp_path):
    adata = _adata()
    for name in ("velocity", "velocity_u"):
        adata.layers[name][:, 2] = np.nan  # scVelo: NaN in every cell of an unfitted gene
    src = _write(tmp_path, adata)
    ds, x, v, _ = _arrays(sd.import_anndata(src, tmp_path / "a.h5"))
    kept = [g for g in GENES if g != "Klf1"]
    assert ds.meta["genes"] == kept and ds.meta["import"]["genes_without_velocity"] == ["Klf1"]
    assert x.shape == v.shape == (40, 8) and np.isfinite(v).all()
    with pytest.raises(FormatError, match=r"genes \['Klf1'\] have no velocity"):
        sd.import_anndata(src, tmp_path / "b.h5", genes=["Gata1", "Klf1"])
    _, _, v, _ = _arrays(sd.import_anndata(src, tmp_path / "c.h5", velocity="none"))
    assert v is None
    adata.layers["velocity"][5, 0] = np.inf  # one bad value in a fitted gene
    src = _write(tmp_path, adata, "bad.h5ad")
    with pytest.raises(FormatError, match=r"velocity layer 'velocity': cell 'cell5' \(row 5\)"):
        sd.import_anndata(src, tmp_path / "d.h5")


def test_gene_selection(tmp_path):
    adata = _adata()
    src = _write(tmp_path, adata)
    ds, x, v, _ = _arrays(sd.import_anndata(src, tmp_path / "a.h5", genes=["Fli1", "Gata1"]))
    u, s, v_u, v_s, _ = _counts()
    assert ds.meta["genes"] == ["Fli1", "Gata1"] and ds.meta["import"]["genes"] == "listed"
    assert np.array_equal(x, np.stack([u[:, 4], u[:, 0], s[:, 4], s[:, 0]], axis=1))
    assert np.array_equal(v, np.stack([v_u[:, 4], v_u[:, 0], v_s[:, 4], v_s[:, 0]], axis=1))
    # top_genes: the largest spliced variance, kept in file order
    top = sorted(np.argsort(-s.astype(np.float64).var(axis=0))[:2])
    ds, _, _, _ = _arrays(sd.import_anndata(src, tmp_path / "b.h5", top_genes=2))
    assert ds.meta["genes"] == [GENES[k] for k in top]
    assert ds.meta["import"]["genes"] == "top 2 by spliced variance"
    ds, _, _, _ = _arrays(sd.import_anndata(src, tmp_path / "c.h5", top_genes=50))
    assert ds.meta["genes"] == GENES
    with pytest.raises(UnknownNameError, match="did you mean 'Gata1'"):
        sd.import_anndata(src, tmp_path / "d.h5", genes=["Gata2"])
    with pytest.raises(ValueError, match="not both"):
        sd.import_anndata(src, tmp_path / "d.h5", genes=["Gata1"], top_genes=1)
    with pytest.raises(TypeError, match="list of gene names"):
        sd.import_anndata(src, tmp_path / "d.h5", genes="Gata1")
    with pytest.raises(ValueError, match=r"top_genes must be >= 1"):
        sd.import_anndata(src, tmp_path / "d.h5", top_genes=0)
    with pytest.warns(UserWarning, match="not unique"):  # anndata's own warning
        twice = _adata(genes=["A", "B", "A"])
    with pytest.raises(FormatError, match=r"gene names repeat \(\['A'\]"):
        sd.import_anndata(twice, tmp_path / "d.h5")


def test_size_factor_normalisation(tmp_path):
    adata = _adata()
    adata.layers["spliced"][3, 0] = 0.0  # an implicit zero stays a zero
    src = _write(tmp_path, adata)
    ds, x, v, _ = _arrays(sd.import_anndata(src, tmp_path / "a.h5", normalise="size_factor"))
    u = adata.layers["unspliced"].toarray().astype(np.float64)
    s = adata.layers["spliced"].toarray().astype(np.float64)
    total = u.sum(axis=1) + s.sum(axis=1)  # one factor per cell for both layers
    factor = total / np.median(total)
    assert np.allclose(ds.column("size_factor"), factor, rtol=1e-12)
    assert np.allclose(x, np.concatenate([u, s], axis=1) / factor[:, None], rtol=1e-12)
    v_raw = np.concatenate([adata.layers["velocity_u"], adata.layers["velocity"]], axis=1)
    assert np.allclose(v, v_raw.astype(np.float64) / factor[:, None], rtol=1e-12)
    assert ds.meta["import"]["normalise"] == "size_factor"
    # the factor uses every gene, also those not imported
    ds, x1, _, _ = _arrays(
        sd.import_anndata(src, tmp_path / "b.h5", normalise="size_factor", genes=["Spi1"])
    )
    assert np.allclose(x1[:, 1], s[:, 1] / factor, rtol=1e-12)
    # layers that are normalised already: a warning; a cell without counts: an error
    normalised = _adata(sparse=False)
    normalised.layers["spliced"] = normalised.layers["spliced"] / 3.0
    with pytest.warns(UserWarning, match="look normalised already"):
        sd.import_anndata(normalised, tmp_path / "c.h5", normalise="size_factor")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sd.import_anndata(normalised, tmp_path / "c.h5")  # none: no warning
    empty = _adata(sparse=False, velocity=False)
    empty.layers["spliced"][9] = 0.0
    empty.layers["unspliced"][9] = 0.0
    with pytest.raises(FormatError, match=r"cell 'cell9' \(row 9\) has total") as e:
        sd.import_anndata(empty, tmp_path / "d.h5", normalise="size_factor")
    assert e.value.rule == "import-empty"
    with pytest.raises(UnknownNameError, match="size_factor"):
        sd.import_anndata(src, tmp_path / "d.h5", normalise="log1p")


def test_cell_times(tmp_path):
    t = np.linspace(0.0, 1.0, 40)
    both = _adata(obs={"latent_time": t, "true_t": t[::-1].copy()})
    ds, _, _, times = _arrays(sd.import_anndata(both, tmp_path / "a.h5"))
    assert np.array_equal(times, t[::-1]) and ds.meta["import"]["time_key"] == "true_t"
    _, _, _, times = _arrays(sd.import_anndata(both, tmp_path / "b.h5", time_key="latent_time"))
    assert np.array_equal(times, t)
    ds, _, _, times = _arrays(sd.import_anndata(both, tmp_path / "c.h5", time_key=None))
    assert (times == 0).all() and ds.meta["import"]["time_key"] is None
    none = _adata(obs={"clusters": ["a"] * 40})
    _, _, _, times = _arrays(sd.import_anndata(none, tmp_path / "d.h5"))  # auto: none found
    assert (times == 0).all()
    with pytest.raises(FormatError, match="holds object values, not numbers") as e:
        sd.import_anndata(none, tmp_path / "e.h5", time_key="clusters")
    assert e.value.rule == "import-time"
    with pytest.raises(UnknownNameError, match="did you mean 'clusters'"):
        sd.import_anndata(none, tmp_path / "e.h5", time_key="cluster")
    gap = t.copy()
    gap[4] = np.nan
    with pytest.raises(FormatError, match=r"cell 'cell4' \(row 4\) has time nan"):
        sd.import_anndata(_adata(obs={"latent_time": gap}), tmp_path / "e.h5")


def test_reference_network_files_and_dicts(tmp_path):
    src = _write(tmp_path, _adata())
    genes = ["Gata1", "Spi1", "Klf1"]
    table = tmp_path / "net.tsv"
    table.write_text(
        "TF\ttarget\tmor\n"
        "Gata1\tKlf1\t1\n"
        "Spi1\tGata1\t-1\n"
        "Gata1\tSpi1\t-0.5\n"
        "Gata1\tKlf1\t2\n"  # the same edge again: merged
        "Tal1\tGata1\t1\n"  # a gene not imported: dropped
    )
    ds, _, _, _ = _arrays(sd.import_anndata(src, tmp_path / "a.h5", genes=genes, network=table))
    net = ds.meta["network"]
    assert net == {
        "name": "net",
        "genes": genes,
        "edges": [["Gata1", "Klf1", 1], ["Spi1", "Gata1", -1], ["Gata1", "Spi1", -1]],
    }
    assert ds.meta["network_rates"] == "unknown"
    assert ds.meta["network_source"]["edges_given"] == 5
    assert ds.meta["network_source"]["edges_kept"] == 3
    # a GeneNetwork.config(): the rates follow the imported genes and kept edges
    config = {
        "name": "toy",
        "genes": ["Klf1", "Gata1", "Spi1", "Tal1"],
        "edges": [["Gata1", "Klf1", 1], ["Tal1", "Gata1", 1], [2, 1, -1]],
        "alpha": [1.0, 2.0, 3.0, 4.0],
        "basal": 0.1,
        "beta": 4.0,
        "gamma": [1.0, 1.1, 1.2, 1.3],
        "K": [0.5, 0.6, 0.7],
        "hill": 2.0,
    }
    (tmp_path / "net.json").write_text(json.dumps(config))
    ds, _, _, _ = _arrays(
        sd.import_anndata(src, tmp_path / "b.h5", genes=genes, network=tmp_path / "net.json")
    )
    net = ds.meta["network"]
    assert net["edges"] == [["Gata1", "Klf1", 1], ["Spi1", "Gata1", -1]]
    assert net["alpha"] == [2.0, 3.0, 1.0] and net["gamma"] == [1.1, 1.2, 1.0]
    assert net["K"] == [0.5, 0.7] and net["basal"] == 0.1 and net["hill"] == 2.0
    assert ds.meta["network_rates"] == "given"
    # the file rebuilds as a GeneNetwork (the motif task's reader)
    from simsci.datasets import network_from_config

    built = network_from_config(net)
    assert built.genes == tuple(genes) and built.adjacency()[0, 2] == 1
    # errors: opposite signs, no edge between imported genes, a bad sign
    with pytest.raises(ValueError, match="Gata1 -> Klf1 is given with both signs"):
        sd.import_anndata(
            src, tmp_path / "c.h5", network=[["Gata1", "Klf1", 1], ["Gata1", "Klf1", "-"]]
        )
    with pytest.raises(ValueError, match="none of its 1 edges joins two imported genes"):
        sd.import_anndata(src, tmp_path / "c.h5", network=[["Tal1", "Gata1", 1]])
    with pytest.raises(ValueError, match="sign must be a non-zero number"):
        sd.import_anndata(src, tmp_path / "c.h5", network=[["Spi1", "Gata1", 0]])
    with pytest.raises(ValueError, match="refers to gene index 5, but the config has 1 genes"):
        sd.import_anndata(src, tmp_path / "c.h5", network={"genes": ["Spi1"], "edges": [[0, 5, 1]]})
    bad = tmp_path / "bad.csv"
    bad.write_text("from,to,sign\nGata1,Klf1,1\n")
    with pytest.raises(ValueError, match="needs a source column"):
        sd.import_anndata(src, tmp_path / "c.h5", network=bad)
    assert not (tmp_path / "c.h5").exists()


def test_a_missing_anndata_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "anndata", None)  # import anndata now raises ImportError
    src = tmp_path / "cells.h5ad"
    src.write_bytes(b"")
    with pytest.raises(MissingExtraError, match=r'pip install "simsci\[anndata\]"'):
        sd.import_anndata(src, tmp_path / "a.h5")
    assert main(["data", "import", "anndata", str(src), str(tmp_path / "a.h5")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "simsci[anndata]"' in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "a.h5").exists()


def test_cli_options(tmp_path, capsys):
    src = _write(tmp_path, _adata())
    out = tmp_path / "a.h5"
    net = tmp_path / "net.csv"
    net.write_text("source,target,sign\nGata1,Spi1,-1\nSpi1,Gata1,-1\n")
    argv = [
        "data", "import", "anndata", src, out, "--genes", "Spi1,Gata1", "--time-key", "none",
        "--split-fractions", "0.5,0.25,0.25", "--seed", "3", "--network", net,
        "--normalise", "size_factor",
    ]  # fmt: skip
    assert main([str(a) for a in argv]) == 0
    assert "(40 cells, 2 genes, with velocities, network: 2 edges)" in capsys.readouterr().out
    ds, _, _, t = _arrays(out)
    assert ds.meta["genes"] == ["Spi1", "Gata1"] and (t == 0).all() and ds.meta["seed"] == 3
    assert np.bincount(ds.column("split")).tolist() == [20, 10, 10]
    assert "size_factor" in ds.episode_fields
    assert main(["data", "import", "anndata", str(src), str(out), "--top-genes", "2"]) == 0
    assert "(40 cells, 2 genes, with velocities)" in capsys.readouterr().out
    cases = [
        (["--keep", "0.5"], "--keep applies to 'data import aeon' only, not to anndata"),
        (["--ties", "drop"], "--ties applies to 'data import easytpp' only, not to anndata"),
        (["-n", "3"], "-n/--episodes applies to pdebench/thewell; anndata imports every cell"),
        (["--split-fractions", "a,b"], "--split-fractions must be three comma-separated"),
        (["--velocity", "layers", "--vkey", "rna"], "no velocity layer 'rna_u' or 'rna'"),
    ]
    for extra, message in cases:
        code = main(["data", "import", "anndata", str(src), str(out), *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err, err
    for layout, option in (("aeon", "--top-genes"), ("pdebench", "--network")):
        code = main(["data", "import", layout, "x", str(out), option, "2"])
        assert code == 2
        assert f"{option} applies to 'data import anndata' only" in capsys.readouterr().err
    assert main(["data", "import", "pdebench", "x", str(out), "--seed", "2"]) == 2
    assert "--seed applies to 'data import aeon' and 'data import anndata' only" in (
        capsys.readouterr().err
    )


def _train_and_score_motifs(tmp_path, capsys, data, steps=20):
    """``simsci train gfg`` (a few full-batch steps), then ``evaluate --task motifs``."""
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"val_every": steps, "checkpoint_every": steps, "lr": 0.003}))
    code = main(
        [str(a) for a in (
            "train", "gfg", "--data", data, "--out", tmp_path / "run", "--max-steps", steps,
            "--batch-size", 8, "--config", cfg, "--no-progress", "--param", "hidden_dim=32",
        )]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    report = tmp_path / "motifs.json"
    checkpoint = tmp_path / "run" / "checkpoints" / "last.pt"
    code = main(
        [
            str(a)
            for a in ("evaluate", checkpoint, "--data", data, "--task", "motifs", "--out", report)
        ]
    )
    assert code == 0, capsys.readouterr().err
    return json.loads(report.read_text())


def test_gfg_motif_pipeline_on_a_toggle_switch_anndata(tmp_path, capsys):
    """grn_toggle cells -> an AnnData (as scVelo would hold them) -> import -> train gfg
    -> evaluate --task motifs against the network given with the import."""
    ad = _anndata()
    from simsci.datasets import make_dataset

    grn = sd.open(make_dataset("grn_toggle", 60, out=tmp_path / "toggle.h5", progress=False))
    eps = [grn[i] for i in range(len(grn))]
    x = np.concatenate([e["x"] for e in eps])
    v = np.concatenate([e["v"] for e in eps])
    t = np.concatenate([e["t"] for e in eps])
    genes = grn.meta["network"]["genes"]
    G = len(genes)
    adata = ad.AnnData(
        X=scipy.sparse.csr_matrix(x[:, G:]),
        layers={
            "unspliced": scipy.sparse.csr_matrix(x[:, :G]),
            "spliced": scipy.sparse.csr_matrix(x[:, G:]),
            "velocity_u": v[:, :G],
            "velocity": v[:, G:],
        },
    )
    adata.obs["latent_time"] = t
    adata.var_names = genes
    src = _write(tmp_path, adata, "toggle.h5ad")
    (tmp_path / "toggle.json").write_text(json.dumps(grn.meta["network"]))
    data = sd.import_anndata(src, tmp_path / "imported.h5", network=tmp_path / "toggle.json")
    ds, x2, v2, t2 = _arrays(data)
    assert np.array_equal(x2, x) and np.array_equal(v2, v) and np.array_equal(t2, t)
    assert ds.names("x") == grn.names("x")  # the grn_* layout, names included
    assert ds.meta["network"] == grn.meta["network"] and ds.meta["network_rates"] == "given"

    motifs = _train_and_score_motifs(tmp_path, capsys, data)
    for prefix in ("", "ambient_", "truth_"):
        for kind in ("signed", "activation", "repression", "edge"):
            assert 0 <= motifs[f"{prefix}auroc_{kind}"] <= 1
    assert motifs["truth_auroc_signed"] == 1.0  # the network's own Jacobian at these cells
    assert motifs["n_edges"] == 4 and motifs["n_pairs"] == 12
    assert all(math.isfinite(motifs[k]) for k in ("auroc_signed", "sign_accuracy"))

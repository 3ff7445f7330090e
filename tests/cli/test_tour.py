"""``simsci tour``: its sections listed, chosen by name, and one run alone.

The whole quick tour runs in tests/cli/test_cli.py (test_tour_quick, slow: ~60 s)."""

import json

import pytest

from simsci import tour
from simsci.cli import main
from simsci.errors import UnknownNameError


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_shows_every_section(capsys, tmp_path):
    code, out, _ = run(capsys, "tour", "--list", "--out", tmp_path / "tour")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) == len(tour.SECTIONS) == 10
    for line, section in zip(lines, tour.SECTIONS.values()):  # in tour order
        assert line.split()[0] == section.name
        assert line.endswith(section.summary) and section.summary
        assert section.steps  # the numbered steps of --help
    assert not (tmp_path / "tour").exists()  # listing runs nothing


def test_steps_are_numbered_through_the_tour():
    numbers = [
        int(line.split(".")[0])
        for s in tour.SECTIONS.values()
        for line in s.steps.splitlines()
        if line.strip()[:1].isdigit()
    ]
    assert numbers == list(range(1, len(numbers) + 1))


def test_unknown_section_is_refused_with_the_valid_names(capsys, tmp_path):
    code, out, err = run(capsys, "tour", "--section", "dno,gfgg", "--out", tmp_path / "tour")
    assert code == 2
    assert "unknown tour section 'gfgg'; did you mean 'gfg'?" in err
    assert all(name in err for name in tour.SECTIONS)
    assert "#####" not in out and not (tmp_path / "tour").exists()  # refused up front
    with pytest.raises(UnknownNameError, match="did you mean 'latent_ode'"):
        tour.select(["latent_odes"])


def test_sections_are_chosen_in_tour_order_once():
    assert [s.name for s in tour.select(["gfg,dno", " gfg", "pde_solvers,"])] == [
        "pde_solvers",
        "dno",
        "gfg",
    ]
    assert tour.select(None) == tour.select([]) == list(tour.SECTIONS.values())


def test_one_section_runs_alone(capsys, tmp_path):
    # the cheapest section (a few seconds): one Burgers solver benchmark, no training
    out_dir = tmp_path / "tour"
    code, out, err = run(capsys, "tour", "--quick", "--section", "pde_solvers", "--out", out_dir)
    assert code == 0, err
    assert "##### PDE solvers on Burgers #####" in out and out.count("#####") == 2
    summary = json.loads((out_dir / "summary.json").read_text())
    assert set(summary) == {"PDE solvers on Burgers", "total_seconds"}
    plot = summary["PDE solvers on Burgers"]["plot"]
    assert plot is None or (out_dir / "burgers_pareto.png").stat().st_size > 0

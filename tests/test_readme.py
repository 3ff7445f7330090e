"""README.md's Python examples run as written (in a scratch directory)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)

# Examples that train a model or drive a generated world end to end (10-35 s each on one
# core) run in `make test-all`; every call they make is exercised in the default run by
# the tests named here. Chosen by what a block calls, not by its index, so that editing
# the README keeps the choice.
SLOW = {
    "PPO(": "tests/envs (test_ode_control/test_pde_control: to_sb3 + PPO; test_record; "
    "test_surrogate; test_env_cli::test_env_rollout_train_then_surrogate)",
    "CoCLD.from_data": "tests/models/test_cocld.py, test_events_harness.py (evaluate_events, "
    "TrueProcessTPP), tests/processes/test_population_events.py",
    "dynadiff.build_zoo": "tests/models/dynadiff/test_dynadiff.py (module fixture: "
    "make_environments, build_zoo, train_generator, generate), tests/cli/test_dynadiff_cli.py",
    "GFG.from_data": "tests/models/test_gfg.py, tests/cli/test_gfg_cli.py, "
    "tests/datasets/test_manifolds.py (lifted_circle, lifted_from_config, distance)",
    "LatentODE.from_data": "tests/models/test_series_baselines.py (LatentODE.from_data, "
    "learning), tests/train/test_train_resume.py (resume=True), tests/systems/test_generate.py",
    "SDEVI.from_data": "tests/models/test_sdevi_model.py, test_sdevi_variants.py (complex "
    "variant, predict with variance, scores), test_series_baselines.py (masks)",
    "DrivingVectorEnv(": "tests/driving/test_traffic.py (make_road, Traffic, agents, "
    "collision_rate), tests/envs/test_driving_env.py (DrivingVectorEnv, lane_keeping_policy), "
    "tests/driving/test_tiles.py (make_scenes, read_scene)",
    "vw.pretrained(": "tests/test_pretrained.py (the shipped world, VectorWorld-v1's "
    "default), tests/models/vectorworld/test_world.py (StreamingWorld, VectorWorld-v1, "
    "rollout, write_rollout) and test_bundle.py",
}


def _example(index: int):
    slow = [key for key in SLOW if key in BLOCKS[index]]
    return pytest.param(index, marks=[pytest.mark.slow] if slow else [])


def test_readme_has_python_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", [_example(i) for i in range(len(BLOCKS))])
def test_readme_example_runs(index, tmp_path):
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index])
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_slow_examples_name_only_what_exists():
    """The slow examples' imports, and every ``module.name`` they read off an imported
    module, exist: a renamed or moved API breaks this in the default run, not only in
    ``make test-all``."""
    import ast
    import importlib

    for index, block in enumerate(BLOCKS):
        if not any(key in block for key in SLOW):
            continue
        tree = ast.parse(block)
        modules = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = importlib.import_module(alias.name)
                    if alias.asname:
                        modules[alias.asname] = top
                    else:
                        modules[alias.name.split(".")[0]] = importlib.import_module(
                            alias.name.split(".")[0]
                        )
            elif isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    value = getattr(module, alias.name, None)
                    if value is None:  # a submodule imported by name
                        value = importlib.import_module(f"{node.module}.{alias.name}")
                    if isinstance(value, type(module)):
                        modules[alias.asname or alias.name] = value
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                module = modules.get(node.value.id)
                if module is not None:
                    assert hasattr(module, node.attr), (
                        f"README example {index}: {node.value.id}.{node.attr} does not exist"
                    )

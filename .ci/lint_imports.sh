#!/usr/bin/env bash
# The import contracts of pyproject.toml ([tool.importlinter]: layers, no private imports
# across packages), checked by import-linter. envs/ and operators/ install as simsci.envs
# and simsci.operators, which import-linter (it walks the package's folder) cannot see in
# this layout: it reads a tree of links that puts them there.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/simsci"
cp -rs "$repo/simsci/." "$tmp/simsci/"
cp -rs "$repo/envs" "$tmp/simsci/envs"
cp -rs "$repo/operators" "$tmp/simsci/operators"
find "$tmp" -name __pycache__ -prune -exec rm -rf {} +
cd "$tmp"
PYTHONPATH="$tmp" "$repo/.venv/bin/lint-imports" --no-cache "$repo/pyproject.toml"

"""Argument helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import json


def parse_value(text: str):
    """'3' -> 3, '0.5' -> 0.5, 'true' -> True, 'none' -> None, '[1,2]' -> [1, 2], else str."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def key_values(pairs: list[str] | None, option: str) -> dict:
    """Parse repeated ``KEY=VALUE`` options into a dict, with a clear error otherwise."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = parse_value(value)
    return out


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show defaults and keep the description's line breaks."""

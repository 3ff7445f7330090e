"""What every subcommand shares: the argument builders, the names they give each concept,
the help formatter, and the deprecated spellings of the last release.

One name for one concept (shared/design/architecture.md). The inventory below is what
``grep add_argument simsci/cli`` found before the grammar was unified; each concept now
has one spelling, made by one builder here, and the old spellings are hidden aliases that
still work for one release and print a ``DeprecationWarning`` line on stderr naming the
new spelling (:func:`add_deprecated`, :func:`add_deprecated_param`).

=====================  =============================================  =====================
concept                before (command: spelling)                     now (builder)
=====================  =============================================  =====================
action of a group      events/dynadiff/driving/env/zoo: a positional  one sub-parser per
                       word choice, all options shared by the group   action (add_group,
                                                                      add_action)
count of episodes      generate --n/--episodes; events generate --n;  -n/--episodes N
(sequences,            bench pde --n; env rollout, driving metrics/   (add_episodes);
trajectories)          eval/ppo --episodes                            driving roads counts
                                                                      networks: -n/--count
training length        train --max-steps/--epochs; zoo build          --max-steps N
                       --steps/--pool-steps; dynadiff train           (add_max_steps);
                       --autoencoder-steps/--decoder-steps/           a stage of its own:
                       --diffusion-steps; driving ppo --timesteps     --param STAGE_steps=N
                                                                      or --pool-steps
system selection       generate SYSTEM; dynadiff data --system;       --system NAME, or
                       bench pde --problem                            positional SYSTEM for
                                                                      generate's subject
parameters of a        generate --NAME VALUE, --option KEY=VALUE;     --param NAME=VALUE,
model, system,         bench pde --param NAME=VALUE and --NAME VALUE; repeatable (add_param)
environment            env rollout --KEY VALUE; zoo build --hidden;   in the Python names
                       dynadiff train --context-steps/-episodes;      of the keyword
                       driving --length/--max-episode-steps;          arguments
                       train --model-arg KEY=VALUE
device                 default auto (generate, events, zoo, dynadiff, --device, default
                       evaluate), cpu (env, tour, bench pde), None    auto (add_device)
                       (train, rollout), absent (driving)
seed                   --seed 0 on most; None (train, data import);   --seed N, default 0,
                       on actions that draw nothing (events predict,  on every action that
                       zoo info, driving metrics)                     draws random numbers
                                                                      (add_seed)
output                 --out: a file (generate, events, zoo build,    --out (add_out), one
                       dynadiff adapt, env rollout, reports) or a     rule per kind: see
                       folder (tour, bench pde, dynadiff data/train,  OUTPUT_RULE
                       driving ppo, train, rollout); sometimes
                       required by hand, sometimes by argparse
checkpoint input       positional CHECKPOINT; --checkpoint; bench     positional when the
                       pde --model                                    action's subject,
                                                                      else --checkpoint
validation file        train --val-data; zoo build --val              --val-data FILE
progress bar           generate/train --no-progress; zoo build and    --no-progress
                       dynadiff data/train always on                  (add_no_progress)
=====================  =============================================  =====================

Every command group (``train``/``evaluate``, ``data`` and ``rollout`` included) is built
with these builders, so a new command follows the table by using them.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

#: the rule for --out, shown in the epilog of ``simsci --help``
OUTPUT_RULE = """\
--out, the same everywhere:
  a FILE (a trajectory file, a checkpoint, a zoo, a JSON/JSONL report) is written at
    exactly that path, atomically; its folder must exist (a typo in a folder name is an
    error, not a new tree); an existing file is replaced
  a DIR (anything that writes several files: training runs, data protocols, the tour,
    benchmarks, PPO runs) is created with its parents when missing; the files in it have
    fixed names, listed in the command's --help
  each option's help says which it is (FILE or DIR)"""

#: the shared names, shown in the epilog of ``simsci --help``
SHARED_NAMES = """\
one name for one concept, in every command:
  -n/--episodes N     how many episodes (trajectories, sequences, rollouts) to make or read
  --max-steps N       training length in steps (each stage of a staged model)
  --system NAME       a registered system (generate takes it as its first word)
  --param NAME=VALUE  a parameter of the system, model or environment (repeatable; the
                      names of its Python keyword arguments; VALUE is read as JSON when it
                      parses: 35, 0.5, true, [64,32], else as text)
  --device DEVICE     cpu, cuda, cuda:N or auto (default: auto, CUDA when available)
  --seed N            every action that draws random numbers (default: 0)
  --out FILE|DIR      see below"""


# ------------------------------------------------------------------------ values
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
            raise ValueError(f"{option} expects NAME=VALUE, got {pair!r}")
        out[key.strip()] = parse_value(value)
    return out


def params(args) -> dict:
    """The ``--param NAME=VALUE`` options of ``args`` as a dict (later ones win)."""
    return key_values(getattr(args, "param", None), "--param")


def param_text(name: str, value) -> str:
    """``--param`` spelling of one value: ``rho=35``, ``resolution=[64,32]``."""
    if isinstance(value, str):
        return f"{name}={value}"
    if isinstance(value, tuple):
        value = list(value)
    return f"{name}={json.dumps(value)}"


# ------------------------------------------------------------------ help formatter
#: placeholders ``@KEY@`` in descriptions, epilogs and option help, filled when the help
#: is shown (so building the parser imports nothing heavy): KEY -> function giving text
LAZY_TEXT: dict[str, Callable[[], str]] = {}
_TOKEN = re.compile(r"@([A-Z_]+)@")


def _fill(text: str) -> str:
    if "@" not in text:
        return text
    return _TOKEN.sub(lambda m: LAZY_TEXT[m[1]]() if m[1] in LAZY_TEXT else m[0], text)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Show defaults (where there is one to show) and keep the description's line
    breaks; ``@KEY@`` placeholders (:data:`LAZY_TEXT`) are filled when shown."""

    def _format_text(self, text):
        return super()._format_text(_fill(text))

    def _expand_help(self, action):
        return _fill(super()._expand_help(action))

    def _get_help_string(self, action):
        help = action.help or ""
        if action.default in (None, False) or "default" in help:
            return help
        return super()._get_help_string(action)


# ---------------------------------------------------------------- groups, actions
def add_group(sub, name: str, *, help: str, description: str):
    """A command with actions (``simsci NAME ACTION ...``); returns the sub-parsers
    object of its actions (add them with :func:`add_action`)."""
    p = sub.add_parser(name, help=help, description=description, formatter_class=HelpFormatter)
    p.set_defaults(cli_parser=p)
    return p.add_subparsers(dest=f"{name}_action", metavar="ACTION", required=True, title="actions")


def add_action(
    sub,
    name: str,
    *,
    help: str,
    description: str,
    run,
    extra_options: bool = False,
    **kwargs,
) -> argparse.ArgumentParser:
    """One action (or command): its own parser, usage line, options and help. ``run``
    gets the parsed arguments. ``extra_options``: the action takes arguments it does not
    declare (the deprecated free-form ``--NAME VALUE`` parameters; a script's options)."""
    p = sub.add_parser(
        name, help=help, description=description, formatter_class=HelpFormatter, **kwargs
    )
    p.set_defaults(run=run, cli_parser=p, extra_options=extra_options)
    return p


# ----------------------------------------------------------------- shared options
def add_device(p, *, help: str = "") -> None:
    """``--device``, default ``auto`` (CUDA when available, else CPU)."""
    text = "cpu, cuda, cuda:N or auto (CUDA when available, else CPU)"
    p.add_argument("--device", default="auto", help=f"{text}{'; ' + help if help else ''}")


def add_seed(p, *, help: str = "the seed of every random draw") -> None:
    """``--seed N``, default 0: on every action that draws random numbers."""
    p.add_argument("--seed", type=int, default=0, help=help)


def add_out(p, kind: str, *, help: str, required: bool = False, default: str | None = None) -> None:
    """``--out``: a ``"file"`` (its folder must exist) or a ``"dir"`` (created when
    missing); see :data:`OUTPUT_RULE`. ``simsci.cli.main`` checks a file's folder
    before the action runs."""
    if kind not in ("file", "dir"):
        raise ValueError(f"kind must be 'file' or 'dir', got {kind!r}")
    rule = "its folder must exist" if kind == "file" else "created when missing"
    p.add_argument(
        "--out",
        required=required,
        default=default,
        metavar=kind.upper(),
        help=f"{help} ({rule}{'; required' if required else ''})",
    )
    p.set_defaults(out_kind=kind)


def add_param(p, *, what: str) -> None:
    """``--param NAME=VALUE`` (repeatable): ``what`` says whose parameters they are."""
    p.add_argument(
        "--param",
        action="append",
        metavar="NAME=VALUE",
        default=None,
        help=f"{what} (repeatable; VALUE is read as JSON when it parses: 35, 0.5, true, "
        "[64,32], else as text)",
    )


def add_episodes(p, *, default: int | None, help: str, deprecated: tuple = ()) -> None:
    """``-n/--episodes N``: how many episodes to make or read."""
    p.add_argument("-n", "--episodes", type=int, default=default, metavar="N", help=help)
    for old in deprecated:
        add_deprecated(p, old, "--episodes", dest="episodes", type=int)


def add_max_steps(p, *, default: int | None, help: str, deprecated: tuple = ()) -> None:
    """``--max-steps N``: the training length in steps."""
    p.add_argument("--max-steps", type=int, default=default, metavar="N", help=help)
    for old in deprecated:
        add_deprecated(p, old, "--max-steps", dest="max_steps", type=int)


def add_no_progress(p) -> None:
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")


# ---------------------------------------------------------------- deprecated names
#: every deprecated spelling: (command, old, new), for ``simsci --help``
DEPRECATED: dict[tuple[str, str], str] = {}


def warn_deprecated(old: str, new: str) -> None:
    """One line on stderr: the old spelling, the new one, and when the old one goes."""
    print(
        f"simsci: DeprecationWarning: {old} is deprecated and will be removed in the next "
        f"release; use {new}",
        file=sys.stderr,
    )


class _Deprecated(argparse.Action):
    """An old option name: warns, then stores (or appends a ``--param``) as the new
    spelling would."""

    def __init__(
        self, option_strings, dest, *, new, param=None, const=None, append=False, **kwargs
    ):
        self.new, self.param, self.flag_value, self.append = new, param, const, append
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        if self.param is not None:  # --hidden 16 -> --param hidden=16
            text = f"{self.param}={values}"
            warn_deprecated(f"'{option_string} {values}'", f"'--param {text}'")
            namespace.param = [*(getattr(namespace, "param", None) or []), text]
            return
        warn_deprecated(f"'{option_string}'", f"'{self.new}'" if self.new[:1] == "-" else self.new)
        target = parser._option_string_actions.get(self.new)
        if target is not None:  # the old spelling satisfies a required new option
            target.required = False
        if self.append:
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, self.flag_value if self.nargs == 0 else values)


def _record(p, old: str, new: str) -> None:
    DEPRECATED[(p.prog, old)] = new


def add_deprecated(
    p, old: str, new: str, *, dest: str, type=None, flag=None, append: bool = False
) -> None:
    """``old`` (hidden) stores into ``dest`` as ``new`` does, with a warning; ``flag``
    (not None): ``old`` takes no value and stores ``flag``; ``append``: ``new`` is
    repeatable (``--option K=V`` -> ``--param K=V``)."""
    if flag is not None:
        kwargs = {"nargs": 0, "const": flag}
    else:
        kwargs = {"type": type, "append": append, "default": argparse.SUPPRESS}
    p.add_argument(old, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS, **kwargs)
    _record(p, old, new)


def add_deprecated_param(p, old: str, param: str) -> None:
    """``old VALUE`` (hidden) means ``--param PARAM=VALUE``, with a warning."""
    p.add_argument(
        old,
        dest="param",
        action=_Deprecated,
        new="--param",
        param=param,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    _record(p, f"{old} VALUE", f"--param {param}=VALUE")


def legacy_params(extra: list[str], convert: Callable[[list[str]], dict], prog: str) -> dict:
    """The deprecated free-form ``--NAME VALUE`` parameters of ``prog``: converted by
    ``convert`` (which names its own errors), with one warning naming the ``--param``
    spelling."""
    if not extra:
        return {}
    values = convert(extra)
    new = " ".join(f"--param {param_text(k, v)}" for k, v in values.items())
    warn_deprecated(f"'{' '.join(extra)}' (free-form parameters of {prog})", f"'{new}'")
    return values


def allow_free_form(p, what: str) -> None:
    """Record that ``p`` still takes its old free-form ``--NAME VALUE`` parameters
    (converted by the action with :func:`legacy_params`)."""
    _record(p, "--NAME VALUE", f"--param NAME=VALUE ({what})")


def deprecated_listing() -> str:
    """The deprecated spellings, one per line (for ``simsci --help``)."""
    lines = [f"  {cmd} {old}  ->  {new}" for (cmd, old), new in sorted(DEPRECATED.items())]
    return "\n".join(lines)


# ------------------------------------------------------------------------- output
def check_out(args) -> None:
    """The --out rule, before the action runs: a file's folder must exist."""
    out, kind = getattr(args, "out", None), getattr(args, "out_kind", None)
    if out is None or kind != "file":
        return
    from simsci._io import check_parent_dir

    check_parent_dir(Path(out))

r"""Agents of the lane contract and their kinematics: :class:`AgentState`,
:func:`step_agents` (the kinematic bicycle in curvature form) and the feasibility limits
(:func:`feasible_box`).

- :class:`AgentState`: ``x, y, theta, v, accel, kappa, length, width`` (B, V) float
  (``accel`` and ``kappa`` are the controls of the last step), ``valid`` (B, V) bool,
  plus a driving policy's memory: ``lane`` (the lane index associated last step, -1
  unknown), ``manoeuvre`` (last manoeuvre, an index of :data:`MANOEUVRES`), ``origin``
  (the lane a lane change started from, -1 none) and ``route`` (a per-agent key choosing
  among successors: lane ``l``'s next lane is ``succ[l, route % n_succ(l)]``). ``lane``
  and ``origin`` index the :class:`~simsci.driving.LaneSet` of the last step: a world
  that rebuilds its LaneSet must map them to the new indices (``crop_lanes`` returns each
  lane's source id for that) or reset them to -1 (ids beyond the new L are ignored).
- ``controlled`` (B, V) bool: the agents a policy drives (slot 0 may be an ego that
  something else drives).

**Integration** (:func:`step_agents`): ``theta += v_new κ dt`` with ``v_new = max(v + a
dt, 0)``, then the centre moves along ``theta_new + β``, ``β = asin(κ l_r)``, ``l_r = 0.3
length`` (the slip angle of a bicycle with the centre midway between axles and wheelbase
0.6 length): exactly the semi-implicit Euler of :meth:`Traffic.step` with its realised
controls.

**Feasible controls** at state ``(v, a_prev, κ_prev)`` form a box (:func:`feasible_box`):
``a ∈ [lo_a, hi_a] = clamp(a_prev ∓ J dt, -MAX_BRAKE, MAX_ACCEL)`` (jerk ``J =``
:data:`MAX_JERK`), and with ``v_hi = max(v + hi_a dt, 0)``, ``κ_max =
min(MAX_CURVATURE, A_LAT / v_hi^2)`` (``A_LAT =`` :data:`MAX_LATERAL_ACCEL`,
:func:`curvature_limit`), ``κ ∈ clamp(κ_prev ∓ MAX_CURVATURE_RATE dt, -κ_max, κ_max)``.
Clamping the rate window into the absolute box keeps it non-empty from any state (the
absolute limits win). The limits (|a| <= 8, κ <= 0.25, both rates) sit inside what
:func:`simsci.driving.metrics.infeasible_steps` calls infeasible (10.4 m/s^2, 0.3 1/m).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from simsci.driving._lanes import check_shape as _check_shape
from simsci.driving._lanes import checked_tensor as _tensor
from simsci.driving._traffic import DT, MAX_ACCEL, MAX_BRAKE, MAX_CURVATURE, MAX_CURVATURE_RATE
from simsci.errors import unknown_name

__all__ = [
    "MANOEUVRES",
    "MAX_JERK",
    "MAX_LATERAL_ACCEL",
    "AgentState",
    "curvature_limit",
    "feasible_box",
    "manoeuvre_index",
    "step_agents",
]

#: the manoeuvres of :attr:`AgentState.manoeuvre` (keep lane, change left, change right,
#: yield/stop).
MANOEUVRES = ("keep", "left", "right", "yield")
KEEP = MANOEUVRES.index("keep")
MAX_JERK = 25.0  # m/s^3: covers 99.9 % of the ground truth's steps (IDM jumps aside)
MAX_LATERAL_ACCEL = 8.0  # m/s^2: covers 99.99 % of the ground truth's steps


def manoeuvre_index(name) -> int:
    """The index of a manoeuvre name in :data:`MANOEUVRES` (an int in range passes)."""
    if isinstance(name, (int, np.integer)) and not isinstance(name, bool):
        if 0 <= int(name) < len(MANOEUVRES):
            return int(name)
        raise ValueError(
            f"manoeuvre index must lie in [0, {len(MANOEUVRES)}) ({', '.join(MANOEUVRES)}), "
            f"got {name}"
        )
    if not isinstance(name, str) or name not in MANOEUVRES:
        raise unknown_name("manoeuvre", str(name), MANOEUVRES)
    return MANOEUVRES.index(name)


# ----------------------------------------------------------------------------- agents
@dataclasses.dataclass
class AgentState:
    """Agents of ``B`` scenes with ``V`` slots: ``x, y`` [m], ``theta`` [rad], ``v``
    [m/s], ``accel`` [m/s^2] and ``kappa`` [1/m] (the last controls), ``length``,
    ``width`` [m], all (B, V) float; ``valid`` (B, V) bool; the policy's memory
    ``lane``, ``manoeuvre``, ``origin``, ``route`` (B, V) long (defaults -1, keep, -1, 0).
    Invalid entries may hold anything (NaN too)."""

    x: torch.Tensor
    y: torch.Tensor
    theta: torch.Tensor
    v: torch.Tensor
    accel: torch.Tensor
    kappa: torch.Tensor
    length: torch.Tensor
    width: torch.Tensor
    valid: torch.Tensor
    lane: torch.Tensor | None = None
    manoeuvre: torch.Tensor | None = None
    origin: torch.Tensor | None = None
    route: torch.Tensor | None = None

    #: the float fields, in order; the policy's memory fields (long).
    FLOAT_FIELDS = ("x", "y", "theta", "v", "accel", "kappa", "length", "width")
    MEMORY_FIELDS = ("lane", "manoeuvre", "origin", "route")

    def __post_init__(self):
        x = _tensor(self.x, "AgentState.x")
        if not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        if x.ndim != 2:
            raise ValueError(f"AgentState fields must have shape (B, V), got x {tuple(x.shape)}")
        shape = tuple(x.shape)
        for name in self.FLOAT_FIELDS:
            t = _tensor(getattr(self, name), f"AgentState.{name}", like=x, dtype=x.dtype)
            _check_shape(t, shape, f"AgentState.{name}", "scenes x vehicle slots, like x")
            setattr(self, name, t)
        v = _tensor(self.valid, "AgentState.valid", like=x)
        if v.dtype != torch.bool:
            raise TypeError(f"AgentState.valid must be a bool tensor, got dtype {v.dtype}")
        _check_shape(v, shape, "AgentState.valid", "scenes x vehicle slots, like x")
        self.valid = v
        defaults = {"lane": -1, "manoeuvre": KEEP, "origin": -1, "route": 0}
        for name in self.MEMORY_FIELDS:
            t = getattr(self, name)
            if t is None:
                t = torch.full(shape, defaults[name], dtype=torch.long, device=x.device)
            t = _tensor(t, f"AgentState.{name}", like=x)
            if t.is_floating_point() or t.dtype == torch.bool:
                raise TypeError(f"AgentState.{name} must hold integers, got dtype {t.dtype}")
            _check_shape(t, shape, f"AgentState.{name}", "scenes x vehicle slots, like x")
            setattr(self, name, t.long())
        m = self.manoeuvre
        bad = v & ((m < 0) | (m >= len(MANOEUVRES)))
        if bool(bad.any()):
            i = tuple(int(k) for k in bad.nonzero()[0])
            raise ValueError(
                f"AgentState.manoeuvre must index MANOEUVRES {MANOEUVRES} (0..3), got "
                f"{int(m[i])} at {i}; use manoeuvre_index(name)"
            )
        stack = torch.stack([getattr(self, n) for n in self.FLOAT_FIELDS], -1)
        bad = v & ~torch.isfinite(stack).all(-1)
        if bool(bad.any()):
            i = tuple(int(k) for k in bad.nonzero()[0])
            names = [n for n, ok in zip(self.FLOAT_FIELDS, torch.isfinite(stack[i])) if not ok]
            raise ValueError(
                f"AgentState has NaN or inf in {int(bad.sum())} valid agents (first at "
                f"(scene, slot) {i}: {', '.join(names)}); fix them or mark them invalid"
            )
        if bool((v & ((self.length <= 0) | (self.width <= 0) | (self.v < 0))).any()):
            raise ValueError("AgentState needs length > 0, width > 0 and v >= 0 for valid agents")

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.x.shape)

    def replace(self, **changes) -> AgentState:
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def agents(self) -> torch.Tensor:
        """``(B, V, 7)`` rows of ``AGENT_FEATURES`` (x, y, speed, cos, sin, length, width)."""
        return torch.stack(
            [self.x, self.y, self.v, torch.cos(self.theta), torch.sin(self.theta),
             self.length, self.width], -1,
        )  # fmt: skip

    @classmethod
    def from_traffic(cls, traffic, dtype=None) -> AgentState:
        """The vehicles of a :class:`~simsci.driving.Traffic` (slot 0 the ego);
        ``route`` picks each vehicle's next lane in the ground truth."""
        st = traffic.state
        if st is None:
            raise RuntimeError("call traffic.reset() before AgentState.from_traffic")
        dt = dtype or st.x.dtype
        f = lambda t: t.detach().clone().to(dt)  # noqa: E731
        pool = traffic.pool
        net = traffic.net[:, None].expand_as(st.lane)
        succ = pool.succ[net, st.lane.clamp(min=0)]  # B, V, 4
        hit = succ == st.nxt[..., :1]
        route = torch.where(hit.any(-1), hit.to(torch.int8).argmax(-1), 0).long()
        nan = torch.full_like(f(st.x), math.nan)
        valid = st.valid.clone()
        g = lambda t: torch.where(valid, f(t), nan)  # noqa: E731
        return cls(
            g(st.x), g(st.y), g(st.theta), g(st.v), g(st.accel), g(st.kappa),
            g(st.length), g(st.width), valid, route=route,
        )  # fmt: skip


# ----------------------------------------------------------------------------- kinematics
def curvature_limit(v):
    """Curvature limit at speed ``v``: min(MAX_CURVATURE, A_LAT / v^2)."""
    return torch.minimum(
        torch.full_like(v, MAX_CURVATURE), MAX_LATERAL_ACCEL / (v * v).clamp(min=1e-6)
    )


def feasible_box(kin: torch.Tensor, dt: float = DT):
    """The feasible controls at state ``kin`` (..., 4) = (v, a_prev, κ_prev, length):
    ``(lo_a, hi_a, lo_k, hi_k)`` (...), see the module docstring (never empty)."""
    v, a, k = kin[..., 0], kin[..., 1], kin[..., 2]
    lo_a = (a - MAX_JERK * dt).clamp(-MAX_BRAKE, MAX_ACCEL)
    hi_a = (a + MAX_JERK * dt).clamp(-MAX_BRAKE, MAX_ACCEL)
    kmax = curvature_limit((v + hi_a * dt).clamp(min=0))
    lo_k = torch.maximum(torch.minimum(k - MAX_CURVATURE_RATE * dt, kmax), -kmax)
    hi_k = torch.maximum(torch.minimum(k + MAX_CURVATURE_RATE * dt, kmax), -kmax)
    return lo_a, hi_a, lo_k, hi_k


def step_agents(
    agents: AgentState,
    accel,
    kappa,
    controlled,
    dt: float = DT,
    *,
    manoeuvre=None,
    lane=None,
    origin=None,
) -> AgentState:
    """Advance the ``controlled`` agents one step by the kinematic bicycle (Traffic's
    semi-implicit Euler): ``v' = max(v + a dt, 0)``, realised ``a = (v' - v) / dt``,
    ``θ' = θ + v' κ dt``, centre along ``θ' + β``, ``β = asin(κ 0.3 length)``. Others keep
    their state. ``manoeuvre``/``lane``/``origin`` (B, V), when given, replace the
    policy memory of the controlled agents (``lane``: of all valid agents)."""
    if not isinstance(agents, AgentState):
        raise TypeError(f"agents must be an AgentState, got {type(agents).__name__}")
    shape = agents.shape
    x = agents.x
    a = _tensor(accel, "accel", like=x, dtype=x.dtype)
    k = _tensor(kappa, "kappa", like=x, dtype=x.dtype)
    _check_shape(a, shape, "accel", "one acceleration per agent slot")
    _check_shape(k, shape, "kappa", "one curvature per agent slot")
    c = _tensor(controlled, "controlled", like=x)
    if c.dtype != torch.bool:
        raise TypeError(f"controlled must be a bool tensor, got dtype {c.dtype}")
    _check_shape(c, shape, "controlled", "one flag per agent slot")
    c = c & agents.valid
    if not (isinstance(dt, (int, float)) and math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be a finite number > 0, got {dt!r}")
    bad = c & ~(torch.isfinite(a) & torch.isfinite(k))
    if bool(bad.any()):
        raise ValueError(
            f"accel/kappa have NaN or inf for {int(bad.sum())} controlled agents; give "
            "finite controls"
        )
    v_new = (agents.v + a * dt).clamp(min=0.0)
    a_real = (v_new - agents.v) / dt
    lr = 0.3 * agents.length
    beta = torch.asin((k * lr).clamp(-1.0, 1.0))
    th_new = agents.theta + v_new * k * dt
    head = th_new + beta
    x_new = agents.x + v_new * torch.cos(head) * dt
    y_new = agents.y + v_new * torch.sin(head) * dt
    th_new = torch.atan2(torch.sin(th_new), torch.cos(th_new))
    w = lambda new, old: torch.where(c, new, old)  # noqa: E731
    changes = dict(
        x=w(x_new, agents.x), y=w(y_new, agents.y), theta=w(th_new, agents.theta),
        v=w(v_new, agents.v), accel=w(a_real, agents.accel), kappa=w(k, agents.kappa),
    )  # fmt: skip
    for name, val, mask in (
        ("manoeuvre", manoeuvre, c),
        ("origin", origin, c),
        ("lane", lane, agents.valid),
    ):
        if val is not None:
            t = _tensor(val, name, like=x)
            _check_shape(t, shape, name, "one per agent slot")
            changes[name] = torch.where(mask, t.long(), getattr(agents, name))
    return dataclasses.replace(agents, **changes)

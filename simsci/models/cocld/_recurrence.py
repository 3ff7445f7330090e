r"""CoCLD's latent recurrence as one autograd node, with a hand-written backward.

Both of CoCLD's solves are a sequence of *segments* run on a batch of rows at once:
segment j takes ``counts[j]`` exponential-midpoint (ETD-RK2) steps of the field, then
(the history only) a GRU jump, and records the state. The history's segments are the
events (0 steps before the first, ``substeps`` before each later one), the intensity
path's the quadrature nodes (no jump). Written as plain tensor operations the
recurrence is a chain of ~40 small autograd nodes per event, and on 32 rows the
engine's bookkeeping costs more than the arithmetic; here the forward runs without
recording and the backward walks the segments in reverse with the chain rule written
out, gathering the weight gradients of all steps into one matrix product each.

The step, z held at the step's midpoint through its part of the first layer
``zin`` = :math:`W_z z + b_1`, with :math:`E, E^{1/2}, \varphi, \varphi_{1/2}` the
segment's factors (see :mod:`._model`)::

    g(x)  = tanh(W_2 tanh(zin + x W_h) + b_2)
    mid   = E^{1/2} h + φ_{1/2} g(h)
    h'    = E h + φ g(mid)

and the jump nn.GRUCell's, its input part ``gi`` = :math:`W_{ih} x + b_{ih}` given::

    r, u = σ(gi_r + W_hr h + b_hr), σ(gi_z + W_hz h + b_hz)
    n    = tanh(gi_n + r (W_hn h + b_hn))
    h'   = n + u (h - n)          (rows with keep = False keep h: padding)

The tests check it with :func:`torch.autograd.gradcheck`, and the model's solves built on
it against the first per-event loop built of autograd operations (log-likelihood
terms and gradients, float32 and float64).
"""

from __future__ import annotations

import torch

_tanh_grad = torch.ops.aten.tanh_backward  # (grad, y) -> grad * (1 - y^2), one pass
_sigmoid_grad = torch.ops.aten.sigmoid_backward  # (grad, y) -> grad * y (1 - y)


def _stack(xs, like):
    return torch.stack(xs) if xs else like.new_zeros(0, *like.shape)


class Recurrence(torch.autograd.Function):
    """``Recurrence.apply(h0, zin, E, E_half, phi, phi_half, w_h, w2, b2, gi, w_hh,
    b_hh, keep, counts)`` -> (J, B, d) the state after each segment.

    h0 (B, d); zin (S, B, w), S = sum(counts), one per step in order; the factors (J, B,
    d) per segment; w_h (d, w) the h part of the field's first layer (transposed); w2
    (d, w), b2 (d) its second layer; gi (J, B, 3d), w_hh (3d, d), b_hh (3d), keep (J, B,
    1) bool: the jumps (all None: no jumps); counts: steps per segment (a tuple).

    The forward keeps every step's states and activations; whatever of the backward's
    arithmetic does not depend on the incoming gradient is done on all steps at once
    (derivatives of the activations, parameter gradients), so the reverse loop holds
    only the gradient's own recurrence."""

    @staticmethod
    def forward(ctx, h0, zin, E, Eh, phi, phih, w_h, w2, b2, gi, w_hh, b_hh, keep, counts):
        B, d = h0.shape
        S, w = sum(counts), w_h.shape[1]
        jumps = gi is not None
        w2t = w2.t()
        zins, Es, Ehs, phis, phihs = (x.unbind(0) for x in (zin, E, Eh, phi, phih))
        if jumps:
            w_rz, w_n = w_hh[: 2 * d].t(), w_hh[2 * d :].t()
            gi_rz = (gi[..., : 2 * d] + b_hh[: 2 * d]).unbind(0)
            gi_n, b_n, keeps = gi[..., 2 * d :].unbind(0), b_hh[2 * d :], keep.unbind(0)
        # every step's activations, written in place: u1, u2 (first layer), g1, g2
        # (field terms) alternate; the states h and mid before each field evaluation
        su, sg = h0.new_empty(2 * S, B, w), h0.new_empty(2 * S, B, d)
        smid = h0.new_empty(S, B, d)
        us, gs, mids = su.unbind(0), sg.unbind(0), smid.unbind(0)
        h, s = h0, 0
        saved_h, pre, rzs, ns, ghns, out = [], [], [], [], [], []
        for j, c in enumerate(counts):
            for _ in range(c):
                u1 = torch.tanh(torch.addmm(zins[s], h, w_h), out=us[2 * s])
                g1 = torch.tanh(torch.addmm(b2, u1, w2t), out=gs[2 * s])
                mid = torch.addcmul(Ehs[j] * h, phihs[j], g1, out=mids[s])
                u2 = torch.tanh(torch.addmm(zins[s], mid, w_h), out=us[2 * s + 1])
                g2 = torch.tanh(torch.addmm(b2, u2, w2t), out=gs[2 * s + 1])
                saved_h.append(h)
                h = torch.addcmul(Es[j] * h, phis[j], g2)
                s += 1
            if jumps:
                rz = torch.sigmoid(torch.addmm(gi_rz[j], h, w_rz))
                ghn = torch.addmm(b_n, h, w_n)
                n = torch.tanh(torch.addcmul(gi_n[j], rz[:, :d], ghn))
                pre.append(h)
                rzs.append(rz)
                ns.append(n)
                ghns.append(ghn)
                h = torch.where(keeps[j], torch.lerp(n, h, rz[:, d:]), h)
            out.append(h)
        ctx.counts, ctx.jumps = counts, jumps
        ctx.save_for_backward(
            _stack(saved_h, h0),
            smid,
            su,
            sg,
            _stack(pre, h0),
            _stack(rzs, h0),
            _stack(ns, h0),
            _stack(ghns, h0),
            E,
            Eh,
            phi,
            phih,
            w_h,
            w2,
            keep if jumps else h0.new_zeros(0),
            w_hh if jumps else h0.new_zeros(0),
        )
        return _stack(out, h0)

    @staticmethod
    def backward(ctx, grad_out):
        sh, smid, su, sg, pre, rz, n, ghn, E, Eh, phi, phih, w_h, w2, keep, w_hh = ctx.saved_tensors
        counts, jumps = ctx.counts, ctx.jumps
        J, S = len(counts), sum(counts)
        B, d, w = grad_out.shape[1], grad_out.shape[2], w_h.shape[1]
        need = ctx.needs_input_grad
        w_ht = w_h.t()
        us, gs = su.unbind(0), sg.unbind(0)
        Es, Ehs, phis, phihs = E.unbind(0), Eh.unbind(0), phi.unbind(0), phih.unbind(0)
        gos = grad_out.unbind(0)
        if jumps:
            u = rz[..., d:]
            dn = ((1 - u) * (1 - n * n)).unbind(0)
            hmn, ghns, rs = (pre - n).unbind(0), ghn.unbind(0), rz[..., :d].unbind(0)
            rzs = rz.unbind(0)
            q = torch.where(keep, u, torch.ones_like(u)).unbind(0)  # kept: u, else 1
            keepfs = keep.to(grad_out.dtype).unbind(0)
            w_rz, w_n = w_hh[: 2 * d], w_hh[2 * d :]
            drzs, dpns, dghns = [None] * J, [None] * J, [None] * J
        DA = grad_out.new_empty(2 * S, B, w)  # da1, da2 of each step, written in place
        das = DA.unbind(0)
        ghs, dmids, dvs = [None] * S, [None] * S, [None] * (2 * S)
        gh = torch.zeros_like(grad_out[0])
        s = S
        for j in range(J - 1, -1, -1):
            gh = gh + gos[j]
            if jumps:
                g = gh * keepfs[j]
                dpn = g * dn[j]
                drz = _sigmoid_grad(torch.cat([dpn * ghns[j], g * hmn[j]], 1), rzs[j])
                dghn = dpn * rs[j]
                drzs[j], dpns[j], dghns[j] = drz, dpn, dghn
                gh = torch.addmm(torch.addmm(gh * q[j], drz, w_rz), dghn, w_n)
            for _ in range(counts[j]):
                s -= 1
                ghs[s] = gh
                dv2 = _tanh_grad(gh * phis[j], gs[2 * s + 1])
                da2 = torch.ops.aten.tanh_backward.grad_input(
                    dv2 @ w2, us[2 * s + 1], grad_input=das[2 * s + 1]
                )
                dmid = da2 @ w_ht
                dv1 = _tanh_grad(dmid * phihs[j], gs[2 * s])
                da1 = torch.ops.aten.tanh_backward.grad_input(
                    dv1 @ w2, us[2 * s], grad_input=das[2 * s]
                )
                gh = torch.addmm(torch.addcmul(Es[j] * gh, Ehs[j], dmid), da1, w_ht)
                dmids[s], dvs[2 * s], dvs[2 * s + 1] = dmid, dv1, dv2
        dzin = dE = dEh = dphi = dphih = dw_h = dw2 = db2 = None
        if S:
            # sums over each segment's steps: a (J, S) indicator product (deterministic
            # on every device, unlike index_add_ on CUDA)
            seg = torch.repeat_interleave(
                torch.arange(J, device=grad_out.device),
                torch.tensor(counts, device=grad_out.device, dtype=torch.long),
            )
            ind = (seg == torch.arange(J, device=seg.device)[:, None]).to(grad_out.dtype)
            GH, DM, DV = torch.stack(ghs), torch.stack(dmids), torch.stack(dvs)
            g1, g2 = sg[0::2], sg[1::2]

            def per_segment(x):
                return (ind @ x.reshape(S, -1)).reshape(E.shape)

            dE, dphi = per_segment(GH * sh), per_segment(GH * g2)
            dEh, dphih = per_segment(DM * sh), per_segment(DM * g1)
            dzin = DA[0::2] + DA[1::2]
            if need[6]:
                dw_h = sh.reshape(-1, d).t() @ DA[0::2].reshape(-1, w)
                dw_h = dw_h.addmm_(smid.reshape(-1, d).t(), DA[1::2].reshape(-1, w))
            if need[7]:
                dw2 = DV.reshape(-1, d).t() @ su.reshape(-1, w)
            if need[8]:
                db2 = DV.reshape(-1, d).sum(0)
        dgi = dw_hh = db_hh = None
        if jumps:
            DRZ, DPN = torch.stack(drzs), torch.stack(dpns)
            dgi = torch.cat([DRZ, DPN], -1)
            dgh = torch.cat([DRZ, torch.stack(dghns)], -1).reshape(-1, 3 * d)
            if need[10]:
                dw_hh = dgh.t() @ pre.reshape(-1, d)
            if need[11]:
                db_hh = dgh.sum(0)
        return (gh, dzin, dE, dEh, dphi, dphih, dw_h, dw2, db2, dgi, dw_hh, db_hh, None, None)

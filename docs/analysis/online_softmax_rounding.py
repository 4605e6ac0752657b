"""Where the fused forward's rounding of P moves the backward's key gradients (absorbed path, H = 1).

SPEC.md §8 rounds the normalized P = exp(logit - lse) to bf16 before P·V. The fused forward does that
only for rows whose keys fit one tile; a longer row rounds the unnormalized exp(logit - running max)
tile by tile and divides by the unrounded sum at the end (fused/attention_fwd.cu, _sm90.cu). Its O_lat
therefore carries other rounding errors, and the backward's Delta = dO_lat·O_lat takes them into every
dlogit of the row. This script recomputes dc of an exported one-head case five ways and prints the
error of each against the exact dc:
  policy                   SPEC §8 (what the lowp reference does)
  kernel                   the fused forward's tile-by-tile rounding (tiles of 32 keys), then the backward
  kernel_fwd_policy_delta  the fused forward, but Delta from the policy's O_lat
  kernel_delta_sum_p_dp    the fused forward, Delta = sum_j P_j·dP_j
  kernel_integer_max       a forward whose running max is kept at an integer (exact power-of-two rescales)

Usage: dsa-parity export CASE.json --out DIR; PYTHONPATH=python python3 docs/analysis/online_softmax_rounding.py DIR
(the nightly seed-92 case reports/device/2026-12-04-s7-0b25b8e-seed92-case340-dc-shrunk.json, all at dc[511, 5]:
policy 0.0197, kernel 0.0580 (the H200: 0.063; the lowp reference 0.016), kernel_fwd_policy_delta 0.0197,
kernel_delta_sum_p_dp 0.0468, kernel_integer_max 0.0193.)

The integer running max was tried in the kernels on 2026-12-04 (be7580e, reverted in cccc034): it fixes this
case (H200: dc 0.0161, at e_l) but rows where one key carries much of the weight get worse, since the exact
running max gives that key P~ = 1 with no rounding at all and an integer one rounds it somewhere in (0.5, 1]:
nightly seed 93 failed cases 246 (dq_nope 6.4x e_l) and 1079 (O 2.1x), both passing with the exact max, which
in turn fails case 560 (dq_nope 3.5x) that the integer max passed (reports/device/2026-12-04-s8-*). Neither way is SPEC §8's; only rounding the normalized P (a second pass over
a row's keys once its lse is known) is.
"""
import json
import sys

import numpy as np

from dsa_parity import safetensors as st

f32 = np.float32
L2E = f32(1.4426950408889634)
TILE = 32


def bf(x):
    """fp32 -> bf16 (round to nearest even) -> fp32."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def forward_policy(l, c):
    m = l.max()
    lse = f32(np.log(np.exp(l - m, dtype=f32).sum(dtype=f32))) + m
    P = np.exp(l - lse).astype(f32)
    return bf((bf(P) @ c).astype(f32)), P


def forward_kernel(l, c, integer_max=False):
    s2 = (l * L2E).astype(f32)
    if len(s2) <= TILE:
        m = s2.max()
        lse2 = m + f32(np.log2(np.exp2(s2 - m, dtype=f32).sum(dtype=f32)))
        p = np.exp2(s2 - lse2).astype(f32)
        return bf((bf(p) @ c).astype(f32)), p
    m, total, O = f32(-np.inf), f32(0), np.zeros(c.shape[1], dtype=f32)
    for j in range(0, len(s2), TILE):
        tile = s2[j:j + TILE]
        m_new = max(m, tile.max())
        if integer_max:
            m_new = f32(np.ceil(m_new))
        alpha = np.exp2(m - m_new) if np.isfinite(m) else f32(0)
        p = np.exp2(tile - m_new).astype(f32)
        total = f32(total * alpha + p.sum(dtype=f32))
        O = (O * alpha + bf(p) @ c[j:j + TILE]).astype(f32)
        m = m_new
    lse2 = f32(m + np.log2(total))
    return bf((O / total).astype(f32)), np.exp2(s2 - lse2).astype(f32)


def main(folder):
    t = st.load(f"{folder}/inputs.safetensors")
    if t["q_nope"].shape[1] != 1:
        sys.exit("one head only (H = 1)")
    exact = np.asarray(st.load(f"{folder}/exact.safetensors")["dc"], dtype=np.float64)
    b = lambda k: st.bf16_to_f32(t[k]).astype(np.float64)
    W_UK, W_UV, c, k_pe = b("W_UK")[0], b("W_UV")[0], b("c"), b("k_pe")
    q_nope, q_pe, dO = b("q_nope")[:, 0], b("q_pe")[:, 0], b("dO")[:, 0]
    with open(f"{folder}/case.json") as f:
        scale = float(json.load(f)["softmax_scale"])
    C = c.shape[1]
    Kt = np.concatenate([c, k_pe], 1).astype(f32)
    cf = c.astype(f32)
    Qb = bf(np.concatenate([q_nope @ W_UK, q_pe], 1))
    dOl = bf(dO @ W_UV)
    idx = t["indices"]
    T = c.shape[0]
    for mode in ["policy", "kernel", "kernel_fwd_policy_delta", "kernel_delta_sum_p_dp", "kernel_integer_max"]:
        dc = np.zeros((T, C))
        for g in range(T):
            raw = idx[g]
            keys = np.unique(raw[(raw >= 0) & (raw <= g)])
            if len(keys) == 0:
                continue
            l = (f32(scale) * (Kt[keys] @ Qb[g])).astype(f32)
            if mode == "policy":
                O, P = forward_policy(l, cf[keys])
            else:
                O, P = forward_kernel(l, cf[keys], integer_max=mode == "kernel_integer_max")
            dP = (cf[keys] @ dOl[g]).astype(f32)
            delta = f32((dOl[g] * O).sum(dtype=f32))
            if mode == "kernel_fwd_policy_delta":
                delta = f32((dOl[g] * forward_policy(l, cf[keys])[0]).sum(dtype=f32))
            if mode == "kernel_delta_sum_p_dp":
                delta = f32((P * dP).sum(dtype=f32))
            dS = bf(P * (dP - delta)) if len(keys) > 1 else np.zeros(len(keys), dtype=f32)
            contrib = scale * np.outer(dS, Qb[g])[:, :C] + np.outer(bf(P), dOl[g])
            np.add.at(dc, keys, contrib)
        err = np.abs(dc - exact)
        worst = np.unravel_index(err.argmax(), err.shape)
        print(f"{mode:26s} max |dc - exact| {err.max():.4g} at dc[{worst[0]}, {worst[1]}]")


if __name__ == "__main__":
    main(sys.argv[1])

"""A plain PyTorch DSA core as an exec2 worker: every stage of the catalogue, the two backward
stages by autograd (what a user's PyTorch model relies on), on the global stream (rows in global
order, so any cp is fine). Dense [Tp, H, Tp] tensors: small cases only (max_tokens below).

    dsa-parity fuzz --backend exec2:'python3 -m dsa_parity.examples.torch_reference' --profile smoke

Environment:
    DSA_TORCH_DEVICE   cpu (default) or cuda
    DSA_TORCH_DTYPE    float64 (default) or float32: the precision the core computes in
    DSA_TORCH_BUG      a planted bug, to see the harness catch it: softmax_scale (1 % off),
                       duplicates (S(g) as a multiset), relu_grad (phi'(0) = 1), kl_N (N = Tp)
"""

import os
import sys

import numpy as np
import torch

from dsa_parity.worker import Capabilities, CannotRun, serve

MAX_TOKENS = 2048
CAPABILITIES = Capabilities(
    name="torch_reference",
    stages=["indexer", "attention", "attention_backward", "loss", "loss_backward"],
    dtypes=["F64", "I64"],
    cp=True,
    max_tokens=MAX_TOKENS,
    paths=["absorbed", "explicit"],
)
BUG = os.environ.get("DSA_TORCH_BUG", "")


def visibility(layout, device):
    """key_begin, key_end [Tp] and counted [Tp] (SPEC.md §2) from layout.json."""
    tp = int(layout["tp"])
    cu = torch.tensor(layout["cu_padded"], dtype=torch.int64)
    real = torch.tensor(layout["real"], dtype=torch.bool)
    g = torch.arange(tp)
    seg = torch.searchsorted(cu, g, right=True) - 1
    active = real | (layout["pad_rows"] == "attend")
    begin = cu[seg]
    end = torch.where(active, g + 1, begin)
    return begin.to(device), end.to(device), active.to(device)


def indexer_scores(case, x):
    """I[g, t] = sum_h w[g,h] * phi(q_I[g,h] . k_I[t]) for every pair (SPEC.md §3)."""
    u = torch.einsum("ghd,td->ght", x["q_I"], x["k_I"])
    if case.relu:
        phi = torch.relu(u)
        if BUG == "relu_grad":  # phi'(0) = 1: the gradient flows through u where u == 0
            phi = phi + (u - u.detach()) * (u == 0)
    else:
        phi = u
    return torch.einsum("ght,gh->gt", phi, x["w"])


def canonical_topk(scores, visible, width):
    """[Tp, K']: best score first, ties by the lower key (a stable sort), -1 past the visible keys."""
    masked = scores.detach().masked_fill(~visible, float("-inf"))
    order = torch.sort(masked, dim=1, descending=True, stable=True).indices[:, :width]
    keep = torch.arange(width, device=scores.device)[None, :] < visible.sum(dim=1, keepdim=True)
    return torch.where(keep, order, torch.full_like(order, -1))


def key_set(index, visible):
    """S(g) as a [Tp, Tp] mask: usable slots of the index rows (a set: a repeated key counts once)."""
    tp = visible.shape[0]
    ok = (index >= 0) & (index < tp)
    rows = torch.arange(tp, device=index.device)[:, None].expand_as(index)
    S = torch.zeros((tp, tp), dtype=torch.bool, device=index.device)
    S[rows[ok], index[ok]] = True
    return S & visible


def key_counts(index, visible):
    """How often each key appears in its row (the duplicates bug: S(g) as a multiset)."""
    tp = visible.shape[0]
    ok = (index >= 0) & (index < tp)
    rows = torch.arange(tp, device=index.device)[:, None].expand_as(index)
    n = torch.zeros((tp, tp), dtype=torch.float64, device=index.device)
    n.index_put_((rows[ok], index[ok]), torch.ones_like(index[ok], dtype=torch.float64), accumulate=True)
    return n * visible


def logits(case, x):
    """[Tp, H, Tp] s * Q~[g,h] . K~[t] (absorbed) or its explicit form (SPEC.md §5)."""
    s = case.softmax_scale * (1.01 if BUG == "softmax_scale" else 1.0)
    if case.path == "absorbed":
        q = torch.cat([torch.einsum("ghn,hnc->ghc", x["q_nope"], x["W_UK"]), x["q_pe"]], dim=2)
        k = torch.cat([x["c"], x["k_pe"]], dim=1)
        return s * torch.einsum("ghd,td->ght", q, k)
    k_nope = torch.einsum("tc,hnc->thn", x["c"], x["W_UK"])
    return s * (torch.einsum("ghn,thn->ght", x["q_nope"], k_nope) + torch.einsum("ghr,tr->ght", x["q_pe"], x["k_pe"]))


def masked_softmax(l, support):
    """softmax over the support and its log-sum-exp; an empty support gives P = 0, lse = -inf."""
    # exp of -inf outside the support: 0 with a 0 gradient (a where() over exp(l) would send
    # 0 * inf = NaN back through an overflowing unselected branch).
    l = l.masked_fill(~support, float("-inf"))
    lse = torch.logsumexp(l, dim=-1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.exp(l - safe[..., None]), lse


def run(case, inputs):
    if case.tp > MAX_TOKENS:
        raise CannotRun("torch_reference holds [Tp, H, Tp] tensors: Tp %d > %d" % (case.tp, MAX_TOKENS))
    device = torch.device(os.environ.get("DSA_TORCH_DEVICE", "cpu"))
    dtype = getattr(torch, os.environ.get("DSA_TORCH_DTYPE", "float64"))
    want = set(case.stages)
    grads = ("q_nope", "q_pe", "W_UK", "W_UV", "c", "k_pe", "q_I", "k_I", "w")
    x = {}
    for n, a in inputs.items():
        t = torch.from_numpy(np.ascontiguousarray(a)).to(device)
        x[n] = t if n == "indices" else t.to(dtype).requires_grad_(n in grads)
    begin, end, counted = visibility(case.layout, device)
    t = torch.arange(case.tp, device=device)
    visible = (t[None, :] >= begin[:, None]) & (t[None, :] < end[:, None])
    # Key rows no query may see (pad keys) can hold anything, NaN included: dense products would
    # spread it through 0 * NaN, so they are zeroed (never read by the math).
    unseen = ~visible.any(dim=0)
    with torch.no_grad():
        for n in ("c", "k_pe", "k_I"):
            x[n][unseen] = 0

    out = {}
    I = indexer_scores(case, x)
    topk = canonical_topk(I, visible, case.width)
    if "indexer" in want:
        out["scores"] = I.detach().masked_fill(~visible, float("-inf"))
        out["topk"] = topk
    index = x["indices"] if "indices" in x else topk
    S = key_set(index, visible)

    l = logits(case, x)
    P, lse = masked_softmax(l, S[:, None, :])
    if BUG == "duplicates":  # every copy of a key weighs in
        n = key_counts(index, visible)[:, None, :]
        P = P * n / torch.clamp((P * n).sum(dim=-1, keepdim=True), min=1e-300)
    O_lat = torch.einsum("ght,tc->ghc", P, x["c"])
    if case.path == "absorbed":
        O = torch.einsum("ghc,hvc->ghv", O_lat, x["W_UV"])
    else:
        O = torch.einsum("ght,thv->ghv", P, torch.einsum("tc,hvc->thv", x["c"], x["W_UV"]))
    if "attention" in want:
        out.update(O=O, O_lat=O_lat, lse=lse)
    if "attention_backward" in want:
        names = ("q_nope", "q_pe", "W_UK", "W_UV", "c", "k_pe")
        g = torch.autograd.grad((O * x["dO"].to(dtype)).sum(), [x[n] for n in names], retain_graph=True)
        out.update({"d" + n: v for n, v in zip(names, g)})

    if case.loss_mode != "off" and ("loss" in want or "loss_backward" in want):
        support = visible if case.loss_mode == "dense" else S
        support = support & counted[:, None]
        A, _ = masked_softmax(l.detach(), support[:, None, :])  # the target is a constant
        T = A.sum(dim=1)
        T = T / torch.clamp(T.sum(dim=1, keepdim=True), min=1e-10)
        logQ = I.masked_fill(~support, float("-inf"))
        logQ = logQ - torch.logsumexp(logQ, dim=1, keepdim=True)
        pos = T > 0
        kl = (T * (torch.log(torch.clamp(T, min=1e-10)) - logQ.masked_fill(~pos, 0))).masked_fill(~pos, 0).sum(dim=1)
        N = case.tp if BUG == "kl_N" else max(1, int(counted.sum()))
        loss = case.coeff * kl.sum() / N
        if "loss" in want:
            out.update(kl=kl, loss=loss.reshape(1))
        if "loss_backward" in want:
            g = torch.autograd.grad(loss, [x["q_I"], x["k_I"], x["w"]])
            out.update(dq_I=g[0], dk_I=g[1], dw=g[2])
    elif case.loss_mode == "off":
        if "loss" in want:
            out.update(kl=torch.zeros(case.tp), loss=torch.zeros(1))
        if "loss_backward" in want:
            for n in ("q_I", "k_I", "w"):
                out["d" + n] = torch.zeros_like(x[n])
    return {n: v.detach().cpu().numpy().astype(np.int64 if n == "topk" else np.float64) for n, v in out.items()}


def main():
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    return serve(run, CAPABILITIES)


if __name__ == "__main__":
    sys.exit(main())

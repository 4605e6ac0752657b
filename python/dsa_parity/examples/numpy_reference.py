"""A plain numpy DSA core as an exec2 worker: indexer scores, canonical top-k, sparse MLA attention
forward (O, O_lat, lse) on both paths, and the indexer KL loss forward (kl, loss), all in float64
on the global stream (rows in global order, so any cp is fine). No gradients: the capabilities
declare the stages indexer, attention and loss only, and the harness checks only those.

    dsa-parity fuzz --backend exec2:'python3 -m dsa_parity.examples.numpy_reference' --profile smoke
"""

import sys

import numpy as np

from dsa_parity.worker import Capabilities, serve

CAPABILITIES = Capabilities(
    name="numpy_reference",
    stages=["indexer", "attention", "loss"],
    dtypes=["F64", "I32"],
    cp=True,
    max_tokens=4096,
    paths=["absorbed", "explicit"],
)


class Stream:
    """Visibility of the padded stream (SPEC.md §2) from layout.json."""

    def __init__(self, layout):
        self.tp = int(layout["tp"])
        cu = np.asarray(layout["cu_padded"], dtype=np.int64)
        self.real = np.asarray(layout["real"], dtype=bool)
        self.attend = layout["pad_rows"] == "attend"
        g = np.arange(self.tp)
        seg = np.searchsorted(cu, g, side="right") - 1
        self.active = self.real | self.attend
        self.key_begin = cu[seg]
        self.key_end = np.where(self.active, g + 1, cu[seg])

    def visible(self, g):
        return np.arange(self.key_begin[g], self.key_end[g])


def logsumexp(x, axis=-1):
    m = np.max(x, axis=axis, keepdims=True)
    return (m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))).squeeze(axis)


def indexer(case, x, L):
    """scores [Tp, Tp] (-inf where not visible) and the canonical top-k [Tp, K'] (-1 for empty slots)."""
    tp, width = L.tp, case.width
    u = np.einsum("td,ghd->gth", x["k_I"], x["q_I"])  # [g, t, h]
    phi = np.maximum(u, 0.0) if case.relu else u
    full = np.einsum("gth,gh->gt", phi, x["w"])
    scores = np.full((tp, tp), -np.inf)
    topk = np.full((tp, width), -1, dtype=np.int64)
    for g in range(tp):
        keys = L.visible(g)
        if keys.size == 0:
            continue
        s = full[g, keys]
        scores[g, keys] = s
        order = np.lexsort((keys, -s))  # best score first, ties by the lower key
        m = min(width, keys.size)
        topk[g, :m] = keys[order[:m]]
    return scores, topk


def logits(case, x, g, keys):
    """[H, n] logits of row g on the given keys."""
    s = case.softmax_scale
    if case.path == "absorbed":
        q = np.concatenate([np.einsum("hn,hnc->hc", x["q_nope"][g], x["W_UK"]), x["q_pe"][g]], axis=1)
        k = np.concatenate([x["c"][keys], x["k_pe"][keys]], axis=1)
        return s * q @ k.T
    k_nope = np.einsum("tc,hnc->htn", x["c"][keys], x["W_UK"])
    return s * (np.einsum("hn,htn->ht", x["q_nope"][g], k_nope) + x["q_pe"][g] @ x["k_pe"][keys].T)


def attention(case, x, L, index):
    """S(g) from the index rows, then O [Tp,H,Dv], O_lat [Tp,H,C], lse [Tp,H]."""
    d = case.dims
    tp, H = L.tp, d["H"]
    O = np.zeros((tp, H, d["Dv"]))
    O_lat = np.zeros((tp, H, d["C"]))
    lse = np.full((tp, H), -np.inf)
    S = []
    for g in range(tp):
        row = index[g]
        ok = (row >= 0) & (row < tp)
        row = row[ok]
        row = row[(row >= L.key_begin[g]) & (row < L.key_end[g])]
        keys = np.unique(row)
        S.append(keys)
        if keys.size == 0:
            continue
        l = logits(case, x, g, keys)
        lse[g] = logsumexp(l)
        P = np.exp(l - lse[g][:, None])
        O_lat[g] = P @ x["c"][keys]
        if case.path == "absorbed":
            O[g] = np.einsum("hc,hvc->hv", O_lat[g], x["W_UV"])
        else:
            v = np.einsum("tc,hvc->htv", x["c"][keys], x["W_UV"])
            O[g] = np.einsum("ht,htv->hv", P, v)
    return O, O_lat, lse, S


def kl_loss(case, x, L, S):
    """Per-row KL(T || Q) and L = coeff * sum(KL) / N (SPEC.md §7)."""
    tp = L.tp
    kl = np.zeros(tp)
    if case.loss_mode == "off":
        return kl, np.zeros(1)
    for g in range(tp):
        if not L.active[g]:
            continue
        keys = S[g] if case.loss_mode == "sparse" else L.visible(g)
        if keys.size == 0:
            continue
        l = logits(case, x, g, keys)
        A = np.exp(l - logsumexp(l)[:, None])
        T = A.sum(axis=0)
        T = T / max(T.sum(), 1e-10)
        u = x["k_I"][keys] @ x["q_I"][g].T  # [n, HI]
        phi = np.maximum(u, 0.0) if case.relu else u
        I = phi @ x["w"][g]
        logQ = I - logsumexp(I)
        pos = T > 0
        kl[g] = np.sum(T[pos] * (np.log(np.maximum(T[pos], 1e-10)) - logQ[pos]))
    N = max(1, int(L.active.sum()))
    return kl, np.array([case.coeff * kl.sum() / N])


def run(case, inputs):
    L = Stream(case.layout)
    out = {}
    scores, topk = indexer(case, inputs, L)
    if "indexer" in case.stages:
        out["scores"] = scores
        out["topk"] = topk
    index = inputs["indices"] if "indices" in inputs else topk
    O, O_lat, lse, S = attention(case, inputs, L, index)
    if "attention" in case.stages:
        out.update(O=O, O_lat=O_lat, lse=lse)
    if "loss" in case.stages:
        kl, loss = kl_loss(case, inputs, L, S)
        out.update(kl=kl, loss=loss)
    return out


def main():
    return serve(run, CAPABILITIES)


if __name__ == "__main__":
    sys.exit(main())

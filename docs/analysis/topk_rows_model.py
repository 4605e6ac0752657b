#!/usr/bin/env python3
"""A model of fused/topk_rows.cu (the two-phase indexer's top-k, one CTA a row), in numpy.

Two uses:
  1. check the algorithm, not the CUDA code, against SPEC §4's canonical order (score descending,
     ties to the lower key) on rows built to reach every path: the whole row in the buffer, a
     gather after radix pass 0, 1 or 2, and the tie path (the K'-th key tied with more keys than
     the buffer holds);
  2. count how often a production-like row reads its scores from global memory (the radix passes
     plus the gather) at the benchmark's inputs (uniform bf16 in [-1, 1], HI 64, DI 128, ReLU,
     K' 2048, CAP 4096), which is what the kernel's time per row scales with.

Usage: python3 docs/analysis/topk_rows_model.py   (numpy; about a minute)
"""
from collections import Counter

import numpy as np


def order_key(x):
    """The kernel's order_key: larger score, larger uint32; -0 and +0 share a key."""
    x = np.where(x == 0, np.float32(0), x).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    return np.where(u & 0x80000000, (~u) & 0xFFFFFFFF, u | 0x80000000)


def pick_bin(hist, rem):
    """The bin holding the rem-th largest key, scanned from the top: (bin, rem in it, its count)."""
    acc = 0
    for b in range(len(hist) - 1, -1, -1):
        if acc + hist[b] >= rem:
            return b, rem - acc, int(hist[b])
        acc += hist[b]
    raise AssertionError("fewer keys under the prefix than rem")


def topk_rows(scores, K, cap):
    """The selected keys in canonical order, the path taken, how many times the row was read and how
    many keys the buffer's select then took."""
    n = len(scores)
    keys = order_key(scores)

    def finish(sel):  # the buffer's select (ties to the lower index) and the canonical sort
        return sorted(sel, key=lambda j: (-int(keys[j]), j))[:K]

    if n <= cap:
        return finish(range(n)), "whole row", 1, n
    prefix, mask, rem = 0, 0, K
    for p, (shift, bins) in enumerate([(21, 2048), (10, 2048), (0, 1024)]):
        under = (keys & mask) == prefix
        hist = np.bincount(((keys[under] >> shift) & (bins - 1)).astype(np.int64), minlength=bins)
        b, rem, eq = pick_bin(hist, rem)
        prefix |= b << shift
        mask |= (bins - 1) << shift
        held = K - rem + eq
        if held <= cap:
            sel = np.nonzero(keys >= prefix)[0]
            assert len(sel) == held
            return finish(sel.tolist()), f"gather after pass {p}", p + 2, held
    above = np.nonzero(keys > prefix)[0].tolist()
    assert len(above) == K - rem
    ties = np.nonzero(keys == prefix)[0][:rem].tolist()
    return finish(above + ties), "ties", 5, K


def canonical(scores, K):
    return sorted(range(len(scores)), key=lambda j: (-float(scores[j]), j))[:K]


def check_paths(rng):
    paths = Counter()
    for trial in range(400):
        n = int(rng.integers(1, 3000))
        K = min(int(rng.integers(1, 300)), n)
        cap = (K + 31) // 32 * 32 if trial % 2 else max((2 * K + 31) // 32 * 32, (K + 256 + 31) // 32 * 32)
        kind = trial % 4
        if kind == 0:
            s = rng.normal(size=n)
        elif kind == 1:
            s = np.maximum(rng.normal(size=n), 0)  # ties at exactly 0
        elif kind == 2:
            s = np.round(rng.normal(size=n) * 3)   # few distinct values
        else:
            s = rng.normal(size=n) * 1e-3 + 5      # one exponent: the first pass narrows little
        s = s.astype(np.float32)
        got, path, _, _ = topk_rows(s, K, cap)
        paths[path] += 1
        assert got == canonical(s, K), (trial, path)
    return paths


def bench_rows(rng, HI=64, DI=128, K=2048, cap=4096, lengths=(4096, 8192, 12288, 16384)):
    bf16 = lambda a: (a.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)
    out = []
    for n in lengths:
        q = bf16(rng.uniform(-1, 1, size=(HI, DI)))
        w = bf16(rng.uniform(-1, 1, size=HI))
        k = bf16(rng.uniform(-1, 1, size=(n, DI)))
        s = (np.maximum(k @ q.T, 0) @ w).astype(np.float32)
        _, path, reads, held = topk_rows(s, K, cap)
        out.append((n, path, reads, held))
    return out


if __name__ == "__main__":
    rng = np.random.default_rng(28)
    print("paths of 400 synthetic rows, all equal to the canonical order:", dict(check_paths(rng)))
    for n, path, reads, held in bench_rows(rng):
        print(f"bench-like row of {n} keys (K' 2048, CAP 4096): {path}, the row read {reads} times, "
              f"{held} keys into the buffer's select")

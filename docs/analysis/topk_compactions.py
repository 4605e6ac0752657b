"""How much selection work the fused indexer's streaming top-k does per row, for a candidate buffer
of CAP slots (fused/indexer_topk.cu, fused/indexer_topk_sm90.cu, topk_select.cuh).

A row streams its keys in steps; a key enters the buffer when its score beats the threshold; before
a step could overflow the buffer, a select keeps the K' best and raises the threshold to their
pivot; at the end one last select (when more than K' remain) and the canonical sort. The selects'
cost grows with the elements they pass over, which this counts for i.i.d. scores (the benchmark's
uniform random q_I, k_I and w give scores of one shape along a row, so the count is the same
whatever the distribution, as long as the order of the keys is random).

Usage: python3 docs/analysis/topk_compactions.py [--k 2048] [--rows 4096,16384,65536]
                                                   [--buffers 4096:256,3008:128,2816:64]
--buffers: CAP:STEP pairs (the mma.sync kernel: 4096:256; the wgmma kernel: 3008:128; its
one-warpgroup experiment, reports/device/2026-12-07-s27-indexer-experiment.patch: 2816:64).

At K' 2048 (27th session): a 16K-key row compacts 3 times at CAP 4096 (11 848 elements through the
selects, 2285 left for the last select), 5 times at 3008 (14 592, 2865) and 6 at 2816 (16 647,
2671); a 4K-key row never at 4096, once at 3008, twice at 2816.
"""

import argparse

import numpy as np


def selection_work(length: int, k: int, cap: int, step: int, rng: np.random.Generator):
    """(compactions, elements the compactions pass over, elements left for the last select)."""
    scores = rng.standard_normal(length).astype(np.float32)
    buf = np.empty(0, dtype=np.float32)
    threshold = -np.inf
    compactions = work = 0
    for base in range(0, length, step):
        if buf.size + step > cap:
            compactions += 1
            work += buf.size
            buf = np.sort(buf)[::-1][:k]
            threshold = buf[-1]
        tile = scores[base:base + step]
        buf = np.concatenate([buf, tile[tile > threshold]])
    return compactions, work, buf.size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--rows", default="4096,16384,65536")
    ap.add_argument("--buffers", default="4096:256,3008:128,2816:64")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    for length in (int(x) for x in a.rows.split(",")):
        for cap, step in (tuple(int(v) for v in b.split(":")) for b in a.buffers.split(",")):
            if cap < a.k + step:
                ap.error(f"--buffers: CAP {cap} must be at least K' + STEP = {a.k + step}")
            c, w, left = selection_work(length, a.k, cap, step, rng)
            print(f"row of {length:6d} keys, CAP {cap:5d} (steps of {step:3d}): {c:3d} compactions over "
                  f"{w:7d} elements, {left:5d} left for the last select")


if __name__ == "__main__":
    main()

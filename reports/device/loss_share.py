"""The indexer loss's share of the attention, from the lossplit stage's benchmark JSONs.

share = (T^'s cost + the loss given T^) / (attention forward + backward), T^'s cost being
BM_FusedAttentionBackwardWithTarget − BM_FusedAttentionBackward (README "Benchmarks"); times are the
means over the files given (runs of the same build).

Usage: python3 reports/device/loss_share.py bench-loss-split-1.json [bench-loss-split-2.json ...]
"""
import json
import sys
from collections import defaultdict

PARTS = ("AttentionForward", "AttentionBackward", "AttentionBackwardWithTarget", "LossGivenTarget")


def main(paths):
    times = defaultdict(list)  # (part, model, S) -> ms of each run
    for path in paths:
        for b in json.load(open(path))["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            fields = b["name"].split("/")
            part = fields[0].removeprefix("BM_Fused")
            if part not in PARTS:
                continue
            kv = dict(f.split(":", 1) for f in fields[1:] if ":" in f)
            times[(part, kv["model"], int(kv["S"]))].append(b["real_time"])
    mean = {k: sum(v) / len(v) for k, v in times.items()}
    shapes = sorted({(m, s) for (_, m, s) in mean})
    print(f"{'model':>5} {'S':>6} {'fwd':>8} {'bwd':>8} {'T^':>6} {'loss':>8} {'share':>7}  (ms, means of {len(paths)} run(s))")
    for m, s in shapes:
        try:
            fwd, bwd, tgt, loss = (mean[(p, m, s)] for p in PARTS)
        except KeyError as e:
            print(f"{m:>5} {s:>6}  missing {e.args[0][0]}")
            continue
        share = (tgt - bwd + loss) / (fwd + bwd)
        print(f"{m:>5} {s:>6} {fwd:8.3f} {bwd:8.3f} {tgt - bwd:6.3f} {loss:8.3f} {100 * share:6.1f}%")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])

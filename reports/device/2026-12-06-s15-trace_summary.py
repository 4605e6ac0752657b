# Sum DSA_TRACE spans by name: count, total s, median ms, p90 ms.
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
by = collections.defaultdict(list)
for e in ev: by[e["name"]].append(e["dur"] / 1000.0)
print(f"{'span':45s} {'n':>6s} {'total s':>9s} {'med ms':>8s} {'p90 ms':>8s}")
for k, v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    v.sort()
    print(f"{k:45s} {len(v):6d} {sum(v)/1000:9.2f} {v[len(v)//2]:8.2f} {v[int(len(v)*0.9)]:8.2f}")

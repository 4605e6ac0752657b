#!/usr/bin/env python3
"""Whether two dsa-parity reports give the same verdict to the same cases (jq-free, stdlib only).

  compare_verdicts.py export REPORT.json DIR   every case of REPORT as DIR/case-<index>.json (for replay)
  compare_verdicts.py compare A.json B.json    the verdict and bucket of every case of A against B's,
                                               matched by the case description; exit 1 when any differs

The device stage mpicuda (device-run.sh) runs --backend cuda --comm mpi on one rank, replays the
very cases it ran with --comm local, and compares the two reports with this.
"""
import json
import os
import sys
from collections import Counter

CASE_SCHEMA = "dsa-parity/case/v1"


def cases_of(path):
    with open(path) as f:
        report = json.load(f)
    if report.get("schema") != "dsa-parity/report/v1":
        sys.exit(f"{path}: not a dsa-parity report (schema {report.get('schema')!r})")
    return report, report["cases"]


def export(report_path, out_dir):
    _, cases = cases_of(report_path)
    os.makedirs(out_dir, exist_ok=True)
    for rec in cases:
        case = dict(rec["case"])
        case["schema"] = CASE_SCHEMA
        with open(os.path.join(out_dir, "case-%06d.json" % rec["index"]), "w") as f:
            json.dump(case, f, indent=1)
    print(f"exported {len(cases)} cases of {report_path} to {out_dir}")


def compare(a_path, b_path):
    a_rep, a = cases_of(a_path)
    b_rep, b = cases_of(b_path)
    key = lambda rec: (rec["verdict"], rec.get("bucket"))
    by_desc = {}
    for rec in b:
        by_desc.setdefault(rec["description"], []).append(key(rec))
    differ, missing = [], []
    for rec in a:
        got = by_desc.get(rec["description"])
        if not got:
            missing.append(rec["description"])
            continue
        theirs = got.pop(0)
        if theirs != key(rec):
            differ.append((rec["description"], key(rec), theirs))
    va, vb = Counter(r["verdict"] for r in a), Counter(r["verdict"] for r in b)
    print(f"{a_path}: {len(a)} cases {dict(va)} (comm {a_rep['context'].get('comm')}, "
          f"world_size {a_rep['context'].get('world_size')})")
    print(f"{b_path}: {len(b)} cases {dict(vb)} (comm {b_rep['context'].get('comm')})")
    for d, mine, theirs in differ[:20]:
        print(f"  DIFFERS {d}: {mine} vs {theirs}")
    for d in missing[:20]:
        print(f"  MISSING in {b_path}: {d}")
    if differ or missing or not a:
        print(f"verdicts differ: {len(differ)} differ, {len(missing)} missing, {len(a)} compared")
        return 1
    print(f"same verdicts: all {len(a)} cases agree")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "export":
        export(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)

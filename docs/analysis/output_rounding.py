"""Whether a failing element is two outputs rounded to neighbouring bf16 values, and how far the
kernel's own sum must have been from exact for that.

Every gradient is rounded to bf16 on output (SPEC.md §8), lowp's too. SPEC §9's e_l is lowp's
largest error over the tensor, wherever it falls; the element where the kernel fails may be a
larger one, whose rounding noise is larger in proportion. This script puts the two side by side:
the exact value at the failing element, lowp's and the kernel's, the bf16 grid there, the smallest
error the kernel's pre-rounding value can have had (the distance from exact to the interval that
rounds to the kernel's value), and lowp's errors relative to each element's own size.

Usage: dsa-parity export CASE.json --out DIR --backend lowp
       PYTHONPATH=python python3 docs/analysis/output_rounding.py DIR TENSOR \\
           (--fused FUSED.safetensors | --at I,J,... --fused-error E)
FUSED.safetensors: `dsa-parity export CASE.json --out DIRC --backend cuda` on a GPU machine
(DIRC/backend.safetensors). Without it, the failure message gives the element and e_f
("e_f 0.0298 ... at dk_pe[107, 3]"); the kernel's value is then the bf16 value e_f from exact.

Nightly seed 114 case 704 (reports/device/2026-12-07-s24-s24a-call3-fuzz-nightly-gpu-seed114-case-704.json,
H 1, C 8, R 4, a hot key), `--at 107,3 --fused-error 0.0298` on dk_pe: exact 4.43895 (the tensor's
largest element), lowp 4.4375, the kernel 4.46875, one bf16 step (0.03125) above lowp's; its fp32 sum
was at least 4.453125, 0.0142 (0.32 %) above exact. lowp's largest error is 0.00807, on an element of
0.945 (0.85 % of it): proportionally the kernel's error is smaller.
"""
import argparse

import numpy as np

from dsa_parity import safetensors as st


def as_f64(x):
    """A loaded tensor (bf16 as its bits) as float64."""
    return st.to_float(x, "BF16" if np.asarray(x).dtype == np.uint16 else "F64")


def bf16_step(v, k):
    """The bf16 value k steps toward +inf from the bf16 value v (same sign; not across zero)."""
    bits = int(np.array(abs(v), dtype=np.float32).view(np.uint32)) >> 16
    mag = float(np.array((bits + (k if v >= 0 else -k)) << 16, dtype=np.uint32).view(np.float32))
    return mag if v >= 0 else -mag


def bf16_grid(v):
    """The bf16 values at or below v and above it, and the step between them."""
    below = float(st.bf16_to_f32(st.f32_to_bf16(np.array([v], dtype=np.float32)))[0])
    if below > v:
        below = bf16_step(below, -1)
    above = bf16_step(below, 1)
    return below, above, above - below


def rounds_to(b):
    """The interval of values that round to the bf16 value b (ties ignored)."""
    return (b + bf16_step(b, -1)) / 2, (b + bf16_step(b, 1)) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder")
    ap.add_argument("tensor")
    ap.add_argument("--fused", help="the kernel's outputs (export --backend cuda)")
    ap.add_argument("--at", help="the failing element's index, comma-separated (without --fused)")
    ap.add_argument("--fused-error", type=float, help="e_f at that element (without --fused)")
    a = ap.parse_args()

    exact = as_f64(st.load(f"{a.folder}/exact.safetensors")[a.tensor])
    lowp = as_f64(st.load(f"{a.folder}/backend.safetensors")[a.tensor])
    finite = np.isfinite(exact) & np.isfinite(lowp)
    err_l = np.where(finite, np.abs(lowp - exact), 0.0)
    il = np.unravel_index(np.argmax(err_l), exact.shape)
    imax = np.unravel_index(np.argmax(np.where(finite, np.abs(exact), 0.0)), exact.shape)
    print(f"{a.tensor} {list(exact.shape)}: max |exact| {abs(exact[imax]):.6g} at {list(imax)}")
    print(f"lowp: e_l {err_l[il]:.4g} at {list(il)}, where exact is {exact[il]:.6g} "
          f"({100 * err_l[il] / max(abs(exact[il]), 1e-300):.3g} % of it)")

    if a.fused:
        fused = as_f64(st.load(a.fused)[a.tensor])
        err_f = np.where(finite & np.isfinite(fused), np.abs(fused - exact), 0.0)
        at = np.unravel_index(np.argmax(err_f), exact.shape)
        f = fused[at]
    else:
        if a.at is None or a.fused_error is None:
            ap.error("give --fused, or --at and --fused-error")
        at = tuple(int(i) for i in a.at.split(","))
        below, _, _ = bf16_grid(exact[at])
        cands = [c for c in (bf16_step(below, k) for k in range(-4, 5))
                 if abs(abs(c - exact[at]) - a.fused_error) < 1e-3 * max(a.fused_error, 1e-30) + 1e-6]
        if not cands:
            raise SystemExit(f"no bf16 value lies {a.fused_error} from exact {exact[at]:.6g}")
        f = cands[0]
    x, l = exact[at], lowp[at]
    below, above, ulp = bf16_grid(x)
    lo, hi = sorted(rounds_to(f))
    pre = 0.0 if lo <= x <= hi else min(abs(lo - x), abs(hi - x))
    steps = round((f - l) / ulp)
    print(f"at {list(at)}: exact {x:.6g}; bf16 grid {below:.6g}, {above:.6g} (step {ulp:.6g})")
    print(f"  lowp {l:.6g} (off {abs(l - x):.4g}), kernel {f:.6g} (off {abs(f - x):.4g}): "
          f"{steps:+d} bf16 step(s) from lowp's")
    print(f"  the kernel's value before rounding lay in [{lo:.7g}, {hi:.7g}]: at least {pre:.4g} from exact "
          f"({100 * pre / max(abs(x), 1e-300):.3g} % of it)")
    rel_l = err_l[il] / max(abs(exact[il]), 1e-300)
    verdict = "smaller" if pre / max(abs(x), 1e-300) <= rel_l else "larger"
    print(f"  relative to its element, that is {verdict} than lowp's largest error ({100 * rel_l:.3g} %)")


if __name__ == "__main__":
    main()

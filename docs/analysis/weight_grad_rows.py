"""Which query rows a backend's weight gradients summed (absorbed path).

dW_UV[h] = Σ_g dO[g,h] ⊗ O_lat[g,h] and dW_UK[h] = Σ_g q_nope[g,h] ⊗ dQ~[g,h,:C] are sums over every
query row. This script recomputes dW_UV from the backend's own O_lat (so the forward's rounding is
not the question) and the case's dO, and compares it with the backend's dW_UV: whole, over every
prefix of the rows (the best prefix says where a reduction stopped), and without the pad rows. The
backend's outputs are bf16-rounded, so agreement is to about half a bf16 ulp of dW_UV's largest
element.

Usage: dsa-parity export CASE.json --out DIR --backend cuda
       PYTHONPATH=python python3 docs/analysis/weight_grad_rows.py DIR [BACKEND.safetensors]
(BACKEND defaults to DIR/backend.safetensors; it needs O_lat and dW_UV.)

Nightly seed 97 case 1741 (reports/device/2026-12-05-s12-f65e6dd-fuzz-nightly-gpu-seed97-cases/, Tq 4610,
H 1, Dv 16, C 8), the cuda backend at a591147 on an H100 (reports/device/2026-12-06-s14-case1741/):
the nightly's failing element dW_UV[0, 7, 1] is 2.8906 in the backend, 4.5206 exact, 4.5116 summed over
the backend's own O_lat. The script: largest |backend - sum over all rows| 1.663 (at [0, 6, 3]: -51.5
against -53.16), over the best prefix, the first 4608 rows, 0.102 (bf16 rounding: |dW_UV| reaches
66.5); the residual's singular values 4.51, 3.66, then 0.17: rows 4608 and 4609, whose terms in it
are -1.006 and -0.993 times their own. Exactly those two rows are missing from the sum.
"""
import sys

import numpy as np

from dsa_parity import safetensors as st


def as_f64(x):
    a = np.asarray(x)
    if a.dtype == np.uint16:  # bf16 bit patterns
        return st.bf16_to_f32(a).astype(np.float64)
    return a.astype(np.float64)


def main(folder, backend_file=None):
    inputs = st.load(f"{folder}/inputs.safetensors")
    exact = st.load(f"{folder}/exact.safetensors")
    back = st.load(backend_file or f"{folder}/backend.safetensors")
    dO = as_f64(inputs["dO"])          # [T, H, Dv]
    O_lat = as_f64(back["O_lat"])      # [T, H, C]
    W = as_f64(back["dW_UV"])          # [H, Dv, C]
    W_exact = as_f64(exact["dW_UV"])
    T, H = dO.shape[0], dO.shape[1]
    real = np.asarray(inputs["real"]).astype(bool)
    ulp = 2.0 ** (np.floor(np.log2(np.abs(W).max())) - 7)
    print(f"T {T}, H {H}; |dW_UV| up to {np.abs(W).max():.4g} (bf16 ulp there {ulp:.3g})")
    for h in range(H):
        terms = dO[:, h, :, None] * O_lat[:, h, None, :]  # [T, Dv, C]
        whole = terms.sum(axis=0)
        i = np.unravel_index(np.argmax(np.abs(whole - W[h])), whole.shape)
        print(f"head {h}: worst at [{h}, {i[0]}, {i[1]}]: backend {W[h][i]:.6g}, exact {W_exact[h][i]:.6g}, "
              f"sum over the backend's O_lat {whole[i]:.6g}")
        print(f"  largest |backend - sum over all rows|  {np.abs(whole - W[h]).max():.4g}")
        print(f"  ... over the real rows only            {np.abs(terms[real].sum(axis=0) - W[h]).max():.4g}")
        prefix = np.abs(np.cumsum(terms, axis=0) - W[h]).max(axis=(1, 2))
        n = int(np.argmin(prefix))
        print(f"  best prefix: the first {n + 1} rows, {prefix[n]:.4g}")
        R = W[h] - whole
        U, s, _ = np.linalg.svd(R)
        big = int((s > 4 * ulp).sum())  # bf16 rounding of 16x8 elements stays below
        print(f"  residual singular values {np.array2string(s[:4], precision=3)}: {big} above 4 ulp")
        if big:
            span = U[:, :big]
            share = np.linalg.norm(dO[:, h] @ span, axis=1) / np.maximum(np.linalg.norm(dO[:, h], axis=1), 1e-300)
            rows = np.argsort(-share)[:big]
            X = np.linalg.lstsq(dO[rows, h].T, R, rcond=None)[0]  # R = Σ_rows dO[row] ⊗ X[row]
            for r, x in zip(rows, X):
                c = x @ O_lat[r, h] / max(O_lat[r, h] @ O_lat[r, h], 1e-300)
                print(f"  row {r}: its dO lies in the residual's span ({share[r]:.4f}); "
                      f"its term there is {c:+.3f} x its own")


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])

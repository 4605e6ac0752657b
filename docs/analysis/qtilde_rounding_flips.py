"""Why the fused dense KL of nightly seed 92 case 516 fails (GPU + torch with CUDA).

SPEC.md §8 rounds Q~ = [q_nope·W_UK ; q_pe] to bf16. The lowp reference sums q_nope·W_UK in fp32 on
the CPU, the fused backend on tensor cores (cuBLAS, fp32 accumulation): a few of the 36864 values of
a row land on the other side of a bf16 rounding midpoint. Row 17 of the shrunk case has KL = 98.7
because its indexer puts log Q = -486 on a key the attention gives T = 0.2, so KL moves by 486 per
unit of T, and T moves with every logit. This script recomputes that row's KL from the exported
inputs with Q~ summed both ways and the logits summed three ways (fp64, fp32 FFMA, tensor cores):

  Q~ ffma: flips vs ffma 0; kl err: logits fp64 -2.716e-04, ffma -2.754e-04, tc -2.600e-04
  Q~ tc:   flips vs ffma 3; kl err: logits fp64 -9.429e-04, ffma -9.468e-04, tc -9.311e-04

(H200, reports/device/2026-12-04-s8-61e36c1-kl-tensor-core-experiment.txt). The lowp reference's
error is 2.37e-4, the fused kernel's 9.39e-4: three flipped Q~ values explain the failure, the
logits' accumulation does not. Both Q~ are legal roundings of §8; the tolerance e_f <= 2·e_l takes
one of them for the rounding noise of the other. The same class: seed 71 case 113, seed 93 case 732.

Usage: dsa-parity export reports/device/2026-12-04-s7-0b25b8e-seed92-case516-kl-shrunk.json --out DIR;
python3 docs/analysis/qtilde_rounding_flips.py DIR (from the source root)."""
import json, sys
import numpy as np
import torch
sys.path.insert(0, "python")
from dsa_parity import safetensors as st

torch.backends.cuda.matmul.allow_tf32 = False
d = sys.argv[1]
t = st.load(f"{d}/inputs.safetensors"); e = st.load(f"{d}/exact.safetensors")
b = lambda k: torch.tensor(st.bf16_to_f32(t[k]), dtype=torch.float64, device="cuda")
scale = json.load(open(f"{d}/case.json"))["softmax_scale"]
g, keys = 17, list(range(14, 18))
qn, qp, W, c, kp = b("q_nope")[g], b("q_pe")[g], b("W_UK"), b("c")[keys], b("k_pe")[keys]
qI, kI, w = b("q_I")[g], b("k_I")[keys], b("w")[g]
I = (w[:, None] * torch.relu(qI @ kI.T)).sum(0)
lq = I - torch.logsumexp(I, 0)
Kt = torch.cat([c, kp], 1)
def kl(L):
    A = torch.softmax(L.double(), 1); T = A.sum(0); T = T / T.sum()
    return float((T * (torch.log(T) - lq)).sum())
exact = float(e["kl"][g])
Qx = torch.cat([torch.einsum("hd,hdc->hc", qn, W), qp], 1)
print("kl exact", exact, "recomputed", kl(scale * Qx @ Kt.T))
bf = torch.bfloat16
# Q~ two ways: fp32 FFMA (the CPU lowp's kind) and tensor cores (what cuBLAS / the kernels use)
Qn_ffma = torch.bmm(qn.float()[:, None, :], W.float())[:, 0, :]
Qn_tc = torch.bmm(qn.to(bf)[:, None, :], W.to(bf), out_dtype=torch.float32)[:, 0, :]
for name, Qn in [("Q~ ffma", Qn_ffma), ("Q~ tc", Qn_tc)]:
    Q = torch.cat([Qn.to(bf), qp.to(bf)], 1)
    flips = int((Q.double() != torch.cat([Qn_ffma.to(bf), qp.to(bf)], 1).double()).sum())
    L64 = scale * Q.double() @ Kt.T
    Lffma = scale * (Q.float() @ Kt.float().T)
    Ltc = scale * torch.mm(Q, Kt.to(bf).T, out_dtype=torch.float32)
    print(f"{name}: flips vs ffma {flips}; kl err: logits fp64 {kl(L64) - exact:.3e}, "
          f"ffma {kl(Lffma) - exact:.3e}, tc {kl(Ltc) - exact:.3e}; max|tc-fp64 logit| {float((Ltc.double() - L64).abs().max()):.2e}")

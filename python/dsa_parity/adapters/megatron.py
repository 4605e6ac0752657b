"""Megatron-LM's own DSA functions as an exec2 worker (README "Verifying Megatron-LM").

Megatron is loaded from the checkout named by MEGATRON_PATH (megatron_loader.py: its DSA module
files, without the framework). Per case, the adapter maps the SPEC tensors onto the arguments
DSAttention.forward gives these functions for packed THD at cp = 1, and reads back their results:

    indexer      dsa.fused_qk_topk_naive (scores, top-k)            | TileLang: dsa_kernels.run_fused_qk_topk
    attention    dsa._run_sparse_attention: absorbed -> _unfused_absorbed_dsa_fn, explicit -> unfused_dsa_fn
                                                                      | TileLang: SparseMLA (absorbed only)
    loss         dsa.FusedDSAIndexerLoss (dense or sparse; its hand-written backward)
                 | streaming: dsa_kernels.run_fused_qk_topk_with_loss (tilelang_dsa's streaming sparse KL)
    backward     autograd through the attention (what Megatron relies on), the loss's own backward
    masks        dsa_masking.build_dsattention_forward_mask with PackedSeqParams(cu_seqlens_*_padded)

What Megatron does not return is observed, never recomputed by other math: O_lat is the latent
output that _run_sparse_attention projects with up_v_weight (absorbed) or unfused_dsa_fn's output
with the latent as value (explicit); per-row KL is read from the target and log-probabilities that
compute_dsa_indexer_loss hands to indexer_loss_from_target (Megatron's indexer_kl_per_row on them);
lse is the log-sum-exp of the masked logits the absorbed path hands to masked_softmax (explicit:
of the slots unfused_dsa_fn accumulates; TileLang: SparseMLA's own lse, as it is).

Environment:
    MEGATRON_PATH            a Megatron-LM checkout (or .megatron/ from tools/megatron_fetch.sh)
    DSA_MEGATRON_KERNELS     unfused (default) | streaming (the streaming sparse KL, its TileLang
                             indexer replaced by a torch stand-in when TileLang is not importable)
                             | tilelang (every fused TileLang hook; a declined hook is cannot-run)
    DSA_MEGATRON_ENTRY       functions (default: the functions above, one by one) | dsattention
                             (DSAttention.forward itself, megatron_module.py; unfused and streaming)
    DSA_MEGATRON_DTYPE       float32 (default) | bfloat16: the dtype of the tensors given to Megatron
    DSA_MEGATRON_DEVICE      cpu (default) | cuda
    DSA_MEGATRON_MAX_TOKENS  largest Tp (default 1024 on cpu, 65536 on cuda); larger: cannot-run
    DSA_MEGATRON_MAX_SCORES  largest H·Tp² of one case (default 2^26 cpu, 2^31 cuda) where a dense
                             path runs (unfused attention, the reference loss): they hold [H, Tp, Tp]
                             fp32 tensors; TileLang's absorbed path with the sparse loss does not

cp > 1 (megatron_cp.py): the case's CP ranks run as torch.distributed processes (gloo on the CPU),
each calling DSAttention.forward on its zigzag shard, so that the key gathers, rank-local causal
bounds and loss reduction across ranks are Megatron's; whichever DSA_MEGATRON_ENTRY, since
DSAttention.forward is where Megatron's CP lives. DSA_MEGATRON_CP_TIMEOUT (default 300 s) bounds
one case's ranks.

Not expressible in Megatron, declared so that those cases are cannot-run: the contiguous CP layout
(Megatron's packed CP is zigzag only), pad_rows "masked" (Megatron's attention
has no masked pad query rows), the explicit path under TileLang (SparseMLA is absorbed only).
"""

import contextlib
import os
import sys

import numpy as np
import torch

from dsa_parity.adapters import megatron_loader
from dsa_parity.worker import ALL_STAGES, Capabilities, CannotRun, serve

KERNELS = os.environ.get("DSA_MEGATRON_KERNELS", "unfused")
ENTRY = os.environ.get("DSA_MEGATRON_ENTRY", "functions")
DTYPE = os.environ.get("DSA_MEGATRON_DTYPE", "float32")
DEVICE = os.environ.get("DSA_MEGATRON_DEVICE", "cpu")
ON_GPU = DEVICE.startswith("cuda")
MAX_TOKENS = int(os.environ.get("DSA_MEGATRON_MAX_TOKENS", 65536 if ON_GPU else 1024))
MAX_SCORES = int(os.environ.get("DSA_MEGATRON_MAX_SCORES", 1 << (31 if ON_GPU else 26)))
GRAD_INPUTS = ("q_nope", "q_pe", "W_UK", "W_UV", "c", "k_pe", "q_I", "k_I", "w")
ATTENTION_GRADS = ("q_nope", "q_pe", "W_UK", "W_UV", "c", "k_pe")
INDEXER_GRADS = ("q_I", "k_I", "w")


def _short_commit():
    try:
        return megatron_loader.megatron_commit(megatron_loader.megatron_path())[:12]
    except megatron_loader.MegatronUnavailable:
        return "none"


CAPABILITIES = Capabilities(
    name="megatron@%s-%s-%s%s" % (_short_commit(), KERNELS, DTYPE, "-dsattention" if ENTRY == "dsattention" else ""),  # the commit shows in the report
    stages=ALL_STAGES,
    dtypes=["F32", "I32"],
    cp=True,  # cp > 1: megatron_cp.py (zigzag, unfused; the rest answers cannot-run with its reason)
    max_tokens=MAX_TOKENS,
    paths=["absorbed"] if KERNELS == "tilelang" else ["absorbed", "explicit"],
    layouts=["zigzag"],  # Megatron's packed CP is zigzag only
    pad_rows=["attend"],  # its attention has no masked pad query rows
)


class Config:
    """The TransformerConfig fields the DSA functions read."""

    def __init__(self, M, kv_lora_rank):
        self.kv_lora_rank = kv_lora_rank
        fused = KERNELS != "unfused"
        self.attention_backend = M.enums.AttnBackend.auto if fused else M.enums.AttnBackend.unfused
        self.dsa_kernel_backend = "tilelang" if fused else "none"


@contextlib.contextmanager
def tapped(module, name, record):
    """Replaces module.name by a wrapper that appends (args, kwargs, result) to record."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        record.append((args, kwargs, result))
        return result

    setattr(module, name, wrapper)
    try:
        yield record
    finally:
        setattr(module, name, original)


@contextlib.contextmanager
def replaced(module, name, value):
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def packed_causal_bounds(M, case, device):
    """(varlen_starts, varlen_ends, key_positions) exactly as DSAttention builds them for packed
    THD at cp = 1: causal inside each padded segment (SPEC §2, pad rows attend)."""
    cu = torch.tensor(case.layout["cu_padded"], dtype=torch.int32, device=device)
    params = M.packed_seq_params.PackedSeqParams(
        qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=cu, cu_seqlens_kv_padded=cu)
    mask, varlen, _ = M.dsa_masking.build_dsattention_forward_mask(
        sq=case.tp, skv=case.tp, b=1, device=device, cp_size=1, cp_rank=0, cp_comm_type="allgather",
        cp_group=None, attn_mask_type=M.enums.AttnMaskType.causal, attention_mask=None,
        position_ids=None, packed_seq_params=params)
    assert mask is None and varlen is not None
    return varlen


def indexer_topk(M, cfg, case, x, bounds):
    """Indexer scores I (SPEC §3, None under TileLang) and the top-k (§4), [Tp, K']."""
    q, k, w = x["q_I"][:, None], x["k_I"][:, None], x["w"][:, None]
    if KERNELS == "tilelang":
        starts, ends = fused_bounds(M, case, bounds)
        r = M.dsa_kernels.run_fused_qk_topk(cfg, q, k, w, case.topk, starts, ends, block_size=8192,
                                            use_relu=case.relu)
        if r is None:
            raise CannotRun("Megatron's TileLang indexer declined this case (run_fused_qk_topk)")
        return None, r[0][0].to(torch.int64)
    with torch.no_grad():
        scores, topk = M.dsa.fused_qk_topk_naive(q, k, w, case.topk, varlen_starts=bounds[0],
                                                 varlen_ends=bounds[1], key_positions=bounds[2],
                                                 use_relu=case.relu)
    return scores[0], topk[0]


def fused_bounds(M, case, bounds):
    return M.dsa_masking.build_fused_indexer_varlen_bounds(
        sq=case.tp, skv=case.tp, device=bounds[0].device, mask=None, varlen_starts=bounds[0],
        varlen_ends=bounds[1], key_positions=bounds[2])


def absorbed_query_key(x):
    """Q~ = [q_nope·W_UK ; q_pe] and K~ = [c ; k_pe] (SPEC §5), in DSAttention's absorbed layout
    [sq, b, H, C+R] and [skv, b, 1, C+R]: MultiLatentAttention's absorbed rewrite (absorbed_mla.py)."""
    q = torch.cat([torch.einsum("ghn,hnc->ghc", x["q_nope"], x["W_UK"]), x["q_pe"]], dim=-1)
    k = torch.cat([x["c"], x["k_pe"]], dim=-1)
    return q[:, None], k[:, None, None]


def explicit_query_key_value(x):
    """Per-head q = [q_nope ; q_pe], k = [W_UK·c ; k_pe], v = W_UV·c (SPEC §5 explicit), [s, b, H, d]."""
    H = x["q_nope"].shape[1]
    q = torch.cat([x["q_nope"], x["q_pe"]], dim=-1)
    k_nope = torch.einsum("tc,hnc->thn", x["c"], x["W_UK"])
    k = torch.cat([k_nope, x["k_pe"][:, None, :].expand(-1, H, -1)], dim=-1)
    v = torch.einsum("tc,hvc->thv", x["c"], x["W_UV"])
    return q[:, None], k[:, None], v[:, None]


def lse_of_masked_logits(scores, valid):
    """Natural log-sum-exp over the valid entries (−inf where none): Megatron does not return it."""
    return torch.logsumexp(scores.detach().float().masked_fill(~valid, float("-inf")), dim=-1)


def sparse_attention(M, cfg, case, x, index, bounds):
    """O [Tp, H, Dv], O_lat [Tp, H, C], lse [Tp, H] through _run_sparse_attention."""
    H, Dv, C = x["W_UV"].shape
    common = dict(topk_indices=index[None], softmax_scale=case.softmax_scale, config=cfg, mask=None,
                  varlen_starts=bounds[0], varlen_ends=bounds[1], key_positions=bounds[2])
    if case.path == "absorbed":
        query, key = absorbed_query_key(x)
        latent, softmaxes, kernels, fused = [], [], [], []
        with tapped(M.dsa, "_unfused_absorbed_dsa_fn", latent), \
                tapped(M.dsa_masking, "masked_softmax", softmaxes), \
                tapped(M.dsa_kernels, "run_fused_absorbed_sparse_attention", fused), \
                sparse_mla_tap(M, kernels):
            out = M.dsa._run_sparse_attention(absorbed_mla=True, query=query, key=key, value=None,
                                              up_v_weight=x["W_UV"], **common)
        O_lat, lse = absorbed_observations(H, latent, softmaxes, fused, kernels)
        return out.reshape(case.tp, H, Dv), O_lat, lse, query
    query, key, value = explicit_query_key_value(x)
    out = M.dsa._run_sparse_attention(absorbed_mla=False, query=query, key=key, value=value,
                                      up_v_weight=None, **common)
    latent = x["c"][:, None, None, :]  # the same attention with V~ = c: SPEC's O_lat
    O_lat = M.dsa._run_sparse_attention(absorbed_mla=False, query=query, key=key, value=latent,
                                        up_v_weight=None, **common)
    lse = explicit_slot_lse(case, query, key, index, bounds)
    return out.reshape(case.tp, H, Dv), O_lat.reshape(case.tp, H, C), lse, query


def absorbed_observations(H, latent, softmaxes, fused, kernels):
    """O_lat and lse of the absorbed attention that ran: SparseMLA's (TileLang; its lse as it is)
    when the fused hook answered, else _unfused_absorbed_dsa_fn's output and masked scores."""
    if fused and fused[-1][2] is not None:
        return fused[-1][2][:, 0], kernels[-1][2][1][0, :, :H].float()
    if KERNELS == "tilelang":
        raise CannotRun("Megatron's TileLang SparseMLA declined this case (run_fused_absorbed_sparse_attention)")
    (scores, valid), _, _ = softmaxes[-1]  # the attention's: any loss softmax runs before it
    return latent[-1][2][:, 0], lse_of_masked_logits(scores, valid)[0].transpose(0, 1)


def explicit_slot_lse(case, query, key, index, bounds):
    """The lse of the slots unfused_dsa_fn accumulates: index ≥ 0, clamped to [0, Tp−1], kept
    where the varlen bounds admit the clamped key (a repeated key counts each time, as there)."""
    idx = index.clamp(min=0, max=case.tp - 1)
    starts, ends = bounds[0][:, None], bounds[1][:, None]
    valid = (index >= 0) & (idx >= starts) & (idx < ends)
    q, k = query[:, 0].detach().float(), key[:, 0].detach().float()  # [Tp, H, d]
    logits = torch.einsum("ghd,gkhd->ghk", q, k[idx]) * case.softmax_scale
    return lse_of_masked_logits(logits, valid[:, None, :].expand_as(logits))


@contextlib.contextmanager
def sparse_mla_tap(M, record):
    """Records SparseMLA.apply's (out, lse) inside tilelang_dsa (where TileLang imports)."""
    ops = M.tilelang_dsa
    if ops is None or ops.SparseMLA is None:
        yield record
        return
    real = ops.SparseMLA

    class Tapped:
        @staticmethod
        def apply(*args):
            result = real.apply(*args)
            record.append((args, {}, result))
            return result

    with replaced(ops, "SparseMLA", Tapped):
        yield record


def kl_rows_tap(M, record):
    """Per-row KL from the target and log-probabilities compute_dsa_indexer_loss reduces."""
    loss_mod = M.dsa_indexer_loss
    original = loss_mod.indexer_loss_from_target

    def wrapper(target, predict_log_probs, loss_coeff, query_valid_rows=None, calculate_per_token_loss=False,
                valid_mask=None):
        with torch.no_grad():
            record.append(loss_mod.indexer_kl_per_row(target, predict_log_probs, valid_mask))
        return original(target, predict_log_probs, loss_coeff, query_valid_rows=query_valid_rows,
                        calculate_per_token_loss=calculate_per_token_loss, valid_mask=valid_mask)

    return replaced(loss_mod, "indexer_loss_from_target", wrapper)


def attention_query_key_for_loss(query, x, case):
    """The query and key DSAttention gives the loss: the attention's own, the absorbed MQA key
    expanded to every head (compute_indexer_loss_with_reference_path)."""
    if case.path == "absorbed":
        _, key = absorbed_query_key(x)
        return query.detach(), key.detach().expand(-1, -1, query.size(2), -1)
    _, key, _ = explicit_query_key_value(x)
    return query.detach(), key.detach()


def indexer_loss_reference(M, case, x, query, key, index, injected, bounds):
    """FusedDSAIndexerLoss (dense or sparse): loss, per-row KL, and its backward's dq_I, dk_I, dw."""
    pg = M.ProcessGroupCollection()
    q, k, w = x["q_I"][:, None], x["k_I"][:, None], x["w"][:, None]
    naive = M.dsa.fused_qk_topk_naive

    def with_injected_topk(*args, **kwargs):  # the loss's support is the case's injected rows
        scores, _ = naive(*args, **kwargs)
        return scores, index[None]

    rows = []
    hook = replaced(M.dsa, "fused_qk_topk_naive", with_injected_topk) if injected else contextlib.nullcontext()
    with hook, kl_rows_tap(M, rows):
        _, loss = M.dsa.FusedDSAIndexerLoss.apply(
            q, w, k, query, key, case.softmax_scale, case.topk, case.coeff, None, case.loss_mode == "sparse",
            pg, bounds[0], bounds[1], bounds[2], None, False, case.relu)
    return loss, rows[0][0]


def indexer_loss_streaming(M, cfg, case, x, query, key, bounds):
    """Megatron's streaming sparse KL (tilelang_dsa.fused_qk_topk_lighting_with_streaming_sparse_kl,
    through the dsa_kernels hook DSAttention calls): top-k, loss, and the per-row KL of the chunks."""
    starts, ends = fused_bounds(M, case, bounds)
    q, k, w = x["q_I"][:, None], x["k_I"][:, None], x["w"][:, None]
    rows = []
    with standin_indexer(M), kl_chunk_rows_tap(M, rows):
        r = M.dsa_kernels.run_fused_qk_topk_with_loss(
            cfg, q, k, w, case.topk, starts, ends, block_size=8192, query=query,
            key=key[:, :, :1] if case.path == "absorbed" else key, softmax_scale=case.softmax_scale,
            loss_coeff=case.coeff, pg_collection=M.ProcessGroupCollection(), use_relu=case.relu)
    if r is None:
        raise CannotRun("Megatron's streaming sparse KL declined this case (it needs bf16 indexer "
                        "tensors and an indexer head count <= 64 divisible by 8)")
    topk, _, loss = r
    return topk[0].to(torch.int64), loss, torch.cat(rows)


def kl_chunk_rows_tap(M, rows):
    """Per-row KL of each chunk the streaming loop accumulates (_accumulate_topk_kl_chunk), by
    Megatron's own torch branch of that function: normalize_indexer_target, masked_log_softmax,
    indexer_kl_per_row (the fused TileLang KL kernel, where it runs instead, returns only the sum)."""
    ops, loss_mod = M.tilelang_dsa, M.dsa_indexer_loss
    original = ops._accumulate_topk_kl_chunk

    def wrapper(*, target_chunk, index_logits_chunk, valid_seq, kl_sum):
        with torch.no_grad():  # before the call: the torch branch normalizes target_chunk in place
            target = loss_mod.normalize_indexer_target(target_chunk.float())
            log_q = M.dsa_masking.masked_log_softmax(index_logits_chunk.detach().float(), valid_seq)
            rows.append(loss_mod.indexer_kl_per_row(target, log_q, valid_seq))
        return original(target_chunk=target_chunk, index_logits_chunk=index_logits_chunk,
                        valid_seq=valid_seq, kl_sum=kl_sum)

    return replaced(ops, "_accumulate_topk_kl_chunk", wrapper)


@contextlib.contextmanager
def standin_indexer(M):
    """Without TileLang, tilelang_dsa's lighting_indexer kernel is None and the streaming path
    declines; this stand-in gives it the same (scores, indices) from Megatron's torch pieces:
    _compute_index_scores, the [ks, ke) bounds, _select_topk_from_logits, pytorch_extract_topk_scores."""
    ops = M.tilelang_dsa
    if ops is None or ops.lighting_indexer is not None or KERNELS != "streaming":
        yield
        return

    def lighting_indexer(index_q, index_k, weights, ks, ke, topk, topk_indices=None, use_relu=True):
        scores = M.dsa._compute_index_scores(index_q[:, None], weights[:, None], index_k[:, None], use_relu)
        keys = torch.arange(index_k.size(0), device=index_k.device)
        scores = M.dsa_masking.apply_starts_ends_mask_to_scores(scores, ks, ke, keys)[0]
        _, idx = M.ops_indexer._select_topk_from_logits(scores, topk)
        return M.ops_indexer.pytorch_extract_topk_scores(scores, idx), idx

    with replaced(ops, "lighting_indexer", lighting_indexer):
        yield


def check_case(case):
    if case.pad_rows != "attend":
        raise CannotRun("Megatron's attention has no masked pad query rows: pad rows attend (pad_rows: attend)")
    H = case.dims["H"]
    dense = KERNELS != "tilelang" or case.path == "explicit" or case.loss_mode == "dense"
    if dense and H * case.tp * case.tp > MAX_SCORES:
        raise CannotRun("Megatron's unfused DSA holds [H, Tp, Tp] tensors: H·Tp² = %d > %d "
                        "(DSA_MEGATRON_MAX_SCORES)" % (H * case.tp * case.tp, MAX_SCORES))
    if KERNELS == "tilelang" and not (ON_GPU and tilelang_available()):
        raise CannotRun("DSA_MEGATRON_KERNELS=tilelang needs TileLang importable and a CUDA device")
    if KERNELS == "streaming" and DTYPE != "bfloat16":
        raise CannotRun("Megatron's streaming sparse KL runs on bf16 indexer tensors only (DSA_MEGATRON_DTYPE=bfloat16)")


def tilelang_available():
    M = megatron_loader.load()
    return M.tilelang_utils is not None and bool(M.tilelang_utils.HAVE_TILELANG)


def to_tensors(inputs):
    dtype = getattr(torch, DTYPE)
    x = {}
    for n, a in inputs.items():
        t = torch.from_numpy(np.ascontiguousarray(a)).to(DEVICE)
        x[n] = t if n == "indices" else t.to(dtype).requires_grad_(n in GRAD_INPUTS)
    return x


def gradients(output, wrt, x):
    g = torch.autograd.grad(output, [x[n] for n in wrt], allow_unused=True, retain_graph=True)
    return {"d" + n: (torch.zeros_like(x[n]) if v is None else v) for n, v in zip(wrt, g)}


def run(case, inputs):
    check_case(case)
    try:
        M = megatron_loader.load()
    except megatron_loader.MegatronUnavailable as e:
        raise CannotRun(str(e))
    x = to_tensors(inputs)
    cfg = Config(M, case.dims["C"])
    want = set(case.stages)
    bounds = packed_causal_bounds(M, case, x["c"].device)
    injected = "indices" in x
    streaming = KERNELS != "unfused" and case.loss_mode == "sparse"
    out = {}

    scores, topk = indexer_topk(M, cfg, case, x, bounds)
    stream = None
    if streaming:
        # The streaming loss picks its own top-k; that top-k is then the attention's (DSAttention).
        if injected:
            raise CannotRun("the streaming sparse KL selects its own top-k: injected indices cannot be given to it")
        query0 = absorbed_query_key(x)[0] if case.path == "absorbed" else explicit_query_key_value(x)[0]
        q_loss, k_loss = attention_query_key_for_loss(query0, x, case)
        stream = indexer_loss_streaming(M, cfg, case, x, q_loss, k_loss, bounds)
        topk = stream[0]
    if "indexer" in want:
        if scores is not None and not streaming:
            out["scores"] = scores
        out["topk"] = topk
    index = x["indices"] if injected else topk

    O, O_lat, lse, query = sparse_attention(M, cfg, case, x, index, bounds)
    if "attention" in want:
        out.update(O=O, O_lat=O_lat, lse=lse)
    if "attention_backward" in want:
        out.update(gradients((O.float() * x["dO"].float()).sum(), ATTENTION_GRADS, x))

    if case.loss_mode == "off":
        out.update(kl=torch.zeros(case.tp), loss=torch.zeros(1))
        out.update({"d" + n: torch.zeros_like(x[n]) for n in INDEXER_GRADS})
    elif {"loss", "loss_backward"} & want:
        q_loss, k_loss = attention_query_key_for_loss(query, x, case)
        if stream is not None:
            loss, kl = stream[1], stream[2]
        else:
            loss, kl = indexer_loss_reference(M, case, x, q_loss, k_loss, index, injected, bounds)
        out.update(kl=kl[0] if kl.dim() == 2 else kl, loss=loss.reshape(1))
        if "loss_backward" in want:
            out.update(gradients(loss, INDEXER_GRADS, x))
    return as_outputs(out, want)


def as_outputs(out, want):
    """The tensors of the case's stages as numpy arrays (floats exact in F32: bf16 or fp32 values)."""
    keep = want_names(want)
    return {n: (v.detach().to(torch.int64) if n == "topk" else v.detach().float()).cpu().numpy()
            for n, v in out.items() if n in keep}


def run_guarded(case, inputs):
    """run(), except that a CUDA error (e.g. the device-side assert of an out-of-bounds scatter,
    D1 of docs/megatron-parity.md) ends the worker: the context is unusable after it, so the case
    is a crash and the harness starts a fresh worker for the next case."""
    try:
        if case.cp > 1:
            from dsa_parity.adapters import megatron_cp
            check_case(case)
            if KERNELS == "tilelang":
                raise CannotRun("cp > 1 drives DSAttention.forward, unfused kernels only")
            return megatron_cp.run(case, inputs)
        if ENTRY == "dsattention":
            from dsa_parity.adapters import megatron_module
            return as_outputs(megatron_module.run(case, inputs), set(case.stages))
        return run(case, inputs)
    except megatron_loader.MegatronUnavailable as e:
        raise CannotRun(str(e))
    except torch.cuda.OutOfMemoryError as e:
        # The unfused paths hold [H, Tp, Tp] tensors; a case past the device's memory cannot run
        # here (neither pass nor fail). The allocator recovers, so the worker goes on.
        torch.cuda.empty_cache()
        raise CannotRun("out of device memory (H*Tp^2 = %d; lower DSA_MEGATRON_MAX_SCORES): %s"
                        % (case.dims["H"] * case.tp * case.tp, str(e).splitlines()[0][:200]))
    except RuntimeError as e:
        if ON_GPU and ("CUDA error" in str(e) or "device-side assert" in str(e)):
            print("megatron adapter: CUDA error, exiting so that the next case gets a fresh worker: %s" % e,
                  file=sys.stderr)
            sys.stderr.flush()
            os._exit(70)
        raise
    finally:
        if ON_GPU:
            # The harness's GPU oracle shares the device: hand back what torch's allocator keeps
            # cached (seen on the H200: after an [H, Tp, Tp] case the oracle found no memory left).
            torch.cuda.empty_cache()


def want_names(want):
    stage_of = {"scores": "indexer", "topk": "indexer", "O": "attention", "O_lat": "attention", "lse": "attention",
                "kl": "loss", "loss": "loss"}
    stage_of.update({"d" + n: "attention_backward" for n in ATTENTION_GRADS})
    stage_of.update({"d" + n: "loss_backward" for n in INDEXER_GRADS})
    return {n for n, s in stage_of.items() if s in want}


def main():
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    try:
        M = megatron_loader.load()
        print("megatron adapter: Megatron-LM %s from %s, kernels %s, dtype %s, device %s"
              % (M.commit, M.path, KERNELS, DTYPE, DEVICE), file=sys.stderr)
    except megatron_loader.MegatronUnavailable as e:
        print("megatron adapter: %s (every case is cannot-run)" % e, file=sys.stderr)
    return serve(run_guarded, CAPABILITIES)


if __name__ == "__main__":
    sys.exit(main())

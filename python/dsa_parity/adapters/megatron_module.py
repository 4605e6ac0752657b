"""DSAttention.forward itself (DSA_MEGATRON_ENTRY=dsattention): the orchestration of Megatron's
PR #3674 on top of the functions megatron.py calls one by one (packed THD masks, which query and
key reach the loss, fused-hook fallbacks, the loss attached to the output by
DSAIndexerLossAutoScaler, one backward for everything).

At cp > 1 megatron_cp.py calls run_rank() in each CP rank process with the CP group.

DSAttention is built by its own constructor. Its indexer module (projections, RoPE, LayerNorm,
Hadamard from hidden states: outside SPEC's core) is replaced by a stand-in whose
forward_before_topk returns the case's q_I, k_I and w; the loss tracker (training-loop logging,
needs CUDA) records the loss instead. Everything else is Megatron's.
"""

import contextlib
import types

import torch

from dsa_parity.adapters import megatron as A
from dsa_parity.worker import CannotRun


class IndexerInputs:
    """DSAIndexer's forward_before_topk contract: (q [s,b,HI,DI], k [s,b,DI], weights [s,b,HI])."""

    def __init__(self, x):
        self.qkw = (x["q_I"][:, None], x["k_I"][:, None], x["w"][:, None])

    def forward_before_topk(self, x, qr, packed_seq_params=None):
        return self.qkw


class ModuleConfig(A.Config):
    """The TransformerConfig fields DSAttention reads (tp = 1, no sequence parallelism; cp from the
    group run_rank is given; the loss a mean over rows: calculate_per_token_loss off)."""

    def __init__(self, M, case):
        super().__init__(M, case.dims["C"])
        self.qk_pos_emb_head_dim = case.dims["R"]
        self.dsa_indexer_topk = case.topk
        self.dsa_indexer_topk_freq = 1
        self.dsa_indexer_skip_topk_offset = 0
        self.dsa_indexer_loss_coeff = case.coeff if case.loss_mode != "off" else 0.0
        self.dsa_indexer_use_sparse_loss = case.loss_mode == "sparse"
        self.dsa_indexer_scoring_relu = case.relu
        self.calculate_per_token_loss = False
        self.sequence_parallel = False
        self.num_layers = 1


def dsattention(M, case, x, cp_group=None):
    cfg = ModuleConfig(M, case)
    with A.replaced(M.dsa, "build_module", lambda *a, **k: IndexerInputs(x)):
        return M.dsa.DSAttention(cfg, types.SimpleNamespace(indexer=None), layer_number=1,
                                 attn_mask_type=M.enums.AttnMaskType.causal, attention_type="self",
                                 softmax_scale=case.softmax_scale, cp_comm_type="allgather",
                                 pg_collection=M.ProcessGroupCollection(cp=cp_group))


def run(case, inputs):
    A.check_case(case)
    if A.KERNELS == "tilelang":
        raise CannotRun("DSA_MEGATRON_ENTRY=dsattention drives the unfused and streaming paths only")
    M = A.megatron_loader.load()
    res = run_rank(M, case, A.to_tensors(inputs))
    res.pop("loss_groups")
    return res


def run_rank(M, case, x, cp_group=None):
    """DSAttention.forward on this rank's rows x (all of them at cp = 1; at cp > 1 the rank's
    shard in Megatron's zigzag order, Megatron gathering the keys over cp_group). Returns the rank's
    rows of every output, its loss as DSAttention computed it, and the (reduce_group, avg_group)
    DSAttention handed to the loss tracker (megatron_cp.py reduces the loss with them)."""
    cp = 1 if cp_group is None else cp_group.size()
    sq = x["c"].shape[0]
    cu = torch.tensor(case.layout["cu_padded"], dtype=torch.int32, device=x["c"].device)
    params = M.packed_seq_params.PackedSeqParams(
        qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, cu_seqlens_q_padded=cu, cu_seqlens_kv_padded=cu)
    if case.path == "absorbed":
        query, key = A.absorbed_query_key(x)
        value, up_v = None, x["W_UV"]
    else:
        query, key, value = A.explicit_query_key_value(x)
        up_v = None
    hidden = torch.zeros((sq, 1, 1), dtype=query.dtype, device=query.device)  # only its size is read
    injected = x.get("indices")
    topks, losses, rows, latent, softmaxes, chunks, fused, attn, kernels, sparse = [], [], [], [], [], [], [], [], [], []
    naive = M.dsa.fused_qk_topk_naive

    def indexer(*args, **kwargs):  # Megatron's top-k (recorded), the case's injected rows in its place
        scores, topk = naive(*args, **kwargs)
        topks.append(topk)
        return scores, topk if injected is None else injected[None]

    def tracker(loss, *args, **kwargs):
        losses.append((loss, kwargs.get("reduce_group"), kwargs.get("avg_group")))

    streaming = A.KERNELS == "streaming" and case.loss_mode == "sparse"
    if streaming and injected is not None:
        raise CannotRun("the streaming sparse KL selects its own top-k: injected indices cannot be given to it")
    module = dsattention(M, case, x, cp_group)
    with contextlib.ExitStack() as stack:
        stack.enter_context(A.replaced(M.dsa, "fused_qk_topk_naive", indexer))
        stack.enter_context(A.replaced(M.dsa.DSAIndexerLossLoggingHelper, "save_loss_to_tracker", tracker))
        stack.enter_context(A.kl_rows_tap(M, rows))
        stack.enter_context(A.tapped(M.dsa, "_unfused_absorbed_dsa_fn", latent))
        stack.enter_context(A.tapped(M.dsa_masking, "masked_softmax", softmaxes))
        stack.enter_context(A.tapped(M.dsa_kernels, "run_fused_qk_topk_with_loss", fused))
        stack.enter_context(A.standin_indexer(M))
        stack.enter_context(A.kl_chunk_rows_tap(M, chunks))
        stack.enter_context(A.tapped(M.dsa_kernels, "run_fused_absorbed_sparse_attention", attn))
        stack.enter_context(A.sparse_mla_tap(M, kernels))
        stack.enter_context(A.tapped(M.dsa, "_run_sparse_attention", sparse))
        out = module(query, key, value, None, hidden, hidden, attn_mask_type=M.enums.AttnMaskType.causal,
                     packed_seq_params=params, up_v_weight=up_v)
        n_softmax = len(softmaxes)
    streamed = bool(fused) and fused[-1][2] is not None
    if streaming and not streamed:
        raise CannotRun("DSAttention fell back from the streaming sparse KL for this case "
                        "(it needs bf16 indexer tensors and an indexer head count <= 64 divisible by 8)")
    H, Dv, C = x["W_UV"].shape
    topk = fused[-1][2][0][0].to(torch.int64) if streamed else topks[0][0]
    res = {"O": out.reshape(sq, H, Dv), "topk": topk}
    if case.path == "absorbed":
        res["O_lat"], res["lse"] = A.absorbed_observations(H, latent, softmaxes[:n_softmax], attn, kernels)
    else:  # outside DSAttention: the same function with the latent as value, and the slots' lse, on
        # the (gathered, reordered) key and the rank-local bounds DSAttention gave the attention
        kw = sparse[-1][1]
        index = injected if injected is not None else topk
        c = x["c"][:, None, None, :]
        if cp > 1:  # the latent in global order, by the same gather and reorder as DSAttention's keys
            _, reorder = M.dsa_layout.build_packed_allgather_cp_query_positions_and_key_reorder(
                cu_seqlens_q=cu, cu_seqlens_kv=cu, cp_size=cp, cp_rank=cp_group.rank(), device=c.device,
                local_output_size=sq, key_local_output_size=sq, global_output_size=sq * cp)
            c = M.mappings.gather_from_sequence_parallel_region(c, group=cp_group).index_select(0, reorder)
        res["O_lat"] = M.dsa.unfused_dsa_fn(kw["query"], kw["key"], c, index[None], case.softmax_scale,
                                            varlen_starts=kw["varlen_starts"],
                                            varlen_ends=kw["varlen_ends"]).reshape(sq, H, C)
        res["lse"] = A.explicit_slot_lse(case, kw["query"], kw["key"], index,
                                         (kw["varlen_starts"], kw["varlen_ends"]))
    res.update(A.gradients((res["O"].float() * x["dO"].float()).sum(), A.ATTENTION_GRADS + A.INDEXER_GRADS, x))
    if case.loss_mode == "off":
        res.update(kl=torch.zeros(sq), loss=torch.zeros(1), loss_groups=(None, None))
    else:
        res.update(kl=torch.cat(chunks) if streamed else rows[0][0], loss=losses[0][0].reshape(1),
                   loss_groups=losses[0][1:])
    return res

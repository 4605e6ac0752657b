"""cp > 1 as Megatron does it: the case's CP ranks as torch.distributed processes, each running
DSAttention.forward (megatron_module.run_rank) on its own shard, so that the CP part is
Megatron's own: the allgather of the keys and indexer keys (tensor_parallel/mappings.py
gather_from_sequence_parallel_region, whose backward is the reduce-scatter that sums the key
gradients), the key reorder and rank-local query positions (dsa_layout
build_packed_allgather_cp_query_positions_and_key_reorder), the rank-local causal bounds
(dsa_masking.build_dsattention_forward_mask with cp_size, cp_rank), and the per-rank loss
(indexer_loss_from_target over the rank's rows).

Per case the worker forks cp rank processes (fork on a CPU worker: they inherit the loaded Megatron
modules and the inputs; from a forkserver once the worker has used CUDA, see _rank_context) joined in a gloo process group through a file store in a fresh folder (CPU; and on
CUDA when the machine has fewer GPUs than ranks: the ranks then share cuda:0 and gloo moves the
gathers through the host), or NCCL with one GPU per rank (DSA_MEGATRON_DEVICE=cuda and
cp <= device count). Rank r holds the rows layout.rank_rows[r] (SPEC §1 zigzag; Megatron's own
helper must agree, else the harness reports the mismatch), the weights W_UK, W_UV whole. The
worker waits for every rank's answer, at most DSA_MEGATRON_CP_TIMEOUT seconds (default 300; the
gloo group's own timeout is the same); a rank that dies, fails or runs past it ends the case as an
error naming the rank, and every rank process is killed and reaped before run() returns. A rank
also dies with the worker (PR_SET_PDEATHSIG), so none outlives it.

The outputs are assembled in the harness's global row order: per-row tensors from each rank's
rows, dW_UK and dW_UV summed over the ranks (each rank's contribution through its rows; the sum
is what Megatron's data-parallel gradient reduction over the CP ranks makes of them, see below).

The loss and its gradient across ranks, as Megatron's training loop has them:

  * value: DSAttention hands each rank's loss L_r = coeff · Σ_{g on r} KL[g] / (rows of r) to
    DSAIndexerLossLoggingHelper.save_loss_to_tracker with avg_group = the CP group (dsa.py:1938,
    not per-token loss); reduce_loss_in_tracker then all-reduces it with ReduceOp.AVG over that
    group (dsa.py:328-331). reduce_across_ranks() below does exactly that reduction (gloo has no
    AVG: SUM then / cp) on the groups DSAttention passed; the pipeline and data-parallel reductions
    of the same function are over one rank here.
  * gradient: the schedule sets DSAIndexerLossAutoScaler's backward scale to
    loss_scale · cp / num_microbatches (pipeline_parallel/schedules.py:394-397) and the DDP
    wrapper scales every non-expert gradient by 1 / (dp · cp) (distributed_data_parallel.py:274-278);
    with dp = 1, one microbatch and no loss scaling these cancel, so each rank backpropagates its
    own L_r with scale 1 (set explicitly below) next to its rows of dO.
"""

import ctypes
import datetime
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback

import numpy as np
import torch

from dsa_parity.adapters import megatron as A
from dsa_parity.worker import CannotRun

TIMEOUT = float(os.environ.get("DSA_MEGATRON_CP_TIMEOUT", 300))
# Where the ranks' tensors live: auto (the worker's DSA_MEGATRON_DEVICE) or cpu (gloo on the host
# even for a CUDA worker; what reports/device/device-run.sh uses until the GPU CP path has run).
CP_DEVICE = os.environ.get("DSA_MEGATRON_CP_DEVICE", "auto")
# Ranks on the CPU keep the CPU limits even under a CUDA worker (its limits are the GPU's).
CPU_MAX_TOKENS = int(os.environ.get("DSA_MEGATRON_CP_CPU_MAX_TOKENS", 1024))
CPU_MAX_SCORES = int(os.environ.get("DSA_MEGATRON_CP_CPU_MAX_SCORES", 1 << 26))
ROW_INPUTS = ("q_nope", "q_pe", "c", "k_pe", "q_I", "k_I", "w", "dO", "indices")
WEIGHTS = ("W_UK", "W_UV")
SUMMED = ("dW_UK", "dW_UV")
# A test hook: DSA_MEGATRON_CP_FAULT=die:R makes rank R exit abruptly before its forward, hang:R
# makes it sleep there (a rank that dies or hangs must end the case as an error, never a hang).
FAULT = os.environ.get("DSA_MEGATRON_CP_FAULT", "")


def check(case):
    """cannot-run, with the reason, for what Megatron's CP cannot express or this adapter does not drive."""
    M = A.megatron_loader.load()
    if case.layout.get("layout") != "zigzag":
        raise CannotRun("Megatron's DSA allgather CP shards packed THD zigzag only "
                        "(dsa_layout.build_packed_allgather_cp_local_positions): layout %r is not expressible"
                        % case.layout.get("layout"))
    if M.mappings is None:
        raise CannotRun("the Megatron checkout has no megatron/core/tensor_parallel/mappings.py "
                        "(its CP gathers): re-run tools/megatron_fetch.sh")
    if A.KERNELS != "unfused":
        raise CannotRun("cp > 1 drives DSAttention.forward with the unfused kernels only "
                        "(DSA_MEGATRON_KERNELS=%s under CP is not driven)" % A.KERNELS)
    if not (A.ON_GPU and CP_DEVICE != "cpu"):
        scores = case.dims["H"] * case.tp * case.tp
        if case.tp > CPU_MAX_TOKENS or scores > CPU_MAX_SCORES:
            raise CannotRun("CP ranks on the CPU take Tp <= %d and H*Tp^2 <= %d (DSA_MEGATRON_CP_CPU_MAX_TOKENS, "
                            "_MAX_SCORES): Tp %d, H*Tp^2 %d" % (CPU_MAX_TOKENS, CPU_MAX_SCORES, case.tp, scores))


def backend_for(cp):
    """(torch.distributed backend, device of rank r)."""
    if A.ON_GPU and CP_DEVICE != "cpu":
        if torch.cuda.device_count() >= cp:
            return "nccl", lambda r: "cuda:%d" % r
        return "gloo", lambda r: A.DEVICE
    return "gloo", lambda r: "cpu"


def reduce_across_ranks(loss, reduce_group, avg_group):
    """reduce_loss_in_tracker's reduction (dsa.py:314-337) of this rank's loss over the groups
    DSAttention passed to save_loss_to_tracker: SUM over reduce_group, AVG over avg_group."""
    values = loss.detach().clone().float()
    if reduce_group is not None:
        torch.distributed.all_reduce(values, group=reduce_group)
    if avg_group is not None:
        torch.distributed.all_reduce(values, group=avg_group)  # ReduceOp.AVG = SUM / size (gloo has no AVG)
        values /= avg_group.size()
    return values


def _die_with_parent():
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _rank_main(rank, cp, store, case, inputs, conn, fault):
    _die_with_parent()
    os.dup2(2, 1)  # fd 1 is the worker's protocol pipe: nothing of a rank may reach it
    sys.stdout = sys.stderr
    try:
        torch.set_num_threads(1)
        backend, device_of = backend_for(cp)
        device = device_of(rank)
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        torch.distributed.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=cp,
                                             timeout=datetime.timedelta(seconds=TIMEOUT))
        group = torch.distributed.new_group(list(range(cp)), backend=backend)
        M = A.megatron_loader.load()
        if backend == "gloo":
            A.megatron_loader.cp_shims(M, device)
        if fault == "die:%d" % rank:
            os._exit(9)
        if fault == "hang:%d" % rank:
            time.sleep(1e6)
        rows = np.asarray(case.layout["rank_rows"][rank], dtype=np.int64)
        local = {n: (inputs[n][rows] if n in ROW_INPUTS else inputs[n]) for n in ROW_INPUTS + WEIGHTS if n in inputs}
        saved = A.DEVICE
        A.DEVICE = device
        try:
            x = A.to_tensors(local)
        finally:
            A.DEVICE = saved
        from dsa_parity.adapters import megatron_module
        M.dsa.DSAIndexerLossAutoScaler.set_loss_scale(torch.tensor(1.0, device=device))  # see the top
        res = megatron_module.run_rank(M, case, x, group)
        loss_groups = res.pop("loss_groups")
        if case.loss_mode != "off":
            res["loss"] = reduce_across_ranks(res["loss"], *loss_groups).reshape(1)
        conn.send(("ok", A.as_outputs(res, set(case.stages))))
        torch.distributed.destroy_process_group()
    except BaseException as e:  # noqa: B902 - everything goes back to the worker as the rank's error
        try:
            conn.send(("error", "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()[-3000:])))
        except Exception:
            pass
    finally:
        conn.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def _stop(procs):
    for p in procs:
        if p.is_alive():
            p.kill()
    for p in procs:
        p.join(10)


def _rank_context(on_gpu):
    """How rank processes start. fork on a CPU worker: the ranks inherit the loaded modules (fast).
    Not once the worker has used CUDA: a CUDA context cannot be forked, and after a backward on the
    GPU autograd's device threads make a forked child's backward fail ("Unable to handle autograd's
    threading in combination with fork", seen on the H200 with the ranks on the host CPU). Then
    forkserver: a clean server process, started once with this module preloaded, forks the ranks."""
    start = os.environ.get("DSA_MEGATRON_CP_START", "auto")  # fork | forkserver | auto (the tests force one)
    if start == "fork" or (start == "auto" and not (on_gpu or A.ON_GPU)):
        return multiprocessing.get_context("fork")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def run(case, inputs):
    """The case's outputs in global row order, from cp rank processes running DSAttention.forward."""
    check(case)
    cp = case.cp
    on_gpu = A.ON_GPU and CP_DEVICE != "cpu"
    if on_gpu and backend_for(cp)[0] == "gloo" and os.environ.get("DSA_MEGATRON_CP_SHARE_GPU", "1") != "1":
        raise CannotRun("cp = %d needs %d GPUs for NCCL; this machine has %d (DSA_MEGATRON_CP_SHARE_GPU=1 "
                        "runs the ranks on one GPU over gloo)" % (cp, cp, torch.cuda.device_count()))
    ctx = _rank_context(on_gpu)
    folder = tempfile.mkdtemp(prefix="dsa-megatron-cp-")
    procs, conns = [], []
    answers = {}
    try:
        for r in range(cp):
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_rank_main, args=(r, cp, os.path.join(folder, "store"), case, inputs, send, FAULT),
                            daemon=True)
            p.start()
            send.close()
            procs.append(p)
            conns.append(recv)
        deadline = time.monotonic() + TIMEOUT
        pending = dict(enumerate(conns))
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("Megatron CP rank(s) %s gave no answer within %g s (DSA_MEGATRON_CP_TIMEOUT)"
                                   % (sorted(pending), TIMEOUT))
            ready = multiprocessing.connection.wait(list(pending.values()), timeout=min(left, 1.0))
            for r, c in list(pending.items()):
                if c in ready:
                    try:
                        answers[r] = c.recv()
                    except EOFError:
                        procs[r].join(5)
                        raise RuntimeError("Megatron CP rank %d of %d died (exit code %s) before answering"
                                           % (r, cp, procs[r].exitcode)) from None
                    del pending[r]
                    if answers[r][0] != "ok":
                        raise RuntimeError("Megatron CP rank %d of %d failed: %s" % (r, cp, answers[r][1]))
    finally:
        for c in conns:
            c.close()
        _stop(procs)
        shutil.rmtree(folder, ignore_errors=True)
    return assemble(case, [answers[r][1] for r in range(cp)])


def assemble(case, parts):
    """The ranks' rows put back in global stream order; dW_UK, dW_UV summed; the loss (the same on
    every rank after the reduction) from rank 0."""
    out = {}
    rank_rows = [np.asarray(r, dtype=np.int64) for r in case.layout["rank_rows"]]
    for n in parts[0]:
        if n in SUMMED:
            out[n] = sum(p[n] for p in parts)
        elif n == "loss":
            out[n] = parts[0][n]
        else:
            a = np.zeros((case.tp,) + parts[0][n].shape[1:], dtype=parts[0][n].dtype)
            for rows, p in zip(rank_rows, parts):
                a[rows] = p[n]
            out[n] = a
    return out

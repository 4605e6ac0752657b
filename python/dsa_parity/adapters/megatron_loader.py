"""Loads Megatron-LM's DSA module files from a checkout ($MEGATRON_PATH) without importing the
megatron package.

`import megatron.core` runs megatron/core/__init__.py, which pulls in transformer_engine, apex and
most of the framework. The DSA functions need none of that: dsa.py imports a few framework names at
module level (RotaryEmbedding, MegatronModule, TransformerConfig, ...) that the functions we call
never touch. So the packages megatron, megatron.core, ... are registered here as empty modules, the
framework modules dsa.py names are registered as stubs (below, each saying why it is safe), and the
files that hold the math are loaded from the checkout:

    megatron/core/transformer/experimental_attention_variant/*.py and ops/*.py   (real)
    megatron/core/packed_seq_params.py, megatron/core/transformer/enums.py        (real)

    megatron/core/tensor_parallel/mappings.py                                      (real, when present:
                                                      the CP gathers of DSAttention.forward, cp > 1)

The experimental_attention_variant package gets the checkout's folder as its __path__, so its own
relative and absolute imports resolve to the real files. Nothing of Megatron is copied here.

Shims for cp > 1 (megatron_cp.py runs the CP ranks as torch.distributed processes). Megatron's
logic is untouched; only two module-level names of the loaded tensor_parallel/mappings.py are
replaced, by cp_shims(), and only for a gloo process group:

  * mappings.torch -> a proxy of torch that differs only in torch.cuda.current_device(), which
    returns the device the ranks' tensors live on ("cpu" on the CPU run). Reason:
    _gather_along_first_dim and _reduce_scatter_along_first_dim allocate their output with
    device=torch.cuda.current_device() (mappings.py:145, :185), which fails without CUDA.
  * mappings.dist_all_gather_func / dist_reduce_scatter_func (all_gather_into_tensor /
    reduce_scatter_tensor, mappings.py:10-19) -> the same collectives written with
    torch.distributed.all_gather (list) and all_reduce + this rank's slice. Reason: torch's gloo
    backend implements neither (_allgather_base, _reduce_scatter_base), nor bf16 at all. Same
    results: the gather concatenates the ranks' tensors in rank order (bf16 travels as fp32,
    exactly), the reduce-scatter gives rank r the sum over ranks of slice r (summed in fp32, bf16
    rounded once at the end; NCCL's ring may round after each step, and may add in another order).

With NCCL (one GPU per rank) nothing is replaced.
"""

import importlib
import importlib.util
import os
import sys
import types

EAV = "megatron.core.transformer.experimental_attention_variant"
REAL_FILES = {
    "megatron.core.packed_seq_params": "megatron/core/packed_seq_params.py",
    "megatron.core.transformer.enums": "megatron/core/transformer/enums.py",
}
MAPPINGS = ("megatron.core.tensor_parallel.mappings", "megatron/core/tensor_parallel/mappings.py")


class MegatronUnavailable(Exception):
    """No usable Megatron checkout (the reason says which file or import is missing)."""


def megatron_path():
    path = os.environ.get("MEGATRON_PATH", "")
    if not path:
        raise MegatronUnavailable("MEGATRON_PATH is not set (point it at a Megatron-LM checkout, "
                                  "or make .megatron/ with tools/megatron_fetch.sh)")
    eav = os.path.join(path, *EAV.split("."))
    if not os.path.isfile(os.path.join(eav, "dsa.py")):
        raise MegatronUnavailable("%s has no %s/dsa.py" % (path, EAV.replace(".", "/")))
    return path


def megatron_commit(path):
    """The commit of the checkout: .megatron/COMMIT (written by tools/megatron_fetch.sh) or git."""
    f = os.path.join(path, "COMMIT")
    if os.path.isfile(f):
        with open(f) as fh:
            return fh.read().strip()
    head = os.path.join(path, ".git", "HEAD")
    try:
        with open(head) as fh:
            ref = fh.read().strip()
        if ref.startswith("ref: "):
            with open(os.path.join(path, ".git", ref[5:])) as fh:
                return fh.read().strip()
        return ref
    except OSError:
        return "unknown"


def _unneeded(name):
    def fail(*args, **kwargs):
        raise RuntimeError("%s is stubbed by dsa_parity.adapters.megatron_loader: the DSA core "
                           "functions the adapter calls must not reach it" % name)
    return fail


def _module(name, path=None, **attrs):
    m = types.ModuleType(name)
    if path is not None:
        m.__path__ = path
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def _get_pg_size(group=None):
    # Same contract as megatron.core.utils.get_pg_size: 1 without torch.distributed or a group.
    import torch
    if group is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return 1
    return group.size()


def _is_torch_min_version(version, check_equality=True):
    # Same contract as megatron.core.utils.is_torch_min_version (mappings.py picks its collectives).
    import torch
    have = tuple(int(p) for p in torch.__version__.split("+")[0].split("a")[0].split(".")[:2])
    want = tuple(int(p) for p in version.split(".")[:2])
    return have >= want if check_equality else have > want


def _round_up(value, multiple):
    return (value + multiple - 1) // multiple * multiple


class SingleRank:
    """A process group of one rank (tp and cp of the adapter: cp = 1, tp = 1)."""

    def size(self):
        return 1

    def rank(self):
        return 0


class ProcessGroupCollection:
    """Stand-in for megatron.core.process_groups_config.ProcessGroupCollection: the DSA functions
    only read its .tp (and .cp) groups' size()."""

    def __init__(self, tp=None, cp=None):
        self.tp = tp or SingleRank()
        self.cp = cp


def MegatronModuleStub(torch):
    """MegatronModule's constructor contract (a torch Module holding .config), nothing else."""

    class MegatronModule(torch.nn.Module):
        def __init__(self, config=None):
            super().__init__()
            self.config = config

    return MegatronModule


def _install_stubs(path):
    import torch

    _module("megatron", [])
    _module("megatron.core", [])
    _module("megatron.core.transformer", [])
    _module("megatron.core.models", [])
    _module("megatron.core.models.common", [])
    _module("megatron.core.tensor_parallel", [])
    # Only the classes of the indexer module (rope) use these; the functions under test do not.
    _module("megatron.core.models.common.embeddings", RotaryEmbedding=_unneeded("RotaryEmbedding"),
            YarnRotaryEmbedding=_unneeded("YarnRotaryEmbedding"),
            apply_rotary_pos_emb=_unneeded("apply_rotary_pos_emb"))
    # Sequence-parallel / CP gathers: the real mappings.py when the checkout has it (cp > 1 needs
    # it; tools/megatron_fetch.sh takes it), else a stub (cp = 1 never reaches it).
    _module("megatron.core.parallel_state", get_global_memory_buffer=_unneeded("get_global_memory_buffer"))
    _module("megatron.core.tensor_parallel.utils",
            split_tensor_along_last_dim=_unneeded("split_tensor_along_last_dim"))
    if not os.path.isfile(os.path.join(path, MAPPINGS[1])):
        _module(MAPPINGS[0], gather_from_sequence_parallel_region=_unneeded("gather_from_sequence_parallel_region"))
    _module("megatron.core.process_groups_config", ProcessGroupCollection=ProcessGroupCollection)
    _module("megatron.core.transformer.module", MegatronModule=MegatronModuleStub(torch))
    _module("megatron.core.transformer.spec_utils", ModuleSpec=object, build_module=_unneeded("build_module"))
    _module("megatron.core.transformer.transformer_config", TransformerConfig=object)
    _module("megatron.core.utils", get_pg_size=_get_pg_size, round_up_to_nearest_multiple=_round_up,
            get_tensor_model_parallel_group_if_none=lambda group, *a, **k: group,
            is_torch_min_version=_is_torch_min_version)
    real = dict(REAL_FILES)
    if os.path.isfile(os.path.join(path, MAPPINGS[1])):
        real[MAPPINGS[0]] = MAPPINGS[1]
    for name, rel in real.items():
        spec = importlib.util.spec_from_file_location(name, os.path.join(path, rel))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    _module(EAV, [os.path.join(path, *EAV.split("."))])


_LOADED = None


def load():
    """Megatron's DSA modules as a namespace: dsa, dsa_masking, dsa_indexer_loss, dsa_kernels,
    dsa_layout, enums, packed_seq_params, tilelang_dsa (None when its import fails), commit, path."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    path = megatron_path()
    if "megatron" in sys.modules and not hasattr(sys.modules["megatron"], "__path__"):
        raise MegatronUnavailable("another module named megatron is already imported")
    _install_stubs(path)
    ns = types.SimpleNamespace(path=path, commit=megatron_commit(path))
    try:
        for short in ("dsa", "dsa_masking", "dsa_indexer_loss", "dsa_kernels", "dsa_layout"):
            setattr(ns, short, importlib.import_module(EAV + "." + short))
    except ImportError as e:
        raise MegatronUnavailable("cannot import Megatron's DSA modules from %s: %s" % (path, e))
    ns.enums = sys.modules["megatron.core.transformer.enums"]
    ns.packed_seq_params = sys.modules["megatron.core.packed_seq_params"]
    try:  # the TileLang hooks; importable without TileLang (their kernels are then None)
        ns.tilelang_dsa = importlib.import_module(EAV + ".ops.tilelang_dsa")
        ns.ops_indexer = importlib.import_module(EAV + ".ops.indexer")
        ns.tilelang_utils = importlib.import_module(EAV + ".ops.tilelang_utils")
    except (ImportError, OSError) as e:
        print("megatron adapter: TileLang hook modules not importable: %s" % e, file=sys.stderr)
        ns.tilelang_dsa = ns.ops_indexer = ns.tilelang_utils = None
    ns.ProcessGroupCollection = ProcessGroupCollection
    m = sys.modules.get(MAPPINGS[0])
    ns.mappings = m if m is not None and hasattr(m, "_gather_along_first_dim") else None
    _LOADED = ns
    return ns


class _TorchOnDevice(types.ModuleType):
    """torch, except torch.cuda.current_device(), which names the ranks' device (see the top)."""

    def __init__(self, torch, device):
        super().__init__("torch")
        self._torch = torch
        self.cuda = types.SimpleNamespace(current_device=lambda: device)

    def __getattr__(self, name):
        return getattr(self._torch, name)


def _gloo_all_gather_into_tensor(output, input_, group=None):
    import torch
    wire = torch.float32 if input_.dtype == torch.bfloat16 else input_.dtype  # gloo has no bf16: exact
    parts = [torch.empty(input_.shape, dtype=wire, device=input_.device) for _ in range(group.size())]
    torch.distributed.all_gather(parts, input_.to(wire), group=group)
    output.copy_(torch.cat(parts, dim=0))


def _gloo_reduce_scatter_tensor(output, input_, group=None):
    import torch
    wire = torch.float32 if input_.dtype == torch.bfloat16 else input_.dtype  # bf16: summed in fp32, rounded once
    full = input_.to(wire).clone()
    torch.distributed.all_reduce(full, group=group)
    output.copy_(torch.chunk(full, group.size(), dim=0)[group.rank()])


def cp_shims(ns, device):
    """The two shims at the top, on the loaded mappings module, for a gloo CP group on `device`."""
    import torch
    m = ns.mappings
    m.torch = _TorchOnDevice(torch, device)
    m.dist_all_gather_func = _gloo_all_gather_into_tensor
    m.dist_reduce_scatter_func = _gloo_reduce_scatter_tensor

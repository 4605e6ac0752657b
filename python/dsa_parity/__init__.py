"""The Python side of dsa-parity: safetensors in numpy, the tensor catalogue, the exec2 worker."""

PROTOCOL = 2

__all__ = ["PROTOCOL"]

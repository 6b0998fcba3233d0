"""rssprobe: memory forensics for DeepSpeed ZeRO-2 with CPU optimizer offload."""

__version__ = "0.1.0"

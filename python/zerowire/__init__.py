"""zerowire: collective communication for ZeRO-3 training.

`import zerowire.torch` registers the `zerowire` backend with torch.distributed (see zerowire/torch.py).
"""
__all__ = ["torch"]

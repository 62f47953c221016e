"""stoker's Python client: batches from remote stoker workers, normalised on the GPU, as PyTorch tensors.

    import stoker
    for images, labels in stoker.Loader("tcp://coordinator:7400", "resnet50", manifest="train.stoker",
                                        batch_size=256, epochs=1):
        ...

See stoker.loader for the contract (streams, memory, errors). The work is done by libstoker_c.so, stoker's C ABI,
found next to this package (stoker/lib/), in the source tree's build/lib, or where STOKER_LIBRARY says.
"""
from ._capi import StokerError
from .loader import Batch, Loader, nccl_unique_id

__all__ = ["Batch", "Loader", "StokerError", "nccl_unique_id"]
__version__ = "0.1.0"

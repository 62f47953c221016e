"""stoker's Python client: batches from remote stoker workers, normalised on the GPU, as PyTorch tensors — in
place of a torch.utils.data.DataLoader (len, state_dict/load_state_dict, torchrun, Lightning).

    import stoker
    loader = stoker.Loader("tcp://coordinator:7400", "resnet50", manifest="train.stoker", batch_size=256, epochs=90)
    for epoch in range(90):
        for images, labels in loader:
            ...

See stoker.loader for the contract (streams, memory, errors, checkpoints, processes). The work is done by
libstoker_c.so, stoker's C ABI, found next to this package (stoker/lib/, with the libraries it needs), in the source
tree's build/lib, or where STOKER_LIBRARY says. `python -m stoker --version` says which one is used.
"""
from ._batch import Batch
from ._capi import StokerError
from .loader import Loader, nccl_unique_id

__all__ = ["Batch", "Loader", "StokerError", "nccl_unique_id"]
__version__ = "0.1.0"

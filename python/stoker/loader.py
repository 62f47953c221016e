"""stoker.Loader: one training rank's batches, ready for the model, from stoker workers.

    loader = stoker.Loader("tcp://stoker-coordinator:7400", "resnet50", manifest="/data/train.stoker",
                           batch_size=256, ranks=world_size, rank=rank, epochs=90,
                           dtype="bfloat16", layout="nhwc")        # device: PyTorch's current CUDA device
    for epoch in range(90):
        for images, labels in loader:                                # one epoch; (N, C, H, W) CUDA tensors
            train_step(images, labels)
    loader.close()

Each batch arrives normalised ((pixel - mean) / std per channel) in the dtype and memory order asked for, on the
device, with no copy into PyTorch: the tensors are views of the Loader's device slot, obtained through
``__cuda_array_interface__``, and the slot goes back to the Loader when the last tensor of the batch is freed.
Ordering follows PyTorch's: ``next`` makes the *current stream* wait for the batch (never a device sync), and the
slot is reused only after that stream has passed the point where the batch was freed. A tensor of a batch used on
another stream must be ordered after the current stream by the caller, as with ``Tensor.record_stream``.

Memory: ``depth`` batches per device (4 by default), pinned and on the device, allocated once. Holding ``depth``
batches at once (keeping every batch's tensors alive, say) makes the next fetch fail with a clear error
(StokerError, code RESOURCE_EXHAUSTED; free one and fetch again, nothing is skipped) instead of deadlocking: copy
what must outlive a step (``labels.clone()``).

Threads: one thread iterates; ``close()`` belongs to it too. ``request_stop()`` and ``stats()`` work from any.

Without a GPU (``device=-1``, or no CUDA) the same calls give host tensors (or numpy arrays without PyTorch).

Errors raise StokerError with the library's message and a status code; an unreachable coordinator, an unknown or
mismatched job, a rank already held, bad options: each is a clear message, never a hang (``timeout``).
"""
import ctypes
import json
import time

from . import _capi
from ._capi import StokerError

_SLICE_MS = 250  # how long one C call may block, so that Ctrl-C (KeyboardInterrupt) is seen between slices

_TYPESTR = {_capi.UINT8: "|u1", _capi.FLOAT32: "<f4", _capi.FLOAT16: "<f2", _capi.BFLOAT16: "<i2"}


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


class _Handle:
    """Owns one stoker_batch: released when the last array or tensor that views it is gone."""

    __slots__ = ("ptr", "__weakref__")

    def __init__(self, ptr):
        self.ptr = ptr

    def release(self):
        ptr, self.ptr = self.ptr, None
        if ptr:
            _capi.lib().stoker_batch_release(ptr)

    def __del__(self):
        try:
            self.release()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


class _ArrayView:
    """A view of batch memory with the array interface numpy (host) or PyTorch and CuPy (device) import without a
    copy. Holds the batch handle: whatever imports it keeps it, and so the batch, alive."""

    def __init__(self, handle, ptr, shape, strides_bytes, typestr, device, stream=None):
        self._handle = handle
        interface = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                     "strides": tuple(strides_bytes), "version": 3}
        if device >= 0:
            # The stream that waits for the batch: None where it is the importer's own (PyTorch's current stream,
            # which Loader.next made wait), else 1, the legacy default stream, for CuPy or Numba to order after.
            interface["stream"] = stream
            self.__cuda_array_interface__ = interface
        else:
            self.__array_interface__ = interface


class Batch:
    """One batch: images (N, C, H, W) and labels as tensors (or numpy arrays), plus host copies of its sample ids
    and flags (bit 1: padding, bit 2: quarantined, whose label is -1). Its memory returns to the Loader when the
    Batch, its images and its labels are all gone."""

    def __init__(self, ptr, framework):
        handle = _Handle(ptr)
        info = _capi.BatchInfo()
        info.struct_size = ctypes.sizeof(info)
        _capi.check(_capi.lib().stoker_batch_get_info(ptr, ctypes.byref(info)))
        self._handle = handle
        self.epoch = info.epoch
        self.index = info.index          # within the epoch
        self.position = info.position    # across epochs
        self.device = info.device
        self.dtype = _capi.DTYPE_NAMES[info.dtype]
        self.layout = "nchw" if info.layout == _capi.NCHW else "nhwc"
        n = info.count
        self.sample_ids = _host_copy(info.host_sample_ids, n, "<u8")
        self.flags = _host_copy(info.host_flags, n, "|u1")
        self.host_labels = _host_copy(info.host_labels, n, "<i8")
        size = _capi.DTYPE_SIZES[info.dtype]
        typestr = _TYPESTR[info.dtype]
        if info.dtype == _capi.BFLOAT16 and framework == "numpy":
            typestr = "<u2"  # numpy has no bfloat16: its bits (PyTorch views int16 as bfloat16 instead)
        stream = None if framework == "torch" else 1
        images = _ArrayView(handle, info.data, list(info.shape), [s * size for s in info.strides], typestr,
                            info.device, stream)
        labels = _ArrayView(handle, info.labels, [n], [8], "<i8", info.device, stream)
        self.images = _import(images, info.device, framework, bfloat16=info.dtype == _capi.BFLOAT16)
        self.labels = _import(labels, info.device, framework, bfloat16=False)
        # The received uint8 NHWC pixels in host memory (None on a tensor-parallel follower): for checks.
        self.pixels = None
        if info.host_pixels:
            h, w = info.shape[2], info.shape[3]
            self.pixels = _import(_ArrayView(handle, info.host_pixels, [n, h, w, 3], [h * w * 3, w * 3, 3, 1], "|u1",
                                             -1), -1, "numpy", bfloat16=False)

    @property
    def padding(self):
        return (self.flags & 1) != 0

    def __len__(self):
        return len(self.sample_ids)


def _host_copy(ptr, n, typestr):
    import numpy as np
    if not ptr or n == 0:
        return np.zeros(n, dtype=np.dtype(typestr))
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(_CTYPE[typestr])), shape=(n,)).copy()


_CTYPE = {"<u8": ctypes.c_uint64, "<i8": ctypes.c_int64, "|u1": ctypes.c_uint8}


def _import(view, device, framework, bfloat16):
    if framework == "torch":
        torch = _torch()
        if device >= 0:
            with torch.cuda.device(device):
                t = torch.as_tensor(view, device=f"cuda:{device}")
        else:
            import numpy as np
            t = torch.from_numpy(np.asarray(view))
        return t.view(torch.bfloat16) if bfloat16 else t
    if framework == "numpy":
        import numpy as np
        if device >= 0:
            return view  # a __cuda_array_interface__ object: cupy.asarray(), numba.cuda.as_cuda_array(), ...
        return np.asarray(view)  # bfloat16 stays its bits, as uint16 (numpy has no bfloat16)
    raise ValueError(f"framework must be 'torch' or 'numpy', not {framework!r}")


def _flag_args(options):
    argv = []
    for name, value in options.items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(f"{flag}={'true' if value else 'false'}")
        elif isinstance(value, (list, tuple)):
            argv.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            argv.append(f"{flag}={value}")
    return argv


def _collective(name, spec):
    """tensor_parallel / agreement: (nccl_id, size, rank) or a dict with those keys -> flags."""
    if spec is None:
        return {}
    if isinstance(spec, dict):
        nccl_id, size, rank = spec["nccl_id"], spec["size"], spec["rank"]
    else:
        nccl_id, size, rank = spec
    return {f"{name}_id": nccl_id, f"{name}_size": int(size), f"{name}_rank": int(rank)}


class Loader:
    """One rank's stream of batches (see this module's text).

    coordinator: the coordinator's control endpoint (tcp://host:port). job: the job's name; the first rank to
    connect creates it from manifest, batch_size, ranks, epochs, seed (and the other job flags: pipeline,
    remainder, image_height, ...); ranks that join later send the same spec, or attach=True to send none.
    device: a CUDA ordinal, -1 for host batches, "auto" (PyTorch's current device when CUDA is available, else -1).
    dtype: uint8, float32, float16, bfloat16. layout: nchw, or nhwc (PyTorch's channels_last). mean, std: per
    channel R,G,B in pixel units (default ImageNet's). depth: batches per device in pinned and device memory.
    timeout: seconds one batch may take before StokerError(DEADLINE_EXCEEDED) (None: no limit; Ctrl-C still works).
    tensor_parallel, agreement: (nccl_id, size, rank) for a group sharing this rank over NCCL, and for the
    data-parallel ranks' agreement step (see stoker/loader.h). framework: "torch" (default when importable) or
    "numpy". Any other flag of stoker::LoaderFlags by name: prefetch=8, resume_token=..., metrics_listen=...
    """

    def __init__(self, coordinator, job, *, manifest=None, batch_size=None, ranks=None, rank=0, epochs=None,
                 seed=None, device="auto", dtype="float32", layout="nchw", mean=None, std=None, depth=None,
                 timeout=None, tensor_parallel=None, agreement=None, framework=None, **flags):
        self._ptr = None
        torch = _torch()
        self._framework = framework or ("torch" if torch is not None else "numpy")
        if self._framework == "torch" and torch is None:
            raise StokerError(_capi.FAILED_PRECONDITION, "framework='torch' but PyTorch cannot be imported")
        if device == "auto":
            device = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else -1
        self.device = int(device)
        self._timeout = timeout
        self._collective = tensor_parallel is not None or agreement is not None
        options = dict(coordinator=coordinator, job=job, manifest=manifest, batch_size=batch_size, ranks=ranks,
                       rank=rank, epochs=epochs, seed=seed, device=self.device, dtype=dtype, layout=layout,
                       mean=mean, std=std, depth=depth)
        options.update(_collective("tp", tensor_parallel))
        options.update(_collective("agree", agreement))
        options.update(flags)
        argv = [a.encode() for a in _flag_args(options)]
        arr = (ctypes.c_char_p * len(argv))(*argv)
        handle = ctypes.c_void_p()
        lib = _capi.lib()
        _capi.check(lib.stoker_loader_open(len(argv), arr, ctypes.byref(handle)))
        self._ptr = handle.value
        self.epoch = None        # the epoch of the last batch
        self.finished = False    # the job delivered its last epoch
        self.stopped = False     # stopped early (request_stop, or another rank's, through the agreement step)

    # -- iteration ------------------------------------------------------------------------------------------------

    def __iter__(self):
        """The rest of the current epoch as (images, labels); the next `for` starts the next epoch. Empty once the
        job has finished or stopped."""
        for batch in self.batches():
            yield batch.images, batch.labels

    def batches(self):
        """Like iterating, with Batch objects (sample ids, padding flags, epoch, index)."""
        while True:
            kind, batch = self._next()
            if kind != _capi.BATCH:
                return
            yield batch

    def next(self):
        """The next Batch, or None at the end of an epoch, of the job, or an agreed stop (see finished/stopped)."""
        kind, batch = self._next()
        return batch

    def _next(self):
        if self.finished or self.stopped:
            return _capi.END_OF_JOB if self.finished else _capi.STOPPED, None
        lib = _capi.lib()
        stream = self._stream()
        kind, epoch, batch = ctypes.c_int(), ctypes.c_uint32(), ctypes.c_void_p()
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            if self._collective:  # the agreement step counts a timeout as a failure: one call, the whole wait
                slice_ms = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            else:
                left = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
                slice_ms = _SLICE_MS if left is None else min(_SLICE_MS, left)
            code = lib.stoker_loader_next(self._handle(), stream, slice_ms, ctypes.byref(kind), ctypes.byref(epoch),
                                          ctypes.byref(batch))
            if code == _capi.DEADLINE_EXCEEDED and not self._collective and (
                    deadline is None or time.monotonic() < deadline):
                continue
            _capi.check(code)
            break
        if kind.value == _capi.BATCH:
            self.epoch = epoch.value
            return _capi.BATCH, Batch(batch.value, self._framework)
        if kind.value == _capi.END_OF_JOB:
            self.finished = True
        elif kind.value == _capi.STOPPED:
            self.stopped = True
        return kind.value, None

    def _stream(self):
        if self.device < 0 or self._framework != "torch":
            return None
        return _torch().cuda.current_stream(self.device).cuda_stream

    def _handle(self):
        if not self._ptr:
            raise StokerError(_capi.FAILED_PRECONDITION, "the Loader is closed")
        return self._ptr

    # -- control ------------------------------------------------------------------------------------------------

    def checkpoint(self):
        """A token that resumes this rank exactly after the last batch taken: Loader(..., resume_token=token)."""
        return _capi.read_string(_capi.lib().stoker_loader_checkpoint, self._handle())

    def request_stop(self):
        """Ask every rank (with agreement) to stop before the same batch. Safe from any thread."""
        _capi.lib().stoker_loader_request_stop(self._handle())

    def stats(self):
        """Counters as a dict: batches, wait_seconds, input_stall_seconds, pinned_bytes, dropped_*, ..."""
        return json.loads(_capi.read_string(_capi.lib().stoker_loader_stats_json, self._handle()))

    @property
    def steps_per_epoch(self):
        return _capi.lib().stoker_loader_steps_per_epoch(self._handle())

    def close(self):
        """Leaves the job. Batches still held stay valid until they are freed. Call it from the iterating thread,
        never while another thread is inside next(): use request_stop() to end iteration from elsewhere."""
        ptr, self._ptr = self._ptr, None
        if ptr:
            _capi.lib().stoker_loader_close(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def nccl_unique_id():
    """A new NCCL unique id (hex) for Loader(tensor_parallel=(id, size, rank)) or agreement: made on one process
    and sent to the others (torch.distributed.broadcast_object_list, say)."""
    buf = ctypes.create_string_buffer(257)
    _capi.check(_capi.lib().stoker_nccl_unique_id(buf, len(buf)))
    return buf.value.decode()

"""One batch as the Loader hands it out: images and labels viewing the Loader's slot without a copy (PyTorch tensors,
or numpy arrays and __cuda_array_interface__ objects), host copies of ids and flags, and the handle that gives the
slot back when the last view of it is freed."""
import ctypes

from . import _capi


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


_TYPESTR = {_capi.UINT8: "|u1", _capi.FLOAT32: "<f4", _capi.FLOAT16: "<f2", _capi.BFLOAT16: "<i2"}


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

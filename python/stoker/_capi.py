"""ctypes bindings to libstoker_c.so, stoker's C ABI (include/stoker/c_api.h): one declaration per C function,
the batch info struct, and the search for the library. Everything user-facing is in loader.py."""
import ctypes
import ctypes.util
import os

API_VERSION = 3  # stoker_loader_validate, stoker_loader_job_json, stoker_checkpoint_decode, _at and _at_point

BATCH, END_OF_EPOCH, END_OF_JOB, STOPPED = 0, 1, 2, 3
UINT8, FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2, 3
NCHW, NHWC = 0, 1
DTYPE_NAMES = {UINT8: "uint8", FLOAT32: "float32", FLOAT16: "float16", BFLOAT16: "bfloat16"}
DTYPE_SIZES = {UINT8: 1, FLOAT32: 4, FLOAT16: 2, BFLOAT16: 2}

# Status codes (include/stoker/status.h), for StokerError.code.
INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS = 3, 4, 5, 6
RESOURCE_EXHAUSTED, FAILED_PRECONDITION, INTERNAL, UNAVAILABLE = 8, 9, 13, 14


class BatchInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("epoch", ctypes.c_uint32),
        ("index", ctypes.c_uint64),
        ("position", ctypes.c_uint64),
        ("count", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("layout", ctypes.c_int32),
        ("data", ctypes.c_void_p),
        ("shape", ctypes.c_int64 * 4),
        ("strides", ctypes.c_int64 * 4),
        ("labels", ctypes.c_void_p),
        ("sample_ids", ctypes.c_void_p),
        ("host_labels", ctypes.c_void_p),
        ("host_sample_ids", ctypes.c_void_p),
        ("host_flags", ctypes.c_void_p),
        ("host_pixels", ctypes.c_void_p),
    ]


_PACKAGE_LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")


def _candidates():
    explicit = os.environ.get("STOKER_LIBRARY")
    if explicit:
        yield explicit
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "lib", "libstoker_c.so")  # installed, or the build tree's build/python/stoker
    # The source tree, next to a build: python/stoker -> build/lib.
    for build in ("build", "build-bundle"):
        yield os.path.join(here, "..", "..", build, "lib", "libstoker_c.so")
    found = ctypes.util.find_library("stoker_c")
    if found:
        yield found


def _declare(lib):
    c = ctypes
    sigs = {
        "stoker_c_api_version": (c.c_int, []),
        "stoker_last_error": (c.c_char_p, []),
        "stoker_loader_open": (c.c_int, [c.c_int, c.POINTER(c.c_char_p), c.POINTER(c.c_void_p)]),
        "stoker_loader_validate": (c.c_int, [c.c_int, c.POINTER(c.c_char_p)]),
        "stoker_loader_next": (c.c_int, [c.c_void_p, c.c_void_p, c.c_int64, c.POINTER(c.c_int),
                                         c.POINTER(c.c_uint32), c.POINTER(c.c_void_p)]),
        "stoker_batch_get_info": (c.c_int, [c.c_void_p, c.POINTER(BatchInfo)]),
        "stoker_batch_release": (None, [c.c_void_p]),
        "stoker_loader_checkpoint": (c.c_int, [c.c_void_p, c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]),
        "stoker_loader_stats_json": (c.c_int, [c.c_void_p, c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]),
        "stoker_loader_steps_per_epoch": (c.c_uint64, [c.c_void_p]),
        "stoker_loader_job_json": (c.c_int, [c.c_void_p, c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]),
        "stoker_loader_describe": (c.c_int, [c.c_int, c.POINTER(c.c_char_p), c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]),
        "stoker_checkpoint_decode": (c.c_int, [c.c_char_p, c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]),
        "stoker_checkpoint_at": (c.c_int, [c.c_char_p, c.c_uint32, c.c_uint64, c.c_char_p, c.c_size_t,
                                           c.POINTER(c.c_size_t)]),
        "stoker_checkpoint_at_point": (c.c_int, [c.c_char_p, c.c_uint32, c.c_uint64, c.c_uint32, c.c_uint64,
                                                 c.c_char_p, c.c_size_t, c.POINTER(c.c_size_t)]),
        "stoker_loader_request_stop": (None, [c.c_void_p]),
        "stoker_loader_close": (None, [c.c_void_p]),
        "stoker_nccl_unique_id": (c.c_int, [c.c_char_p, c.c_size_t]),
    }
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_lib = None


def _preload_vendored(directory):
    """Loads the shared libraries vendored next to libstoker_c.so (a bundle or an image copies the ones it needs
    there: ZeroMQ, Cap'n Proto, ...) so that its dependencies resolve without LD_LIBRARY_PATH, which would also
    change the libraries PyTorch finds. Libraries load in whatever order their own dependencies allow."""
    pending = sorted(f for f in os.listdir(directory) if ".so" in f and not f.startswith("libstoker_c."))
    while pending:
        left = []
        for name in pending:
            try:
                ctypes.CDLL(os.path.join(directory, name), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                left.append(name)
        if len(left) == len(pending):
            return  # what cannot load now never will: libstoker_c.so's own error will say which
        pending = left


def lib():
    """The loaded library (loaded on first use). STOKER_LIBRARY names it explicitly."""
    global _lib
    if _lib is not None:
        return _lib
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            directory = os.path.dirname(os.path.abspath(path))
            if directory == _PACKAGE_LIB:  # only the package's own folder holds vendored libraries
                _preload_vendored(directory)
            loaded = _declare(ctypes.CDLL(path))
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        version = loaded.stoker_c_api_version()
        if version < API_VERSION:
            raise ImportError(f"{path} has stoker C API {version}; this package needs {API_VERSION} or later")
        _lib = loaded
        return _lib
    raise ImportError("cannot find libstoker_c.so (build it: scripts/build.sh, or set STOKER_LIBRARY); tried: "
                      + "; ".join(tried))


class StokerError(RuntimeError):
    """A stoker call failed. code: the status code (stoker._capi names them); str(): the library's message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def argv(options):
    """Keyword options -> the C ABI's flags (name_with_underscores=value -> b"--name-with-underscores=value"), as a
    (count, char* array) pair. None leaves a flag out; lists become comma-separated."""
    args = []
    for name, value in options.items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args.append(f"{flag}={value}".encode())
    return len(args), (ctypes.c_char_p * len(args))(*args)


def check(code):
    if code != 0:
        message = lib().stoker_last_error()
        raise StokerError(code, message.decode("utf-8", "replace") if message else f"stoker error {code}")


def read_string(fn, *args):
    """Calls a stoker_*(args..., buf, capacity, needed) function, growing the buffer once if it must."""
    needed = ctypes.c_size_t(0)
    capacity = 4096
    for _ in range(2):
        buf = ctypes.create_string_buffer(capacity)
        code = fn(*args, buf, capacity, ctypes.byref(needed))
        if code == 0 and needed.value <= capacity:
            return buf.value.decode("utf-8")
        if needed.value > capacity:
            capacity = needed.value
            continue
        check(code)
    raise StokerError(INTERNAL, "string kept growing")

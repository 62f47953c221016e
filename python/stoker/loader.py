"""stoker.Loader: one training rank's batches, ready for the model, from stoker workers — where a PyTorch
DataLoader would be.

    loader = stoker.Loader("tcp://stoker-coordinator:7400", "resnet50", manifest="/data/train.stoker",
                           batch_size=256, epochs=90, dtype="bfloat16", layout="nhwc")
    for epoch in range(90):
        for images, labels in loader:                 # one epoch; (N, C, H, W) tensors on PyTorch's current device
            train_step(images, labels)
    loader.close()

On one machine, ``stoker.Loader("local", "resnet50", manifest="/data/train", batch_size=256, epochs=90)`` starts
its own coordinator and workers (local mode, below).

As a DataLoader: ``len(loader)`` is this rank's steps per epoch; each ``for`` is one epoch (after a ``break``, or a
resume, the rest of it); ``state_dict()`` and ``load_state_dict()`` save and restore the position, so Lightning and
any loop that checkpoints them resume exactly the batches not yet taken; ``loader.sampler.set_epoch(e)`` moves to
epoch e's start unless the rank is in it already. The rank and world size come from
``torch.distributed`` once it is initialised, else from torchrun's RANK and WORLD_SIZE: under torchrun or Lightning
every process opens the same Loader. The job is created by the first rank to connect; the others join it, and
the coordinator checks their specs are identical.

The Loader connects at its first use (len, iteration, state_dict, load_state_dict, stats, checkpoint, or
``open()``), not when it is made: by then a framework has set up its processes and device, and a restarted process
has been given its checkpoint. Bad options fail at once.

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
mismatched job, a rank already held, a state of another job, bad options: each is a clear message, never a hang
(``timeout``, ``claim_timeout``).
"""
import ctypes
import json
import os
import threading
import time

from . import _capi, _state
from ._batch import Batch, _torch
from ._capi import StokerError
from .delivery_log import format_line, shape_line

_SLICE_MS = 250  # how long one C call may block, so that Ctrl-C (KeyboardInterrupt) is seen between slices
_CLAIM_RETRY_S = 0.25  # how often a rank held by another session is asked for again


def _collective(name, spec):
    """tensor_parallel / agreement: (nccl_id, size, rank) or a dict with those keys -> flags."""
    if spec is None:
        return {}
    if isinstance(spec, dict):
        nccl_id, size, rank = spec["nccl_id"], spec["size"], spec["rank"]
    else:
        nccl_id, size, rank = spec
    return {f"{name}_id": nccl_id, f"{name}_size": int(size), f"{name}_rank": int(rank)}


def _process_group():
    """(rank, world size) of this process: torch.distributed's once initialised, else torchrun's environment."""
    torch = _torch()
    if torch is not None and torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    return (int(rank) if rank else None), (int(world) if world else None)


class Loader:
    """One rank's stream of batches (see this module's text).

    coordinator: the coordinator's control endpoint (tcp://host:port), or "local": the Loader starts a coordinator
    and local_workers worker processes on this machine ("auto", the default: the cores this process may use, its
    share under torchrun, less two), which end with it, even if its process is killed; manifest may then name a dataset folder, .tar or
    s3:// prefix, indexed once (local mode; see README). With a cluster's coordinator, local_workers=N starts N
    node-local workers beside the pool, which serve this rank first over a Unix socket and use its key;
    local_dir="/path" uses the node-local workers someone else runs there (a sidecar). job: the job's name; the first rank to connect creates it
    from manifest, batch_size, ranks, epochs, seed (and the other job flags: pipeline, remainder, image_height,
    ...); ranks that join later send the same spec, or attach=True to send none.
    rank, ranks: this rank and the world size; None: torch.distributed's, else RANK and WORLD_SIZE, else rank 0.
    device: a CUDA ordinal, -1 for host batches, "auto" (if CUDA is available: LOCAL_RANK's device under torchrun,
    else PyTorch's current device when the Loader connects; -1 without CUDA). dtype: uint8, float32, float16, bfloat16. layout: nchw, or nhwc (PyTorch's
    channels_last). mean, std: per channel R,G,B in pixel units (default ImageNet's). depth: batches per device in
    pinned and device memory. timeout: seconds one batch may take before StokerError(DEADLINE_EXCEEDED) (None: no
    limit; Ctrl-C still works). claim_timeout: seconds to wait for this rank while another session holds it (a
    crashed process's session is released by the coordinator after its client timeout, 10 s by default); then
    StokerError(ALREADY_EXISTS). A resumed rank takes over at once. tensor_parallel, agreement: (nccl_id, size,
    rank) for a group sharing this rank over NCCL, and for the data-parallel ranks' agreement step (see
    stoker/loader.h). framework: "torch" (default when importable) or "numpy". delivery_log: a file to append one
    line per batch taken to, for `stoker check` (stoker.delivery_log); "{rank}" in it becomes the rank (the one
    first connected as), "{pid}" the process id. Any other flag of the C ABI (stoker::client::LoaderFlags) by name:
    prefetch=8, resume_token=..., metrics_listen=...
    """

    def __init__(self, coordinator, job, *, manifest=None, batch_size=None, ranks=None, rank=None, epochs=None,
                 seed=None, device="auto", dtype="float32", layout="nchw", mean=None, std=None, depth=None,
                 timeout=None, claim_timeout=15.0, tensor_parallel=None, agreement=None, framework=None,
                 delivery_log=None, resume_token=None, local_workers=None, **flags):
        self._ptr = None
        self._lock = threading.Lock()  # _ptr, against request_stop and stats from other threads
        self._open_lock = threading.Lock()  # one connection, whichever thread's first use makes it
        torch = _torch()
        self._framework = framework or ("torch" if torch is not None else "numpy")
        if self._framework not in ("torch", "numpy"):
            raise ValueError(f"framework must be 'torch' or 'numpy', not {framework!r}")
        if self._framework == "torch" and torch is None:
            raise StokerError(_capi.FAILED_PRECONDITION, "framework='torch' but PyTorch cannot be imported")
        self._job = job
        self._rank, self._ranks, self._batch_size = rank, ranks, batch_size
        self._device = device
        self._timeout = timeout
        self._claim_timeout = claim_timeout
        self._collective = tensor_parallel is not None or agreement is not None
        self._follower = _collective("tp", tensor_parallel).get("tp_rank", 0) != 0
        self._options = dict(coordinator=coordinator, job=job, manifest=manifest, batch_size=batch_size,
                             epochs=epochs, seed=seed, dtype=dtype, layout=layout, mean=mean, std=std, depth=depth)
        self._options.update(_collective("tp", tensor_parallel))
        self._options.update(_collective("agree", agreement))
        if local_workers is not None:
            if local_workers == "auto" and coordinator != "local":
                raise ValueError("local_workers='auto' is for local mode; beside a cluster's pool give a number")
            self._options["local_workers"] = 0 if local_workers == "auto" else int(local_workers)
        self._options.update(flags)
        self._resume_token = resume_token
        self._delivery_log_path = delivery_log
        self._delivery_log = None
        self._log_shape = False
        self._job_info = None
        self._closed = False
        self._stop_requested = False
        self._epoch_end_pending = False  # the last batch of an epoch was taken, its end not yet seen
        self.epoch = None        # the epoch of the last batch
        self.finished = False    # the job delivered its last epoch
        self.stopped = False     # stopped early (request_stop, or another rank's, through the agreement step)
        # Bad options fail here, where they were written, although the Loader connects later.
        checked_device = -1 if device == "auto" else device
        _capi.check(_capi.lib().stoker_loader_validate(*_capi.argv(self._flags(0, ranks, checked_device))))

    def _flags(self, rank, ranks, device):
        return dict(self._options, rank=rank, ranks=ranks, device=device, resume_token=self._resume_token)

    # -- connecting ---------------------------------------------------------------------------------------------

    @property
    def rank(self):
        """This Loader's rank: as given, else torch.distributed's or RANK, else 0."""
        if self._job_info is not None:
            return self._job_info["rank"]
        group_rank, _ = _process_group()
        return self._rank if self._rank is not None else (group_rank or 0)

    @property
    def ranks(self):
        """The world size: the job's once connected, else as given, torch.distributed's or WORLD_SIZE (or None)."""
        if self._job_info is not None:
            return self._job_info["ranks"]
        return self._ranks if self._ranks is not None else _process_group()[1]

    @property
    def device(self):
        """The CUDA ordinal batches arrive on (fixed when the Loader connects), -1 for host memory."""
        if self._job_info is not None:
            return self._job_info["device"]
        if self._device != "auto":
            return int(self._device)
        torch = _torch()
        if torch is None or not torch.cuda.is_available():
            return -1
        local_rank = os.environ.get("LOCAL_RANK")  # torchrun's: one process per GPU of the node
        if local_rank is not None and local_rank.isdigit():
            return int(local_rank) % torch.cuda.device_count()
        return torch.cuda.current_device()

    def open(self):
        """Connects now (otherwise the first use does): claims the rank, creating the job if it is new. Errors of
        the coordinator (unknown job, mismatched spec, rank held) are raised here. Returns self."""
        with self._open_lock:
            if not self._ptr:
                self._connect()
        return self

    def _connect(self):
        if self._closed:
            raise StokerError(_capi.FAILED_PRECONDITION, "the Loader is closed")
        rank, device = self.rank, self.device
        count, args = _capi.argv(self._flags(rank=rank, ranks=self.ranks, device=device))
        lib = _capi.lib()
        handle = ctypes.c_void_p()
        deadline = time.monotonic() + (self._claim_timeout or 0)
        while True:
            code = lib.stoker_loader_open(count, args, ctypes.byref(handle))
            # Another session holds the rank, or (resuming on another shape) trains on the job: a crashed process's
            # session is released by the coordinator after its client timeout.
            if code != _capi.ALREADY_EXISTS or time.monotonic() >= deadline:
                break
            time.sleep(_CLAIM_RETRY_S)
        if code == _capi.ALREADY_EXISTS:
            raise StokerError(code, f"{lib.stoker_last_error().decode('utf-8', 'replace')} (waited "
                              f"{self._claim_timeout} s for it to be released; do two processes claim rank {rank}? "
                              "Under torchrun each takes its rank from RANK)")
        _capi.check(code)
        self._job_info = dict(json.loads(_capi.read_string(lib.stoker_loader_job_json, handle.value)), device=device)
        self._log_shape = True  # the job's shape heads the delivery log's next lines (a resume may change it)
        with self._lock:
            self._ptr = handle.value
            if self._stop_requested:
                lib.stoker_loader_request_stop(self._ptr)

    def _handle(self):
        if not self._ptr:
            self.open()
        return self._ptr

    # -- iteration ------------------------------------------------------------------------------------------------

    def __len__(self):
        """Steps (batches) per epoch of this rank, the same on every rank of the job. Asked before the Loader has
        connected, of a job that exists, it only asks the coordinator (claiming nothing): Lightning calls len()
        before load_state_dict(), and a state that resumes the job on another shape must find it unclaimed."""
        if not self._ptr and not self._follower and not self._closed:
            described = self._describe()
            if described is not None:
                return described["steps_per_epoch"]
        return self.steps_per_epoch

    def _describe(self):
        """The job as this Loader's shape would have it, or None when it does not exist yet."""
        count, args = _capi.argv(self._flags(rank=self.rank, ranks=self.ranks, device=-1))
        try:
            return json.loads(_capi.read_string(_capi.lib().stoker_loader_describe, count, args))
        except StokerError as e:
            if e.code == _capi.NOT_FOUND:
                return None
            raise

    def __iter__(self):
        """The rest of the current epoch as (images, labels); the next `for` starts the next epoch. Empty once the
        job has finished or stopped."""
        for batch in self.batches():
            yield batch.images, batch.labels

    def batches(self):
        """Like iterating, with Batch objects (sample ids, padding flags, epoch, index)."""
        if self._epoch_end_pending:
            # The previous loop took exactly the epoch's batches and stopped, as frameworks that know len() do:
            # the end it did not ask for is the previous epoch's, not this one's.
            kind, batch = self._next()
            if kind == _capi.BATCH:
                raise StokerError(_capi.INTERNAL, f"batch {batch.index} of epoch {batch.epoch} came after the last")
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
        handle = self._handle()
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
            code = lib.stoker_loader_next(handle, stream, slice_ms, ctypes.byref(kind), ctypes.byref(epoch),
                                          ctypes.byref(batch))
            if code == _capi.DEADLINE_EXCEEDED and not self._collective and (
                    deadline is None or time.monotonic() < deadline):
                continue
            _capi.check(code)
            break
        self._epoch_end_pending = False
        if kind.value == _capi.BATCH:
            self.epoch = epoch.value
            taken = Batch(batch.value, self._framework)
            self._epoch_end_pending = taken.index + 1 == self._job_info["steps_per_epoch"]
            self._log(taken)
            return _capi.BATCH, taken
        if kind.value == _capi.END_OF_JOB:
            self.finished = True
        elif kind.value == _capi.STOPPED:
            self.stopped = True
        return kind.value, None

    def _log(self, batch):
        if self._delivery_log_path is None:
            return
        if self._delivery_log is None:
            path = self._delivery_log_path.replace("{rank}", str(self._job_info["rank"])).replace(
                "{pid}", str(os.getpid()))
            self._delivery_log = open(path, "a", buffering=1)  # a line at a time: a crash loses none
        if self._log_shape:
            self._delivery_log.write(shape_line(self._job_info) + "\n")
            self._log_shape = False
        self._delivery_log.write(format_line(batch, self._job_info["rank"]) + "\n")

    def _stream(self):
        if self._job_info is None or self.device < 0 or self._framework != "torch":
            return None
        return _torch().cuda.current_stream(self.device).cuda_stream

    # -- state ----------------------------------------------------------------------------------------------------

    def state_dict(self):
        """Where this rank stands, as a small picklable dict: the checkpoint token (what resumes), the job, rank,
        world size, batch size, the epoch and the batches of it already taken. Save it with the model; a new
        Loader given it by load_state_dict() delivers exactly the batches not taken before this call."""
        self._handle()
        if self._follower:
            return _state.follower(self._job)
        return _state.make(self.checkpoint(), self._job_info)

    def load_state_dict(self, state):
        """Resumes from state_dict()'s dict: the next batch is the first one not taken when it was made, in this
        process or a new one, before the first batch or after some (Lightning calls it after len(), before
        iterating). A state of another rank of the same job resumes this rank at the same position (frameworks
        save rank 0's). A state of the job on another number of ranks or batch size resumes it on this one: the
        coordinator re-plans what is left of the epoch, each sample exactly once. StokerError for a state of another
        job, dataset, seed, order, augmentation or number of epochs, naming what differs."""
        if self._closed:
            raise StokerError(_capi.FAILED_PRECONDITION, "the Loader is closed")
        if self._follower:  # the group's leader resumes; its followers receive what it fetches
            _state.check_format(state, self._job)
            return
        self._reconnect(_state.token_for(state, self._job, self.rank, self.ranks, self._batch_size))

    def reshape(self, rank, ranks, *, batch_size=None, state=None):
        """A live shape change, without a checkpoint or a restart: this process goes on as rank `rank` of `ranks`
        (with `batch_size` per rank, default unchanged) from `state` (default: this Loader's state_dict(), the batch
        after the last one taken). Every surviving rank calls it with the same state, which the ranks agree on as
        they agree on their new group (a fault-tolerant trainer's quorum); a new rank calls it on a fresh Loader
        with that state. The coordinator re-plans what is left of the epoch from that point at once: the old
        shape's sessions (a departed rank's among them) end, so nobody waits for its client timeout; only sessions
        of this process's team can be ended that way, and the point may not be behind the job's last change. Every
        rank of the new shape takes the same number of steps, and every sample of the epoch is trained on exactly
        once across the change when the state is the point the ranks really trained to. StokerError as
        load_state_dict(); FAILED_PRECONDITION when another rank already changed the job's shape from another point
        that not every rank has joined yet. A Loader of an agreement or tensor-parallel group cannot change shape
        (its NCCL group would be the old one): open a new Loader with the new group. With delivery_log, give each
        process its own file ("{pid}"): ranks renumber across a change."""
        if self._closed:
            raise StokerError(_capi.FAILED_PRECONDITION, "the Loader is closed")
        if self._collective:
            raise StokerError(_capi.FAILED_PRECONDITION, "a Loader in an agreement or tensor-parallel group cannot "
                              "change shape live: open a new Loader with the new group's NCCL ids")
        if not 0 <= rank < ranks:
            raise ValueError(f"rank {rank} is not one of {ranks} ranks")
        if self._options.get("attach"):
            raise StokerError(_capi.INVALID_ARGUMENT, "a live shape change sends the job's spec: an attached "
                              "Loader (attach=True) cannot make one")
        if state is None:
            if not self._ptr:
                raise ValueError("reshape() of a Loader that never connected needs the state to resume from")
            state = self.state_dict()
        batch_size = self._batch_size if batch_size is None else batch_size
        token = _state.token_for(state, self._job, rank, ranks, batch_size)  # raises before anything changes
        if _state.decode_token(token)["version"] == 1:
            raise StokerError(_capi.FAILED_PRECONDITION, "a state written before stoker resumed on another shape "
                              "cannot change the job's shape")
        device = self.device  # as connected: the rank's GPU stays its own
        before = (self._rank, self._ranks, self._batch_size, self._options.get("batch_size"), self._device)
        self._rank, self._ranks, self._batch_size, self._job_info = rank, ranks, batch_size, None
        self._options["batch_size"], self._device = batch_size, device
        self._options["resume_live"] = True  # this registration only: later ones resume as usual
        try:
            self._reconnect(token)
        except BaseException:
            # Disconnected: the next use connects in the shape before this call, without a token (where the rank's
            # last session stopped; a token of an earlier point would deal its steps again), and is told if the job
            # changed shape.
            self._rank, self._ranks, self._batch_size, self._options["batch_size"], self._device = before
            self._resume_token, self._job_info = None, None
            raise
        finally:
            del self._options["resume_live"]

    def _reconnect(self, token):
        self._disconnect()
        self._resume_token = token
        self.epoch, self.finished, self.stopped, self._epoch_end_pending = None, False, False, False
        self.open()  # now, so that a token the coordinator refuses (another spec or dataset) fails here

    @property
    def sampler(self):
        """What Lightning (and DistributedSampler code) calls set_epoch() on at each epoch's start: the Loader."""
        return self

    def set_epoch(self, epoch):
        """The next batches are epoch `epoch`'s: nothing changes when this rank is already in it (its start, or
        mid-epoch after load_state_dict()), else the Loader moves to that epoch's start. Lightning calls it at
        every epoch's start; when it resumes from an epoch-end checkpoint it gives no state back, only this, and the
        rank, which the coordinator continues where its last process stopped, must go back to that epoch."""
        if self._follower:  # the group's leader moves; its followers receive what it fetches
            return
        self._handle()
        steps, epochs = self._job_info["steps_per_epoch"], self._job_info["epochs"]
        token = self.checkpoint()
        position = _state.decode_token(token)["position"]
        start = min(epoch, epochs) * steps
        if start <= position < start + steps or position == start:
            return
        self._reconnect(_state.at_epoch_start(token, self._job_info["rank"], min(epoch, epochs), self._job_info))

    def checkpoint(self):
        """A token that resumes this rank exactly after the last batch taken: Loader(..., resume_token=token)."""
        return _capi.read_string(_capi.lib().stoker_loader_checkpoint, self._handle())

    # -- control ------------------------------------------------------------------------------------------------

    def request_stop(self):
        """Ask every rank (with agreement) to stop before the same batch. Safe from any thread."""
        with self._lock:
            self._stop_requested = True
            if self._ptr:
                _capi.lib().stoker_loader_request_stop(self._ptr)

    def stats(self):
        """Counters as a dict: batches, wait_seconds, input_stall_seconds, pinned_bytes, dropped_*,
        samples_quarantined and quarantined_by_reason ({"unsupported_format": 4, ...}), ...; and
        trainer_cpu_seconds, the CPU time of this process's threads (local mode's servers are not among them): beside
        the stall, whether the trainer itself is short of cores."""
        self._handle()
        with self._lock:
            if not self._ptr:
                raise StokerError(_capi.FAILED_PRECONDITION, "the Loader is closed")
            stats = json.loads(_capi.read_string(_capi.lib().stoker_loader_stats_json, self._ptr))
        stats["trainer_cpu_seconds"] = time.process_time()
        return stats

    @property
    def steps_per_epoch(self):
        return _capi.lib().stoker_loader_steps_per_epoch(self._handle())

    def _disconnect(self):
        with self._lock:
            ptr, self._ptr = self._ptr, None
            if ptr:
                _capi.lib().stoker_loader_close(ptr)

    def close(self):
        """Leaves the job. Batches still held stay valid until they are freed. Call it from the iterating thread,
        never while another thread is inside next(): use request_stop() to end iteration from elsewhere."""
        self._closed = True
        self._disconnect()
        if self._delivery_log is not None:
            self._delivery_log.close()
            self._delivery_log = None

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

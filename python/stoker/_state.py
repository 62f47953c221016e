"""The Loader's state for training frameworks: what Loader.state_dict() returns and Loader.load_state_dict() takes.

A small picklable dict around the rank's checkpoint token (dataset/checkpoint.h): the token decides where delivery
resumes, as (epoch, offset): how much of that epoch's order the job had trained on, which means the same on any
number of ranks and any batch size, so a state resumes a job of another shape. It also carries what decides the data
(dataset, seed, order, augmentation, epochs): the coordinator refuses it for another of those, naming the field.
The other fields are for people and frameworks to read, and let a state of another job be refused before anything
connects. States written before tokens had a point (version 1) resume only on their own shape.
"""
import json

from . import _capi
from ._capi import StokerError

FORMAT = "stoker.Loader/1"


def decode_token(token):
    """A checkpoint token's fields (version, job, rank, position; version 2: epoch, offset, ranks, batch_size, ...;
    version 1: spec_fingerprint); StokerError for a damaged one."""
    return json.loads(_capi.read_string(_capi.lib().stoker_checkpoint_decode, token.encode()))


def make(token, job):
    """The state of a rank whose checkpoint token is `token`; job: the Loader's job description (job_json)."""
    t = decode_token(token)
    steps = max(1, job["steps_per_epoch"])
    state = {
        "format": FORMAT,
        "job": t["job"],
        "rank": t["rank"],
        "ranks": job["ranks"],
        "batch_size": job["batch_size"],
        "steps_per_epoch": job["steps_per_epoch"],
        "position": t["position"],            # global index of the first batch not yet taken, in this shape's plan
        "epoch": t.get("epoch", t["position"] // steps),  # the epoch that batch belongs to
        "batches_in_epoch": t["position"] % steps,  # that batch's index in its epoch
        "spec_fingerprint": job["spec_fingerprint"],
        "token": token,
    }
    if t["version"] >= 2:
        state["offset"] = t["offset"]  # samples of the epoch's order trained on, on any shape
    return state


def follower(job):
    """A tensor-parallel follower's state: nothing to resume, the group's leader has the position."""
    return {"format": FORMAT, "job": job, "token": None, "tensor_parallel_follower": True}


def _describe(state):
    text = repr(state)
    return text if len(text) <= 120 else text[:117] + "..."


def check_format(state, job):
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise StokerError(_capi.INVALID_ARGUMENT,
                          f"not a stoker.Loader state (a dict with format {FORMAT!r}): {_describe(state)}")
    if state.get("job") != job:
        raise StokerError(_capi.FAILED_PRECONDITION,
                          f"the state is of job {state.get('job')!r}; this Loader's job is {job!r}")


def token_for(state, job, rank, ranks=None, batch_size=None):
    """The token that resumes `rank` of `job` where `state` stands. A state of another rank of the same job gives
    the same position at this rank: data-parallel ranks step together, and frameworks save one rank's state
    (Lightning writes rank 0's checkpoint) and give it to every rank. StokerError: INVALID_ARGUMENT for something
    that is not an intact state; FAILED_PRECONDITION for another job, world size or batch size (ranks, batch_size:
    this Loader's, where it knows them)."""
    check_format(state, job)
    token = state.get("token")
    if not isinstance(token, str):
        raise StokerError(_capi.INVALID_ARGUMENT, f"the state has no checkpoint token: {_describe(state)}")
    t = decode_token(token)
    keys = ("job", "rank", "position", "spec_fingerprint") if t["version"] == 1 else ("job", "rank", "position",
                                                                                       "epoch", "offset")
    for key in keys:
        if state.get(key) != t[key]:
            raise StokerError(_capi.INVALID_ARGUMENT, f"the state's {key} ({state.get(key)!r}) differs from its "
                              f"token's ({t[key]!r}): the state was edited or damaged")
    if t["version"] == 1:  # a point in one shape's plan: only that shape can resume it
        for name, mine in (("ranks", ranks), ("batch_size", batch_size)):
            if mine is not None and state.get(name) != mine:
                raise StokerError(_capi.FAILED_PRECONDITION, f"the state's job has {name}={state.get(name)}, this "
                                  f"Loader {name}={mine}: a state written before stoker resumed on another shape "
                                  "resumes only on its own")
    if t["rank"] == rank:
        return token
    return moved(token, rank, t["position"])


def at_epoch_start(token, rank, epoch, job):
    """The token that starts `rank` at epoch `epoch`'s start (where the job's plan starts, for its origin epoch)."""
    t = decode_token(token)
    position = epoch * job["steps_per_epoch"]
    if t["version"] == 1:
        return moved(token, rank, position)
    offset = job["origin_offset"] if epoch == job["origin_epoch"] else 0
    return _capi.read_string(_capi.lib().stoker_checkpoint_at_point, token.encode(), rank, position, epoch, offset)


def moved(token, rank, position):
    """The token of the same job at another rank and position (stoker_checkpoint_at)."""
    return _capi.read_string(_capi.lib().stoker_checkpoint_at, token.encode(), rank, position)

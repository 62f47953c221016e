"""The Loader's state for training frameworks: what Loader.state_dict() returns and Loader.load_state_dict() takes.

A small picklable dict around the rank's checkpoint token (dataset/checkpoint.h): the token decides where delivery
resumes and carries the job spec's fingerprint (the coordinator refuses it for another spec or dataset); the other
fields are for people and frameworks to read, and let a state of another job be refused before anything connects.
"""
import json

from . import _capi
from ._capi import StokerError

FORMAT = "stoker.Loader/1"


def decode_token(token):
    """A checkpoint token's fields (job, rank, position, spec_fingerprint); StokerError for a damaged one."""
    return json.loads(_capi.read_string(_capi.lib().stoker_checkpoint_decode, token.encode()))


def make(token, job):
    """The state of a rank whose checkpoint token is `token`; job: the Loader's job description (job_json)."""
    t = decode_token(token)
    steps = max(1, job["steps_per_epoch"])
    return {
        "format": FORMAT,
        "job": t["job"],
        "rank": t["rank"],
        "ranks": job["ranks"],
        "batch_size": job["batch_size"],
        "steps_per_epoch": job["steps_per_epoch"],
        "position": t["position"],            # global index of the first batch not yet taken
        "epoch": t["position"] // steps,       # the epoch that batch belongs to
        "batches_in_epoch": t["position"] % steps,  # batches of that epoch already taken
        "spec_fingerprint": t["spec_fingerprint"],
        "token": token,
    }


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
    for key in ("job", "rank", "position", "spec_fingerprint"):
        if state.get(key) != t[key]:
            raise StokerError(_capi.INVALID_ARGUMENT, f"the state's {key} ({state.get(key)!r}) differs from its "
                              f"token's ({t[key]!r}): the state was edited or damaged")
    for name, mine in (("ranks", ranks), ("batch_size", batch_size)):
        if mine is not None and state.get(name) != mine:
            raise StokerError(_capi.FAILED_PRECONDITION, f"the state's job has {name}={state.get(name)}, this Loader "
                              f"{name}={mine}: a state of job {job!r} as it was, not as it is asked for now")
    if t["rank"] == rank:
        return token
    return moved(token, rank, t["position"])


def moved(token, rank, position):
    """The token of the same job at another rank and position (stoker_checkpoint_at)."""
    return _capi.read_string(_capi.lib().stoker_checkpoint_at, token.encode(), rank, position)

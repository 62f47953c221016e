"""Delivery logs from Python: one line per batch a training process took, in the format `stoker consume --log`
writes and `stoker check` judges against the plan (tools/delivery_log.h), so that a Python training run can be
proven to have seen every planned sample exactly once: Loader(..., delivery_log=path) writes one.

The Python side knows neither the batch's lease attempt, its worker nor a hash of its pixels: it writes 0, "-" and
zeros there. The checker judges sample ids and flags, which are exact.
"""


def shape_line(job):
    """The S line naming the shape the batches after it were planned in (job: the Loader's job_json)."""
    return f"S {job['ranks']} {job['batch_size']} {job['origin_epoch']} {job['origin_offset']}"


def format_line(batch, rank):
    """The log line of a stoker.Batch taken by `rank`."""
    ids = " ".join(f"{i}:{f}" for i, f in zip(batch.sample_ids.tolist(), batch.flags.tolist()))
    return f"B {batch.epoch} {rank} {batch.index} 0 - {0:016x} {ids}"


def before(path, position, steps_per_epoch):
    """The lines of batches before `position` (a global index, epoch x steps_per_epoch + index): what a process
    counts as consumed when training is resumed from a checkpoint taken at `position`; the batches it took after
    that checkpoint are taken again by the resumed process."""
    out = []
    for line in lines(path):
        if line.startswith("S "):  # the shape of the lines after it: kept, so the cut log is judged right
            out.append(line)
        else:
            epoch, _, index = (int(v) for v in line.split()[1:4])
            if epoch * steps_per_epoch + index < position:
                out.append(line)
    return out


def lines(path):
    """Every line of a log that `stoker check` reads (shape and batch lines), in order."""
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.startswith(("S ", "B "))]

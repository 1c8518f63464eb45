"""Who this process is (job, rank, ...) and the environment fingerprint sent in `hello`."""

from __future__ import annotations

import os
import platform
import socket
import sys
import time
import uuid

from . import _log, _stack
from ._scalar import put

__all__ = ["identity", "default_job", "fingerprint", "gpu_fingerprint", "loader_fingerprint", "looks_like_dataloader"]

_MAX_JOB_CHARS = 128


_MAX_WORLD_SIZE = 65536  # what the sidecar takes; ranks are below it, local ranks up to 65535


def _to_int(value):
    """``value`` as an int (an integral number, or its decimal text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip(), 10)
        except ValueError:
            return None
    try:
        import operator

        return operator.index(value)  # numpy integers and the like
    except Exception:
        return None


def _setting(argument, arg_name: str, env_name: str, default: int, problems: list):
    """The value of a rank setting and how to name it in a message; unparsable ones are reported."""
    if argument is None:
        raw = os.environ.get(env_name)
        if raw is None or not raw.strip():
            return default, None
        label = "%s=%r" % (env_name, raw)
    else:
        raw = argument
        label = "init(%s=%r)" % (arg_name, argument)
    value = _to_int(raw)
    if value is None:
        problems.append("%s is not an integer: using %s %d" % (label, arg_name, default))
        return default, None
    return value, label


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def flag(name: str):
    """An on/off environment variable: True, False, or None when unset or neither (said once)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    _log.warn_once(_log.USAGE + ":" + name, "%s=%r is neither on (%s) nor off (%s): ignored" % (name, raw, "/".join(_TRUE), "/".join(_FALSE)))
    return None


def identity(*, job=None, rank=None, world_size=None, local_rank=None, host=None) -> dict:
    """The identity fields of `hello` (job, rank, local_rank, world_size, session, pid, host).

    Rank settings the sidecar would refuse (not integers, negative, rank >= world size, beyond
    its limits) are replaced by usable ones, and one line says what was wrong and what is used.
    """
    host = host or socket.gethostname() or "unknown-host"
    problems = []
    rank, rank_from = _setting(rank, "rank", "RANK", 0, problems)
    world_size, size_from = _setting(world_size, "world_size", "WORLD_SIZE", 1, problems)
    local_rank, local_from = _setting(local_rank, "local_rank", "LOCAL_RANK", 0, problems)
    if rank < 0:
        problems.append("%s is negative: using rank 0" % rank_from)
        rank = 0
    elif rank >= _MAX_WORLD_SIZE:
        problems.append("%s is beyond the sidecar's limit: using rank %d" % (rank_from, _MAX_WORLD_SIZE - 1))
        rank = _MAX_WORLD_SIZE - 1
    if world_size < 1:
        problems.append("%s is below 1: using world_size %d" % (size_from, max(1, rank + 1)))
        world_size = max(1, rank + 1)
    elif world_size > _MAX_WORLD_SIZE:
        problems.append("%s is beyond the sidecar's limit: using world_size %d" % (size_from, _MAX_WORLD_SIZE))
        world_size = _MAX_WORLD_SIZE
    if rank >= world_size:
        problems.append(
            "rank %d (%s) is not below world_size %d (%s): using world_size %d"
            % (rank, rank_from or "default", world_size, size_from or "default", rank + 1)
        )
        world_size = rank + 1
    if local_rank < 0:
        problems.append("%s is negative: using local_rank 0" % local_from)
        local_rank = 0
    elif local_rank > _MAX_WORLD_SIZE - 1:
        problems.append("%s is beyond the sidecar's limit: using local_rank %d" % (local_from, _MAX_WORLD_SIZE - 1))
        local_rank = _MAX_WORLD_SIZE - 1
    if problems:
        _log.warn_once("identity", "invalid rank settings: " + "; ".join(problems))
    job = str(job) if job else (os.environ.get("STEPSCOPE_JOB") or default_job(host))
    return {
        "job": job[:_MAX_JOB_CHARS],
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world_size,
        "session": uuid.uuid4().hex,
        "pid": os.getpid(),
        "host": host[:255],
    }


def default_job(host: str) -> str:
    """A job id shared by the ranks of one launch, without any coordination.

    1. ``TORCHELASTIC_RUN_ID`` (torchrun's rendezvous id; ignored when it is "none").
    2. Under a launcher (``LOCAL_RANK`` set, as torchrun and torch.distributed.launch do),
       the ranks of one host are children of the same launcher process:
       ``<host>-<launcher start time>-<launcher pid>``. Ranks on other hosts get their own
       host's id; set ``STEPSCOPE_JOB`` (or use a rendezvous id) to group hosts.
    3. Otherwise this process: ``<host>-<start time>-<pid>``.
    """
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id.lower() != "none":
        return "torchrun-" + run_id
    short_host = host.split(".")[0] or host
    launched = "LOCAL_RANK" in os.environ
    pid = os.getppid() if launched else os.getpid()
    started = process_start_time(pid)
    if started is not None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    elif launched:
        stamp = "launcher"  # no /proc: the launcher's pid alone is what the ranks share
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return "%s-%s-%d" % (short_host, stamp, pid)


def process_start_time(pid: int):
    """Epoch seconds at which ``pid`` started, from /proc (None where unavailable)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("ascii", "replace")
        # The command name may hold spaces and parentheses: fields follow the last ')'.
        start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    boot = int(line.split()[1])
                    break
            else:
                return None
        return boot + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def fingerprint(version: str) -> dict:
    env = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hook": version,
    }
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        env["cuda_visible_devices"] = visible
    torch = sys.modules.get("torch")
    if torch is not None:
        env.update(_torch_versions(torch))
        env.update(gpu_fingerprint(torch))
        try:
            nccl = _stack.nccl_version(torch)
            if nccl is not None:
                env["nccl"] = nccl
            stack = _stack.settings(torch)
            if stack:
                env["stack"] = stack
        except Exception:
            pass
    return env


def _torch_versions(torch) -> dict:
    env = {}
    put(env, "torch", lambda: str(torch.__version__))
    put(env, "cuda", lambda: torch.version.cuda)
    put(env, "cudnn", lambda: torch.backends.cudnn.version())
    return env


def gpu_fingerprint(torch) -> dict:
    """Name, index and uuid of the current CUDA device; {} unless CUDA is initialized.

    Must run on the training thread: the current device is per thread.
    """
    env = {}
    try:
        if not torch.cuda.is_initialized():
            return env
        index = torch.cuda.current_device()
    except Exception:
        return env
    env["gpu_index"] = int(index)
    put(env, "gpu_name", lambda: torch.cuda.get_device_name(index))
    put(env, "gpu_uuid", lambda: format_gpu_uuid(getattr(torch.cuda.get_device_properties(index), "uuid", None)))
    return env


def format_gpu_uuid(value):
    """nvidia-smi's form, ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``; None if unknown."""
    if value is None:
        return None
    raw = getattr(value, "bytes", None)
    if isinstance(raw, (bytes, bytearray)) and len(raw) == 16:
        text = str(uuid.UUID(bytes=bytes(raw)))
    else:
        text = str(value).strip()
        if not text:
            return None
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text


def looks_like_dataloader(obj) -> bool:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if isinstance(obj, torch.utils.data.DataLoader):
                return True
        except Exception:
            pass
    return hasattr(obj, "num_workers") and hasattr(obj, "dataset") and hasattr(obj, "batch_size")


def loader_fingerprint(loader) -> dict:
    env = {}
    for name in ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers"):
        put(env, name, lambda: getattr(loader, name))
    return env

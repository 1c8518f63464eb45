"""stepscope: per-step timing of a training loop, streamed to the stepscope sidecar.

    import stepscope
    scope = stepscope.init()
    for batch in scope.loader(train_loader):
        with scope.phase("h2d"):
            batch = batch.to(device, non_blocking=True)
        with scope.phase("compute"):
            loss = model(batch); loss.backward(); opt.step()
        scope.step(samples=len(batch))
    scope.close()

Standard library only; torch is used when the training script has imported it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import weakref

from . import _comm, _env, _log, _stack, _ws
from ._scope import PHASES, CloseResult, Scope

__all__ = ["init", "watch_ddp", "Scope", "CloseResult", "PHASES", "DEFAULT_URL", "__version__"]

#: stepscope.watch_ddp(model) -> bool: time DDP's gradient all-reduce buckets (call once after wrapping the model).
watch_ddp = _comm.watch_ddp

__version__ = "0.1.0"

DEFAULT_URL = "ws://127.0.0.1:9477/v1/ingest"

_lock = threading.Lock()
_current = None
# Scopes not yet closed at exit. A running scope stays alive through its sender thread.
_live = weakref.WeakSet()


def init(
    url=None,
    job=None,
    rank=None,
    world_size=None,
    *,
    local_rank=None,
    token=None,
    cuda=None,
    batch_interval: float = 0.08,
    buffer_size: int = 16384,
    max_unacked: int = 100_000,
    gpu_event_pairs: int = 256,
    exit_timeout: float = 2.0,
    comm=None,
) -> Scope:
    """Start timing this process's training loop and reporting it to the sidecar.

    url          the sidecar; default ``$STEPSCOPE_URL``, else ``ws://127.0.0.1:9477/v1/ingest``.
    job          default ``$STEPSCOPE_JOB``, else one id shared by the ranks of a launch: torchrun's
                 ``$TORCHELASTIC_RUN_ID`` (unless "none"); under a launcher (``$LOCAL_RANK`` set),
                 ``<host>-<launcher start time, UTC>-<launcher pid>``, the launcher being the parent
                 process (its start time read from /proc); otherwise the same from this process.
                 Ranks on different hosts share an id only through the first two.
    rank, world_size, local_rank
                 default ``$RANK``, ``$WORLD_SIZE``, ``$LOCAL_RANK`` (as torchrun sets them), else 0, 1, 0.
    token        sent as ``Authorization: Bearer <token>``; default ``$STEPSCOPE_TOKEN``.
    cuda         None: time h2d/compute with CUDA events once torch has initialized CUDA;
                 False: CPU clock only; True: CUDA events even if CUDA must be initialized for it.
                 Default: ``$STEPSCOPE_CUDA`` (0/off or 1/on) if set, else None.
    batch_interval  seconds between sends while a viewer watches, on the beats of the host's monotonic
                    clock, so that the ranks beside this one send together, or each step as it
                    ends where the job steps slower than that (a CUDA-timed step at the next beat
                    once its GPU times are known) (0.08 s: with the
                    sidecar's part, a step reaches a viewer within 100 ms at the 99th percentile,
                    as measured on loopback); 0.5 s at least while
                    the sidecar says none watches; sooner once 1,024 records wait.
    buffer_size  records the training thread may queue for the sender thread (oldest dropped beyond).
    max_unacked  records kept until the sidecar acknowledges them (oldest dropped beyond).
    gpu_event_pairs  size of the CUDA event pool.
    exit_timeout seconds the atexit handler waits for the sidecar when close() was not called.
    comm         True: time torch.distributed's collectives and DDP's gradient all-reduce (a
                 DistributedDataParallel model is watched without a call) and send the comm_* step
                 columns. Default: ``$STEPSCOPE_COMM`` (0/off or 1/on) if set, else True.

    Calling init again closes the scope the previous call returned (waiting at most 1 s) and
    returns a new one, with a new session. Never raises: on an internal error, or with a URL or
    token that cannot work (said once), the scope returned times steps but sends nothing.
    """
    global _current
    auto = sys.modules.get("stepscope._auto")
    if auto is not None:
        auto.explicit_init()  # the explicit API wins: the zero-code path stands down
    with _lock:
        previous, _current = _current, None
    if previous is not None:
        previous.close(timeout=1.0)
    try:
        if cuda is None:
            cuda = _env.flag("STEPSCOPE_CUDA")
        if comm is None:
            comm = _env.flag("STEPSCOPE_COMM") is not False
        if url:
            source = "url"
        else:
            url = os.environ.get("STEPSCOPE_URL", "").strip() or DEFAULT_URL
            source = "STEPSCOPE_URL" if os.environ.get("STEPSCOPE_URL", "").strip() else "default URL"
        token_source = "STEPSCOPE_TOKEN" if token is None else "init(token=...)"
        token = os.environ.get("STEPSCOPE_TOKEN") if token is None else token
        token = str(token).strip() if token is not None else None  # a newline read from a secret file
        identity = _env.identity(job=job, rank=rank, world_size=world_size, local_rank=local_rank)
        problem, topic = _url_problem(url, source), ":url"
        if problem is None:
            problem, topic = _token_problem(token, token_source), ":token"
        if problem is not None:
            _log.warn_once(_log.USAGE + topic, problem + "; not sending: steps are still timed here")
            scope = Scope(None, buffer_size=int(buffer_size), disabled=problem)
        else:
            torch = sys.modules.get("torch")
            if torch is not None:
                _stack.install(torch)  # before the first step: autocast is seen from it on
            connection = {
                "url": url,
                "identity": identity,
                "env": _env.fingerprint(__version__),
                "headers": {"Authorization": "Bearer " + token} if token else {},
                "batch_interval": float(batch_interval),
                "max_unacked": int(max_unacked),
            }
            scope = Scope(
                connection,
                cuda=cuda,
                gpu_event_pairs=int(gpu_event_pairs),
                buffer_size=int(buffer_size),
                exit_timeout=float(exit_timeout),
            )
            if comm:
                _comm.install(scope)
            # For MFU without a line of code (the zero-code path too): the FLOPs of one step.
            flops = os.environ.get("STEPSCOPE_FLOPS_PER_STEP", "").strip()
            if flops:
                scope.set_flops_per_step(flops)
    except Exception as exc:
        _log.warn_once(_log.INTERNAL, "could not start (%s: %s); sending nothing" % (type(exc).__name__, exc))
        scope = Scope(None, disabled="the hook could not start (%s)" % type(exc).__name__)
    with _lock:
        _current = scope
        _live.add(scope)
    return scope


def _url_problem(url, source: str):
    """One sentence on what is wrong with the sidecar URL, naming where it came from; None if fine."""
    try:
        _ws.check_url(url)
        return None
    except _ws.BadURL as exc:
        shown = _ws.redact_url(url) if isinstance(url, str) else url
        where = {"url": "init(url=%r)", "STEPSCOPE_URL": "STEPSCOPE_URL=%r"}.get(source, "the default URL %r") % shown
        return "%s is not a usable sidecar URL: %s. Accepted: %s, e.g. %s" % (where, exc, _ws.ACCEPTED_URLS, DEFAULT_URL)


def _token_problem(token, source: str):
    """What makes the token unsendable in an HTTP header (never showing it), or None."""
    if not token:
        return None
    for c in token:
        if ord(c) < 0x20 or ord(c) == 0x7F:
            return "%s contains a control character, which no HTTP header can carry" % source
        if ord(c) > 0x7E:
            return "%s contains a non-ASCII character (%r), which the sidecar cannot match" % (source, c)
    return None


def _close_all_at_exit() -> None:
    with _lock:
        scopes = list(_live)
        _live.clear()
    for scope in scopes:
        scope._close_at_exit()


def _quiet_in_forked_child() -> None:
    global _current, _lock
    # Only the forking thread survives a fork: a lock another thread held is held forever.
    _lock = threading.Lock()
    _log.reinit_after_fork()
    scopes = list(_live)
    _live.clear()
    _current = None
    for scope in scopes:
        scope._after_fork_in_child()


atexit.register(_close_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_quiet_in_forked_child)

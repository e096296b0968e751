"""Measure on a machine behind a tvm.rpc tracker (`python -m tvm.exec.rpc_tracker`, and there
`python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`).

Each candidate gets its own RPC session, which the server runs in a fresh process and kills after the session
timeout, so a hanging kernel is a failure record as with the local runner. A crashing kernel is one too, but TVM
0.27's rpc_server stops serving after a session's process dies (its listen loop re-raises the exit code): the next
session request then times out and tuning stops with a UserError saying to restart the server (every measured
candidate is in the database; a rerun resumes). Run the server in a loop to ride through crashes. The checking and
timing are bundle_run.check_and_time, the same code every runner uses.
"""

from __future__ import annotations

import os
import threading

from xcomp.autotune.bundle_run import INPUT_SEED, check_and_time, failure_reason, reference_outputs
from xcomp.autotune.measure import Runner
from xcomp.errors import UserError


def parse_tracker(text: str) -> tuple:
    """'host:9190' -> ('host', 9190)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--rpc-tracker {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9190")
    return host, int(port)


class RPCRunner(Runner):
    remote_session = True

    def __init__(self, host: str, port: int, key: str, timeout_s: float = 30.0, number: int = 3, repeat: int = 5,
                 min_repeat_ms: int = 20, startup_grace_s: float = 60.0, request_timeout_s: float = 60.0,
                 cold_weights: bool = True):
        self.host, self.port, self.key = host, port, key
        self.timeout_s, self.startup_grace_s, self.request_timeout_s = timeout_s, startup_grace_s, request_timeout_s
        # cold_weights: as LocalRunner, but the data input is not rewritten before each run (a stock
        # rpc_server has TVM's cache flush only; timing.producer_written)
        self.settings = {"number": number, "repeat": repeat, "min_repeat_ms": min_repeat_ms, "seed": INPUT_SEED,
                         "cold_weights": cold_weights}
        self._references = {}  # reference_outputs' cache: each reference runs once per tuning run
        self._session = None
        self._fresh = True  # the first session also pays for the first kernel compilation there

    def begin(self, db):
        """Fail early, before any building, when the tracker or a server for the key cannot be reached."""
        self._open_session(self.timeout_s)
        self._session = None

    def _open_session(self, timeout_s):
        from tvm import rpc

        self._session = None  # let go of the last one first: a single server serves one session at a time
        outcome = []

        def request():  # the tracker queues a request until a server is free, for ever if none comes back
            try:
                tracker = rpc.connect_tracker(self.host, self.port)
                outcome.append(tracker.request(self.key, priority=1, session_timeout=timeout_s, max_retry=2))
            except Exception as err:  # refused connection, a server that hung up, ...
                outcome.append(err)

        thread = threading.Thread(target=request, daemon=True)
        thread.start()
        thread.join(self.request_timeout_s)
        if not outcome or isinstance(outcome[0], Exception):
            why = failure_reason(outcome[0]) if outcome else f"none free within {self.request_timeout_s:.0f}s"
            raise UserError(f"rpc tracker {self.host}:{self.port}, key {self.key!r}: cannot get a session ({why}); "
                            "is a server registered with that key? (TVM's rpc_server stops after a kernel crashes "
                            "it: restart it, then rerun to resume)")
        self._session = outcome[0]
        return self._session

    def _load(self, path):
        self._session.upload(path)
        return self._session.load_module(os.path.basename(path))

    def _measure(self, kind, request, timeout_s) -> dict:
        """One candidate in one session. Everything holding the session (its device, modules, tensors) is local
        here and gone on return, so the server is free for the next request."""
        dev = self._open_session(timeout_s).device(kind)
        try:
            want = reference_outputs(self._load, dev, request, self._references)
            return check_and_time(self._load, dev, want, request)
        except Exception as err:  # the session died (a crash) or was killed (its timeout)
            return {"error": "run: " + failure_reason(err)}
        finally:
            self._session = None

    def run(self, reference, builds, target, params, workload=None):
        request = {**self._timing_request(target, workload.evict_private_bytes if workload else 0),
                   "reference": reference, "params": params}

        def measure(build):
            fresh, self._fresh = self._fresh, False
            return self._measure(request["device"], {**request, "artifact": build.artifact},
                                 self.timeout_s + (self.startup_grace_s if fresh else 0.0))

        return self._measure_each(builds, measure)

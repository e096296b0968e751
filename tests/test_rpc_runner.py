"""The tvm.rpc runner against a tracker and a server on localhost: timings, wrong and hanging candidates as
failure records, and a clear error (not a hang) once a crashing kernel has stopped TVM's server."""

from __future__ import annotations

import pytest

from test_measure import N, _build
from xcomp.autotune.rpc import RPCRunner, parse_tracker
from xcomp.errors import UserError

PARAMS = [((N,), "float32"), ((N,), "float32")]


@pytest.fixture()
def tracker_and_server():
    pytest.importorskip("tornado", reason="TVM's rpc tracker needs tornado (pip install 'xcomp[rpc]')")
    from tvm import rpc
    from tvm.rpc.tracker import Tracker

    tracker = Tracker("127.0.0.1", port=9190, port_end=9290, silent=True)
    server = rpc.Server("127.0.0.1", port=9300, port_end=9400, key="xcomp-test",
                        tracker_addr=("127.0.0.1", tracker.port), silent=True)
    yield tracker.port
    server.terminate()
    tracker.terminate()


def test_rpc_runner_measures_and_fails_cleanly(tmp_path, tracker_and_server):
    built = {name: _build(tmp_path, name, **kw) for name, kw in
             [("ref", {}), ("same", {}), ("wrong", {"body_factor": 3.0}), ("abort", {"mode": "abort"}),
              ("hang", {"mode": "hang"})]}
    runner = RPCRunner("127.0.0.1", tracker_and_server, "xcomp-test", timeout_s=3, number=2, repeat=3,
                       min_repeat_ms=1, startup_grace_s=10, request_timeout_s=10)
    runner.begin(None)
    order = ["same", "wrong", "hang", "same", "abort"]
    results = runner.run(built["ref"].artifact, [built[k] for k in order], "cpu", PARAMS)
    assert results[0].ok and len(results[0].latencies_ms) == 2 * 3  # cold weights, as locally: single runs
    assert results[1].error.startswith("wrong result")
    assert results[2].error.startswith("run:") and "expired" in results[2].error  # killed at the session timeout
    assert results[3].ok  # the server survived the hang
    assert results[4].error.startswith("run:")  # the crash: a failure record...
    with pytest.raises(UserError, match="restart it"):  # ...after which TVM's server serves no more
        runner.run(built["ref"].artifact, [built["same"]], "cpu", PARAMS)


def test_unreachable_tracker_and_bad_address_are_user_errors(capsys):
    from xcomp.cli import main

    assert main(["tune", "x.onnx", "--runner", "rpc", "--rpc-key", "k"]) == 1
    assert "--rpc-tracker HOST:PORT" in capsys.readouterr().err
    with pytest.raises(UserError, match="HOST:PORT"):
        parse_tracker("localhost")
    runner = RPCRunner("127.0.0.1", 1, "nokey", request_timeout_s=5)
    with pytest.raises(UserError, match="cannot get a session"):
        runner.begin(None)

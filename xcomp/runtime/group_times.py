"""Each operator group's calls timed inside whole runs of a compiled module: what the tuner's last step ranks
configs by and what the profile reports beside the times alone."""

from __future__ import annotations

from xcomp.timing import time_in_model


def in_model_times(module, runs: int = 10) -> dict:
    """{group name: [ms per call, ...]} timed inside whole runs of the model (a VM instrument around every call).
    Unlike a group timed alone, each call finds its inputs where the previous group left them and its weights
    wherever the rest of the model evicted them to, so large-weight convs take longer than alone
    (docs/decisions/in-model-step.md). Each time includes the instrument's own overhead, a few microseconds."""
    return interleaved_in_model_times([module], runs)[0]


def interleaved_in_model_times(modules, runs: int = 10) -> list:
    """in_model_times of each module (one dict per module), their runs alternating (timing.time_in_model), so a
    drift of the machine's speed reaches them alike (modules of one model built with different configs are
    compared so)."""
    import tvm
    from tvm import relax

    from .module import runtime_checks_as_input_errors

    machines = []
    device = modules[0].backend.device()
    with runtime_checks_as_input_errors():
        for module in modules:
            vm = relax.VirtualMachine(module._executable, module.backend.device())
            inputs = module.random_inputs(0)  # (a whole feed: the inputs fixed at compile time are not arguments)
            args = [tvm.runtime.tensor(inputs[spec.name], module.backend.device()) for spec in module.inputs]
            vm["main"](*args)  # warm-up, uninstrumented
            machines.append((vm, args))
        return time_in_model(machines, runs, sync=device.sync if modules[0].backend.spec.is_gpu else None)

"""autopar from Python: the planner's commands as functions, dicts in and out.

    import autopar
    best = autopar.autotune("gpt2-small", hw="dgx-a100-80g", nodes=1)
    print(best["best"]["mesh"], best["best"]["step_time_s"])

Each function runs the command of the same name in process (the same code as the `autopar`
binary) and returns its --json answer as a dict. Keyword arguments are the command's flags:
``hw="dgx-h100"`` is ``--hw dgx-h100``, ``simulate_top=2`` is ``--simulate-top 2``, ``True``
turns a flag on; ``dims={"seq": 128}`` is ``--dim seq=128``. A scheme or a search space may be
given as a dict (it is written to a temporary YAML file), or as a file's path. A user error
raises autopar.Error with the one line the command would print.
"""

import json as _json
import os as _os
import tempfile as _tempfile

from . import _autopar

__all__ = ["Error", "zoo", "inspect", "estimate", "autotune", "transform", "verify", "simulate",
           "call"]


class Error(Exception):
    """A command's error: the message names the file, field or node at fault."""

    def __init__(self, message, exit_code):
        super().__init__(message)
        self.exit_code = exit_code


def _flags(options, temporary):
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if key == "dims":
            for name, n in value.items():
                args += ["--dim", f"{name}={n}"]
        elif key in ("scheme", "space") and isinstance(value, dict):
            # JSON is YAML: the dict is the file.
            f = _tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
            with f:
                _json.dump(value, f)
            temporary.append(f.name)
            args += [flag, f.name]
        elif value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                args += [flag, str(v)]
        else:
            args += [flag, str(value)]
    return args


def call(command, *positional, **options):
    """Runs `autopar COMMAND POSITIONAL... --FLAGS... --json` and returns its answer as a dict.

    Raises Error when the command fails (exit code 2 or 3). A check that fails (verify's
    comparison, regress's plan quality) returns its answer, whose fields say so.
    """
    temporary = []
    try:
        args = [command] + [str(p) for p in positional] + _flags(options, temporary) + ["--json"]
        code, error, text = _autopar.call(args)
    finally:
        for path in temporary:
            _os.unlink(path)
    if code >= 2 or (code != 0 and not text):
        message = error.removeprefix("autopar: error: ") if error else f"exit code {code}"
        raise Error(message, code)
    return _json.loads(text)


def zoo(name=None, **options):
    """Writes a zoo model as ONNX (output="file.onnx"); without a name, lists the zoo."""
    return call("zoo", *([name] if name else []), **options)


def inspect(model, **options):
    """A model's graph: parameters, FLOPs, layers, ops, what the import fused."""
    return call("inspect", model, **options)


def estimate(model, scheme, hw, **options):
    """The analytic cost of one scheme (a dict or a YAML path) on a hardware profile."""
    return call("estimate", model, scheme=scheme, hw=hw, **options)


def autotune(model="gpt2-small", hw="dgx-a100-80g", **options):
    """The best scheme of a search space for the model on hw × nodes, written as a plan."""
    options.setdefault("output", _tempfile.mkdtemp(prefix="autopar-plan-"))
    return call("autotune", model, hw=hw, **options)


def transform(model, scheme, output, **options):
    """Lowers the model under a scheme into a plan directory."""
    return call("transform", model, scheme=scheme, output=output, **options)


def verify(plan, **options):
    """Runs a plan and one device side by side; "ok" says whether they agree."""
    return call("verify", plan, **options)


def simulate(plan, hw, **options):
    """One simulated step of a plan on a hardware profile."""
    return call("simulate", plan, hw=hw, **options)

"""OpInfo conformance: PyTorch's OpInfo sample inputs on the ``neuron`` device against ATen-CPU.

``python -m neuronsim.kernels.conformance [--ops add mul ...] [--dtypes float32 bfloat16 int32]
[--budget 10] [--out table.csv]``: for each OpInfo of ``op_db`` and the ``_foreach_*`` databases
(name + variant_test_name, and its in-place variant as a variant of its own) and each dtype it
supports on the CPU, each sample is made on ``neuron`` and compared with a CPU copy, as PyTorch's
``test_compare_cpu`` does (and skipping what that test skips). A row records whether the sample
ran natively (no fallback op while it ran, at least one native op other than a transfer),
pass/fail, the max error and the error text. A crashing sample is recorded and the run goes on;
an op stops taking samples once it used its time budget. The summary prints the pass rate of op
variants, of native and fallback samples, and the distinct ATen ops that passed natively."""

from __future__ import annotations

import argparse
import csv
import sys
import time
import unittest
from dataclasses import asdict, dataclass, field

import torch

TRANSFERS = {"aten::copy_", "aten::_to_copy", "aten::empty_strided", "aten::empty.memory_format"}


@dataclass
class Row:
    op: str
    variant: str
    dtype: str
    sample: int
    native: bool
    passed: bool
    max_error: float
    native_ops: str = ""
    error: str = ""


@dataclass
class Summary:
    rows: list[Row] = field(default_factory=list)
    skipped: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (op, variant, dtype) -> why

    def rate(self, native: bool) -> tuple[int, int]:
        rs = [r for r in self.rows if r.native is native]
        return sum(r.passed for r in rs), len(rs)

    def native_ops_passed(self) -> set[str]:
        return {op for r in self.rows if r.native and r.passed for op in r.native_ops.split(";") if op}

    def variants(self) -> dict[tuple[str, str], bool]:
        """(op, variant) -> whether every sample of it passed, over all dtypes."""
        out: dict[tuple[str, str], bool] = {}
        for r in self.rows:
            key = (r.op, r.variant)
            out[key] = out.get(key, True) and r.passed
        return out

    def report(self) -> str:
        (np_, nn), (fp, fn) = self.rate(True), self.rate(False)
        pct = lambda a, b: 100.0 * a / b if b else 100.0  # noqa: E731
        variants = self.variants()
        vp = sum(variants.values())
        return (
            f"op variants: {vp}/{len(variants)} passed ({pct(vp, len(variants)):.1f}%)  "
            f"samples: {len(self.rows)}  native: {np_}/{nn} passed ({pct(np_, nn):.1f}%)  "
            f"fallback: {fp}/{fn} passed ({pct(fp, fn):.1f}%)  "
            f"distinct ATen ops passed natively: {len(self.native_ops_passed())}  "
            f"skipped as PyTorch's test_compare_cpu skips them: {len(self.skipped)} (op, dtype) pairs"
        )


def compare_cpu_skip(opinfo, dtype: torch.dtype) -> str | None:
    """Why PyTorch's own device-vs-CPU test (``TestCommon.test_compare_cpu``) does not compare this
    op and dtype — undefined outputs (``empty``), CUDA-only ops (jiterator), known failures — or
    None. The runner follows the same list rather than a list of its own."""
    from torch.testing._internal.common_device_type import onlyCUDA
    from torch.testing._internal.opinfo.core import DecorateInfo

    for d in opinfo.decorators:
        if d is onlyCUDA:
            return "CUDA only"
        if not isinstance(d, DecorateInfo) or d.cls_name not in (None, "TestCommon"):
            continue
        if d.test_name not in (None, "test_compare_cpu") or d.device_type not in (None, "privateuse1"):
            continue
        if (d.dtypes is not None and dtype not in d.dtypes) or not d.active_if:
            continue
        for dec in d.decorators:
            if dec is unittest.expectedFailure:
                return "expected failure in test_compare_cpu"
            if getattr(dec, "__qualname__", "") == "skip.<locals>.decorator":
                cells = [c.cell_contents for c in dec.__closure__ or ()]
                reason = next((c for c in cells if isinstance(c, str)),
                              "skipped")
                return f"skipped by test_compare_cpu: {reason}"
    return None


def _tolerance(dtype: torch.dtype) -> dict:
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-5}
    return {
        "rtol": 2**-6,
        "atol": 2**-6,
    }  # two bf16 ulps: ATen rounds some intermediates, the engines keep fp32


def _map(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, list | tuple):
        return type(x)(_map(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map(v, fn) for k, v in x.items()}
    return x


def _map_devices(x):
    """The CPU copy of a sample names the CPU where it named the device (factories' ``device=``)."""
    if isinstance(x, torch.device) or (isinstance(x, str) and x.split(":")[0] == "neuron"):
        return torch.device("cpu") if torch.device(x).type == "neuron" else x
    if isinstance(x, list | tuple):
        return type(x)(_map_devices(v) for v in x)
    if isinstance(x, dict):
        return {k: _map_devices(v) for k, v in x.items()}
    return x


def _tensors(x) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _tensors(v)]
    return []


def _max_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    err = 0.0
    for g, w in zip(got, want, strict=False):
        if (
            g.shape == w.shape
            and g.numel()
            and (w.is_floating_point() or w.dtype == torch.bool or not w.is_complex())
        ):
            d = (g.double() - w.double()).abs()
            d = d[~(g.double().isnan() & w.double().isnan()) & (g.double() != w.double())]
            err = max(err, float(d.max()) if d.numel() else 0.0)
    return err


def run_sample(opinfo, sample, dtype: torch.dtype, fn=None):
    """(native, passed, max error, native ops, error) for one sample of ``fn`` (default: the
    OpInfo's op), made on the device as PyTorch's ``test_compare_cpu`` makes it (tensors a sample
    function puts on the CPU, like ``tensor_split``'s indices, stay there) and compared with its
    CPU copy. None for an in-place variant's sample whose ``self`` the op would broadcast:
    PyTorch's variant tests skip those (ATen rejects most; a few, like ``addbmm_``, resize)."""
    if fn is not None and sample.broadcasts_input:
        return None
    fn = opinfo if fn is None else fn
    to_cpu = lambda t: t.detach().cpu().requires_grad_(t.requires_grad)  # noqa: E731
    on_cpu = _map_devices(_map((sample.input, sample.args, sample.kwargs), to_cpu))  # before in-place ops
    try:
        want = _map(fn(on_cpu[0], *on_cpu[1], **on_cpu[2]), lambda t: t.cpu())  # factories: device= too
    except Exception as cpu_error:
        if fn is not opinfo:
            return None
        try:  # the CPU rejects the sample: the device must reject it the same way
            fn(sample.input, *sample.args, **sample.kwargs)
        except type(cpu_error):
            return False, True, 0.0, "", f"both raise {type(cpu_error).__name__}"
        why = f"the CPU raises {type(cpu_error).__name__}, the device does not"
        return False, False, float("nan"), "", why
    fresh = None  # a copy for a second device run of a random op (in-place variants write the first)
    if _seeded(opinfo):
        fresh = _map((sample.input, sample.args, sample.kwargs),
                     lambda t: t.detach().clone().requires_grad_(t.requires_grad))
    torch.neuron.clear_op_tracking()
    got = fn(sample.input, *sample.args, **sample.kwargs)
    executed = set(torch.neuron.get_executed_ops()) - TRANSFERS
    fallback = set(torch.neuron.get_fallback_ops()) - TRANSFERS
    native = bool(executed) and not fallback
    got_cpu = _map(got, lambda t: t.cpu())
    wl, gl = _tensors(want), _tensors(got_cpu)
    if fresh is not None and _draws_on_device(executed | fallback):
        # The device's generator draws other numbers than the CPU's (PyTorch marks
        # alpha_dropout's test_compare_cpu an expected failure on cuda and xpu for this reason, and
        # its randn sample keeps ``device=``, so the "CPU" copy runs on the device too): the
        # values are compared with a second device run under the same seed, and the results'
        # shapes and dtypes with the CPU's.
        for g, w in zip(gl, wl, strict=False):
            if g.shape != w.shape or g.dtype != w.dtype:
                why = f"{tuple(g.shape)} {g.dtype}, expected {tuple(w.shape)} {w.dtype}"
                return native, False, float("nan"), ";".join(sorted(executed)), why
        wl = _tensors(_map(fn(fresh[0], *fresh[1], **fresh[2]), lambda t: t.cpu()))
    err, msg = _max_error(gl, wl), ""
    try:
        if len(wl) != len(gl):
            raise AssertionError(f"{len(gl)} results, expected {len(wl)}")
        for g, w in zip(gl, wl, strict=True):
            torch.testing.assert_close(g, w, equal_nan=True, **_tolerance(dtype))
        passed = True
    except AssertionError as e:
        passed, msg = False, " ".join(str(e).split())[:300]
        if dtype in LOW_PRECISION and fresh is None:
            passed, msg = _closer_to_float64(fn, on_cpu, gl, wl, msg)
    return native, passed, err, ";".join(sorted(executed)), msg


LOW_PRECISION = (torch.bfloat16, torch.float16)


def _closer_to_float64(fn, on_cpu, got, want, msg: str) -> tuple[bool, str]:
    """A low-precision result the CPU's does not match still passes when it is at least as close
    as the CPU's to the op computed in float64 on the same inputs — PyTorch's own reference tests
    (``_ref_test_helper`` in test_ops.py) judge a mismatch the same way. ATen's CPU kernels round
    some bfloat16 intermediates the engines keep in fp32, so the device can be the more accurate."""
    widen = lambda t: t.detach().double() if t.dtype in LOW_PRECISION else t.detach()  # noqa: E731
    try:
        exact = _tensors(_map(fn(_map(on_cpu[0], widen), *_map(on_cpu[1], widen), **_map(on_cpu[2], widen)),
                              lambda t: t.cpu()))
    except Exception:  # the op has no float64 kernel on the CPU: the mismatch stands
        return False, msg
    if len(exact) != len(got) or any(e.shape != g.shape for e, g in zip(exact, got, strict=True)):
        return False, msg
    worst = []
    for g, w, e in zip(got, want, exact, strict=True):
        if not g.is_floating_point():
            if not torch.equal(g, w):
                return False, msg
            continue
        device_error = (g.double() - e.double()).abs().nan_to_num(0.0).max().item() if g.numel() else 0.0
        cpu_error = (w.double() - e.double()).abs().nan_to_num(0.0).max().item() if w.numel() else 0.0
        if device_error > cpu_error:
            return False, msg
        worst.append((device_error, cpu_error))
    dev, cpu = max(worst, default=(0.0, 0.0))
    return True, f"closer to float64 than the CPU (max error {dev:.3g}, the CPU's {cpu:.3g}): {msg}"[:300]


def _seeded(opinfo) -> bool:
    """Whether the OpInfo runs its op under a fixed seed (``wrapper_set_seed``): a random op."""
    code = getattr(getattr(opinfo, "op", None), "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def _draws_on_device(ran: set[str]) -> bool:
    """Whether an op that ran on the device (natively or on the host) drew from the device's
    generator: its schema takes a ``Generator``."""
    from neuronsim.kernels.registry import op_overload

    for name in ran:
        try:
            op = op_overload(name)
        except AttributeError:
            continue
        if any("Generator" in str(a.type) for a in op._schema.arguments):
            return True
    return False


def _device_samples(opinfo, dtype):
    """The OpInfo's samples made on the device; made on the CPU and moved if that fails."""
    try:
        return list(opinfo.sample_inputs("neuron", dtype))
    except Exception:  # a sample function the device cannot run: the samples move afterwards
        to_device = lambda t: t.detach().to("neuron").requires_grad_(t.requires_grad)  # noqa: E731
        return [s.transform(to_device) for s in opinfo.sample_inputs("cpu", dtype)]


DTYPES = (torch.float32, torch.bfloat16, torch.int32)
INPLACE = "(inplace)"  # suffix of the variant name for an OpInfo's in-place variant


def op_databases():
    """PyTorch's OpInfo databases: ``op_db`` and the ``_foreach_*`` ones."""
    from torch.testing._internal import common_methods_invocations as cmi

    return [*cmi.op_db, *cmi.foreach_unary_op_db, *cmi.foreach_binary_op_db, *cmi.foreach_pointwise_op_db,
            *cmi.foreach_reduce_op_db, *cmi.foreach_other_op_db]


def _crash_row(name, variant, dtype, k, what: str, e: Exception) -> Row:
    return Row(name, variant, dtype, k, False, False, float("nan"), "",
               f"{what}{type(e).__name__}: {' '.join(str(e).split())[:300]}")


def run(
    ops: list[str] | None = None,
    dtypes=DTYPES,
    budget_s: float = 10.0,
    max_samples: int = 50,
    log=None,
) -> Summary:
    """Every OpInfo (and its in-place variant, as its own variant) for each of ``dtypes`` it
    supports on the CPU, sample by sample."""
    import neuronsim

    neuronsim.enable()
    summary = Summary()
    for opinfo in op_databases():
        if ops and opinfo.name not in ops:
            continue
        supported = opinfo.supported_dtypes("cpu")
        variants = [(opinfo.variant_test_name, None)]
        if opinfo.inplace_variant is not None:
            variants.append((opinfo.variant_test_name + INPLACE, opinfo.inplace_variant))
        for dtype in dtypes:
            dname = str(dtype).removeprefix("torch.")
            if dtype not in supported:
                continue
            why = compare_cpu_skip(opinfo, dtype)
            if why is not None:
                summary.skipped[(opinfo.name, opinfo.variant_test_name, dname)] = why
                continue
            for variant, fn in variants:
                start = time.monotonic()
                torch.manual_seed(0)  # the same samples in every run, whichever ops ran before
                try:
                    samples = _device_samples(opinfo, dtype)
                except Exception as e:  # the sample generator itself failed
                    summary.rows.append(_crash_row(opinfo.name, variant, dname, -1, "samples: ", e))
                    continue
                for k, sample in enumerate(samples):
                    # The first sample always runs: making the samples may use up the budget on a
                    # busy machine, and a variant with no row would drop out of the pass rate.
                    if k >= max_samples or (k and time.monotonic() - start > budget_s):
                        break
                    try:
                        result = run_sample(opinfo, sample, dtype, fn)
                    except Exception as e:  # a crash is a failure of this sample; the run goes on
                        summary.rows.append(_crash_row(opinfo.name, variant, dname, k, "", e))
                        continue
                    if result is not None:
                        summary.rows.append(Row(opinfo.name, variant, dname, k, *result))
                if log:
                    log(f"{opinfo.name}.{variant} {dtype}")
    return summary


def write_csv(summary: Summary, path: str) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(Row.__dataclass_fields__))
        w.writeheader()
        for r in summary.rows:
            w.writerow(asdict(r))


def read_csv(path: str, dtypes=DTYPES) -> Summary:
    """A summary from a table ``--out`` wrote (the skipped list is recomputed: it needs no run)."""
    summary = Summary()
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            summary.rows.append(Row(
                r["op"], r["variant"], r["dtype"], int(r["sample"]), r["native"] == "True",
                r["passed"] == "True", float(r["max_error"]), r["native_ops"], r["error"]))
    for opinfo in op_databases():
        for dtype in dtypes:
            why = compare_cpu_skip(opinfo, dtype) if dtype in opinfo.supported_dtypes("cpu") else None
            if why is not None:
                key = (opinfo.name, opinfo.variant_test_name, str(dtype).removeprefix("torch."))
                summary.skipped[key] = why
    return summary


def write_markdown(summary: Summary, path: str, command: str) -> None:
    """The report as Markdown: the rates, the ATen ops that passed natively, every failing
    variant with its first error, and what was skipped and why."""
    variants = summary.variants()
    failing = sorted(k for k, ok in variants.items() if not ok)
    first_error = {}
    for r in summary.rows:
        if not r.passed:
            first_error.setdefault((r.op, r.variant), f"{r.dtype}: {r.error}")
    natives = sorted(summary.native_ops_passed())
    lines = [
        "# OpInfo conformance of the `neuron` device",
        "",
        f"Generated by `{command}` (PyTorch {torch.__version__}).",
        "",
        "Every OpInfo of PyTorch's `op_db` and `_foreach_*` databases (and each in-place variant, as a",
        "variant of its own), for float32, bfloat16 and int32 where the CPU supports them: samples are",
        "made on the device and compared with a CPU copy, as PyTorch's `TestCommon.test_compare_cpu`",
        "does, skipping what that test skips. A sample is *native* when no op fell back to the host",
        "while it ran; a fallback sample passes by construction unless the device layer is wrong.",
        "A random op (its OpInfo runs it under a fixed seed) that drew from the device's generator is",
        "compared with a second device run under the same seed, and with the CPU in shape and dtype.",
        "A bfloat16 result the CPU's does not match still passes when it is at least as close as the",
        "CPU's to the op computed in float64 on the same inputs (PyTorch's reference tests judge it so).",
        "",
        "```",
        summary.report(),
        "```",
        "",
        f"## ATen ops that passed in fully native samples ({len(natives)})",
        "",
        ", ".join(f"`{n.removeprefix('aten::')}`" for n in natives),
        "",
        f"## Failing variants ({len(failing)})",
        "",
        "| op | variant | first failure |",
        "|---|---|---|",
        *(f"| `{op}` | {v or '-'} | {first_error[(op, v)][:160].replace('|', '/')} |" for op, v in failing),
        "",
        f"## Skipped as test_compare_cpu skips them ({len(summary.skipped)} op/dtype pairs)",
        "",
        *(f"- `{op}` {v} {d}: {why}" for (op, v, d), why in sorted(summary.skipped.items())),
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", nargs="*", help="OpInfo names (default: all of op_db)")
    p.add_argument("--dtypes", nargs="*", default=[str(d).removeprefix("torch.") for d in DTYPES])
    p.add_argument("--budget", type=float, default=10.0, help="seconds of samples per op and dtype")
    p.add_argument("--out", help="CSV table of every sample")
    p.add_argument("--markdown", help="the report as Markdown (docs/conformance.md)")
    p.add_argument("--from-csv", help="report on a table an earlier run wrote instead of running")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    log = (lambda m: print(m, file=sys.stderr, flush=True)) if a.verbose else None
    dtypes = tuple(getattr(torch, d) for d in a.dtypes)
    summary = read_csv(a.from_csv, dtypes) if a.from_csv else run(a.ops, dtypes, a.budget, log=log)
    if a.out:
        write_csv(summary, a.out)
    if a.markdown:
        command = "python -m neuronsim.kernels.conformance " + " ".join(argv or sys.argv[1:])
        write_markdown(summary, a.markdown, command)
    print(summary.report())
    return 0


if __name__ == "__main__":
    sys.exit(main())

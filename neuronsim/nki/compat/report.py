"""The compatibility table: one row per case, the reason class of each failure, totals."""

from __future__ import annotations

import re

# Why a case did not run, from its first error: the work that unblocks it.
_REASONS = (
    # the library's own code fails on any platform (a test's output
    # descriptor reads 'mask_out_hbm' from inputs keyed 'mask_out_hbm.must_alias_input'; moe_tkg builds a
    # dataclass without one of its fields; moe_tkg's MX loaders read `.base_tensor`, an attribute of the
    # library's TensorView, from its HBM arguments, which no NKI release's NkiTensor has: docs/nki-compat.md)
    ("broken upstream", re.compile(r"IndentationError|SyntaxError|NameError: name 'Platforms'|"
                                   r"'NkiTensor' object has no attribute 'base_tensor'|"
                                   r"No module named 'nkilib_src\.|KeyError: 'mask_out_hbm'|"
                                   r"missing 1 required positional argument: 'remainderIFused'|"
                                   r"No module named 'nki_samples\.reference'")),
    ("blocker 7 (dynamic addressing, registers, collectives, MX)",
     re.compile(r"nki\.collectives|sendrecv|register_|vector_offset|scalar_offset|quantize_mx|nc_matmul_mx"
                r"|indirect|_x4|float8_e8m0|Scale tensor F dimension")),
    # the test's own inputs or references need more memory than this host has (AWS runs the
    # library on hosts with hundreds of GiB)
    ("host memory", re.compile(r"^before the kernel ran: MemoryError|^the test process died")),
    ("legacy API (neuronxcc)", re.compile(r"neuronxcc|No module named 'torch_neuronx'")),
    ("framework main", re.compile(r"^needs (torch_xla|jax|diffusers)")),
    ("kernels only", re.compile(r"^no kernel launched")),
)


# reasons that are work outside neuronsim's current-API frontend
_ELSEWHERE = ("blocker 7", "legacy", "broken upstream", "framework", "kernels only", "host memory")


def reason(row: dict) -> str:
    if row.get("correct"):  # a negative test passes when the kernel rejects its inputs
        return ""
    err = row.get("error") or ""
    for name, pattern in _REASONS:
        if pattern.search(err):
            return name
    mx_case = "_x4" in row.get("test", "") or "mxfp" in row.get("test", "")
    if mx_case and not row.get("ran"):
        return _REASONS[1][0]  # blocker 7: an MX-format case failing in its own set-up
    # a kernel that ran and disagrees is a wrong result whatever its format: never hidden as work
    # elsewhere (moe_bwmm_mx_cte's NaN output once was)
    if err.startswith("before the kernel ran: FixtureLookupError"):
        return "compat harness"
    return "neuronsim" if not row.get("ran") else "wrong result"


def _time(v) -> str:
    return "" if v is None else f"{v * 1e6:.1f} us"


def _cell(text: str) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")[:160]


def markdown(rows: list[dict], chips: list[str], title: str) -> str:
    head = ["kernel", "case", "ran", "correct", "max error", *(f"{c} time" for c in chips), "reason",
            "first error"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(rows, key=lambda r: (r.get("kernel", ""), r.get("test", ""))):
        case = r.get("test", "").split("::")[-1]
        err = r.get("max_error")
        lines.append("| " + " | ".join([
            _cell(r.get("kernel", "")), _cell(case), "yes" if r.get("ran") else "no",
            "yes" if r.get("correct") else "no", "" if err is None else f"{err:.3g}",
            *(_time(r.get(f"{c}_s")) for c in chips), reason(r), _cell(r.get("error", "")),
        ]) + " |")
    lines += ["", *totals(rows)]
    return "\n".join(lines) + "\n"


def totals(rows: list[dict]) -> list[str]:
    """Totals over cases and over kernels (a kernel counts as correct when all its cases are)."""
    kernels: dict[str, list[dict]] = {}
    for r in rows:
        kernels.setdefault(r.get("kernel", "?"), []).append(r)
    ok_cases = sum(1 for r in rows if r.get("correct"))
    ran_cases = sum(1 for r in rows if r.get("ran"))
    ok_kernels = [k for k, rs in kernels.items() if all(r.get("correct") for r in rs)]
    blocked = [k for k, rs in kernels.items() if k not in ok_kernels
               and all(reason(r).startswith(_ELSEWHERE) for r in rs if not r.get("correct"))]
    n, nb = len(kernels), len(blocked)
    out = [f"- cases: {len(rows)}; ran {ran_cases}; correct {ok_cases}",
           f"- kernels: {n}; all cases correct {len(ok_kernels)} ({100 * len(ok_kernels) / max(n, 1):.0f}%)"]
    if nb:
        out.append(f"- kernels blocked only by work outside neuronsim's current-API frontend "
                   f"(blocker 7, legacy API, broken upstream, framework mains, host memory): {nb}; "
                   f"correct among the others: {len(ok_kernels)}/{n - nb} "
                   f"({100 * len(ok_kernels) / max(n - nb, 1):.0f}%)")
    causes: dict[str, int] = {}
    for r in rows:
        if not r.get("correct"):
            causes[reason(r)] = causes.get(reason(r), 0) + 1
    if causes:
        out.append("- failing cases by reason: " + ", ".join(f"{k}: {v}" for k, v in sorted(causes.items())))
    return out

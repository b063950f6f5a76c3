"""``python -m neuronsim.sweep``: the model sweep (see ``neuronsim/sweep/__init__.py``).

    python -m neuronsim.sweep --write docs/compat.md   # everything: HF architectures and examples/
    python -m neuronsim.sweep --models gpt2 bert --modes eager
    python -m neuronsim.sweep --groups decoder moe --json results.json
    python -m neuronsim.sweep --scripts nanogpt --models    # one example script, no HF model
"""

from __future__ import annotations

import argparse
import platform
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    from neuronsim.sweep import hf_zoo, scripts

    parser = argparse.ArgumentParser(prog="python -m neuronsim.sweep", description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", help="architectures by name (default: all; none: no HF model)")
    parser.add_argument("--groups", nargs="*", help="architecture groups: " + ", ".join(
        sorted({a.group for a in hf_zoo.ARCHS})))
    parser.add_argument("--modes", nargs="*", default=["eager", "compiled", "generate"],
                        choices=["eager", "compiled", "generate"])
    parser.add_argument("--scripts", nargs="*", help="example scripts by name (default: all; none: no "
                        "script): " + ", ".join(s.name for s in scripts.SCRIPTS))
    parser.add_argument("--write", metavar="FILE.md", help="write the tables as markdown (docs/compat.md)")
    parser.add_argument("--json", metavar="FILE", help="write every check as JSON")
    parser.add_argument("--list", action="store_true", help="list the architectures and scripts and exit")
    parser.add_argument("--tabulate", nargs="+", metavar="FILE.json", help="run nothing: tabulate the checks "
                        "of earlier --json files (a sweep split over several processes) into --write; a "
                        "check in a later file replaces the same architecture and mode in an earlier one")
    args = parser.parse_args(argv)
    if args.tabulate:
        return tabulate(args.tabulate, args.write)
    archs = [a for a in hf_zoo.ARCHS if (args.models is None or a.name in args.models)
             and (not args.groups or a.group in args.groups)]
    unknown = set(args.models or ()) - {a.name for a in hf_zoo.ARCHS}
    if unknown:
        parser.error(f"unknown architectures: {sorted(unknown)}")
    chosen = [s for s in scripts.SCRIPTS if args.scripts is None or s.name in args.scripts]
    unknown = set(args.scripts or ()) - set(scripts.BY_NAME)
    if unknown:
        parser.error(f"unknown scripts: {sorted(unknown)}")
    if args.list:
        for a in archs:
            print(f"{a.name:20s} {a.group:10s} {a.model_class}")
        for s in chosen:
            print(f"{s.name:20s} {'script':10s} examples/{s.name}.py {' '.join(s.args)}")
        return 0
    command = " ".join(["python -m neuronsim.sweep", *(argv if argv is not None else sys.argv[1:])])
    return run(archs, args.modes, chosen, args.write, args.json, command)


def run(archs, modes, chosen_scripts, write: str | None, json_path: str | None, command: str) -> int:
    import torch
    import transformers

    import neuronsim
    from neuronsim.sweep import hf_check, report, scripts

    neuronsim.enable()
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore")
    checks = []
    for arch in archs:
        for mode in modes:
            if mode == "generate" and not arch.generates:
                continue
            c = hf_check.check(arch, mode)
            print(report.line(c), flush=True)
            checks.append(c)
    runs = []
    for script in chosen_scripts:
        r = scripts.run_script(script)
        print(scripts.line(r), flush=True)
        runs.append(r)
    for mode, (passed, n) in report.totals(checks).items():
        print(f"{mode}: {passed}/{n} passed ({100 * passed / n:.1f}%)")
    if runs:
        print(f"scripts: {sum(r.passed for r in runs)}/{len(runs)} passed")
    environment = (f"torch {torch.__version__}, transformers {transformers.__version__}, "
                   f"Python {platform.python_version()}")
    if write:
        with open(write, "w") as f:
            f.write(report.markdown(checks, runs, command, environment))
    if json_path:
        with open(json_path, "w") as f:
            f.write(report.as_json(checks, runs))
    return 0 if all(c.passed for c in checks) and all(r.passed or r.status == "skip" for r in runs) else 1


def tabulate(paths: list[str], write: str | None) -> int:
    import torch
    import transformers

    from neuronsim.sweep import report

    checks, runs = {}, {}
    for path in paths:  # a check or script in a later file replaces the same one in an earlier file
        with open(path) as f:
            more_checks, more_runs = report.from_json(f.read())
        checks.update(((c.arch, c.mode), c) for c in more_checks)
        runs.update((r.script, r) for r in more_runs)
    checks, runs = list(checks.values()), list(runs.values())
    environment = (f"torch {torch.__version__}, transformers {transformers.__version__}, "
                   f"Python {platform.python_version()}")
    text = report.markdown(checks, runs, "python -m neuronsim.sweep --write docs/compat.md", environment)
    if write:
        with open(write, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

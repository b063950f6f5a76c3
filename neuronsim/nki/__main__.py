"""``python -m neuronsim.nki kernel.py [args...]``: run a kernel file with ``import nki`` resolved here."""

from __future__ import annotations

import os
import runpy
import sys

from neuronsim import env


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        print(f"The alias needs no real `nki` package installed; {env.NEURON_SIM}=1 is set for the script.")
        return 0 if argv else 2
    os.environ.setdefault(env.NEURON_SIM, "1")
    from neuronsim.nki_alias import install_alias

    install_alias(force=True)
    script = argv[0]
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())

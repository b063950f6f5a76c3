"""Worker: ``neuronsim profile`` of one rank of a script, into ``argv[1]/rank<RANK>``."""

import os
import sys

from neuronsim.cli.main import main

if __name__ == "__main__":
    out, script = sys.argv[1], sys.argv[2]
    main(["profile", "--no-host-ops", "-o", os.path.join(out, f"rank{os.environ['RANK']}"), script])

"""``python -m neuronsim.kernels``: rewrite ``manifest.py`` from the families' ``@native`` decorators.

Run it after adding, renaming or removing a native op; ``tests/kernels/test_registry.py`` fails
until the manifest matches the decorators.
"""

from __future__ import annotations

from pathlib import Path

from neuronsim.kernels.registry import derive_manifest, render_manifest


def main() -> None:
    path = Path(__file__).with_name("manifest.py")
    families = derive_manifest()
    path.write_text(render_manifest(families))
    print(f"{path}: {sum(map(len, families.values()))} ops in {len(families)} families")


if __name__ == "__main__":
    main()

"""The example scripts' tests run in one process with the emulated device enabled once."""

from __future__ import annotations

import neuronsim

neuronsim.enable()

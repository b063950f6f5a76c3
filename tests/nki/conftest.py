"""Fixtures for the NKI frontend tests; examples/nki on the path."""

import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nki"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))


@pytest.fixture(params=["trn2", "trn3"])
def chip(request):
    return request.param

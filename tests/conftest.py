"""Options of the whole suite; the device's cached-op library, built before any test registers the
device."""

from neuronsim.device.cpp import build as _cpp_build
from neuronsim.errors import NativeBuildError as _NativeBuildError

# (At import, not in pytest_configure: the conftest of a test directory given on the command line is
# imported before that hook runs, and tests/device/conftest.py registers the device at import.) A process
# that does not find the library runs on the Python path and has it built after it exits
# (device/cpp/background.py); the suite tests the C++ path too (tests/device/test_cpp_cache.py).
try:
    _cpp_build.build_ops()
except _NativeBuildError:
    pass  # the tests that register the device report it


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="Rewrite tests/golden/data from this tree's profiles (review the diff before committing).",
    )

"""Options of the whole suite."""


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="Rewrite tests/golden/data from this tree's profiles (review the diff before committing).",
    )

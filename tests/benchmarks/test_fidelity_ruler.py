"""The fidelity ruler (benchmarks/fidelity) runs: its DMA-overview figures are all measured.

The ruler's accuracy is a benchmark (python benchmarks/fidelity/run.py prints it); this test only
keeps the ruler working — its kernels trace, schedule and yield every measure — on the cheap kernels.
"""

import sys
from pathlib import Path

RULER = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity"
sys.path.insert(0, str(RULER))

import figures  # noqa: E402
import run  # noqa: E402


def test_every_figure_names_its_image_and_reading():
    for f in figures.FIGURES:
        assert f.image.endswith(".png") and f.read and f.hardware_ns > 0
        assert f.page in (figures.GUIDE, figures.DMA_PAGE)


def test_dma_overview_figures_are_all_measured():
    result = run.compare("dma")
    assert result["figures"] == sum(1 for f in figures.FIGURES if "dma" in f.kernel)
    assert result["measured"] == result["figures"]
    for row in result["rows"]:
        assert row["simulated_ns"] is not None, row
    assert result["mape_by_page"] == {figures.DMA_PAGE: (result["mape"], result["measured"])}

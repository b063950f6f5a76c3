"""``neuronxcc`` under the legacy alias: only its ``nki`` package (``from neuronxcc import nki``)."""

from neuronsim.nki import legacy as nki  # noqa: F401

"""ScalarE: instruction checks, semantics (numpy reference and Numba) and costs. (being written)"""

OPS = []

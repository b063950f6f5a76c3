"""NKI 0.6 names AWS's kernels use (issue 18, blockers 1-6 and 8): each with its documented behaviour."""

import importlib
import sys

import ml_dtypes
import numpy as np
import pytest

import neuronsim.nki as nki
import neuronsim.nki.isa as nisa
import neuronsim.nki.language as nl
from neuronsim.errors import ConstraintError, DtypeError
from neuronsim.nki_alias import install_alias


@pytest.fixture
def alias():
    """The ``import nki`` alias for one test, removed after it (other tests import without it)."""
    path, modules = list(sys.meta_path), set(sys.modules)
    install_alias(force=True)
    yield
    sys.meta_path[:] = path
    for name in set(sys.modules) - modules:
        if name == "nki" or name.startswith("nki."):
            del sys.modules[name]


def test_module_names_resolve_through_the_alias(alias):
    assert importlib.import_module("nki.isa.constants").oob_mode is nisa.oob_mode
    assert importlib.import_module("nki.typing").tensor is nki.typing.tensor
    assert importlib.import_module("nki.dtype").bfloat16 == nl.bfloat16
    assert nki.dtype is nl.dtypes
    ann = nki.typing.tensor[128, 512]
    assert ann.shape == (128, 512) and not ann.mutable and nki.typing.mutable_tensor.mutable


def test_nkiobject_subclasses_take_keyword_arguments():
    class SectionParams(nl.NKIObject):
        section_idx = None

    p = SectionParams(section_idx=3, section_offset=128)
    assert (p.section_idx, p.section_offset) == (3, 128)



def test_nkiobject_classes_get_nki_s_data_class_initializer():
    """The language guide: every NKIObject class is like a data class, with or without @dataclass;
    the generated __init__ takes each attribute (defaulting to None) and calls __post_init__."""
    from dataclasses import dataclass, field

    @dataclass
    class SectionParams(nl.NKIObject):  # attention_cte: plain attributes, built with keywords
        section_idx = None
        section_offset = 0

    @dataclass(frozen=True)
    class Sizes(nl.NKIObject):
        tokens: int
        hidden: int = 512
        tiles: list = field(default_factory=list)

        def __post_init__(self):
            object.__setattr__(self, "tiles", [self.hidden // 128] * 2)

    class Fixed(nl.NKIObject):
        def __init__(self, a):
            self.a = a

    p = SectionParams(section_idx=2)
    assert (p.section_idx, p.section_offset) == (2, 0)
    assert Sizes(4) == Sizes(tokens=4, hidden=512) and Sizes().tokens is None  # omitted field: None
    assert Sizes(1, 256).tiles == [2, 2]
    with pytest.raises(TypeError, match="takes 3 positional arguments"):
        Sizes(1, 2, [], 4)
    assert Fixed(5).a == 5  # a class's own __init__ is kept
    with pytest.raises(TypeError):
        Fixed(a=1, b=2)


def test_buffer_predicates():
    assert nl.is_hbm(nl.shared_hbm) and nl.is_hbm(nl.hbm) and not nl.is_hbm(nl.sbuf)
    assert nl.is_on_chip(nl.psum) and nl.is_psum(nl.psum) and nl.is_sbuf(nl.sbuf)


@nki.jit
def _add_rows(a, row):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.load(row)))  # [1, F] + [P, F]: broadcast across partitions
    return out


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.int32])
def test_add_broadcasts_a_one_partition_tile_across_partitions(dtype):
    rng = np.random.default_rng(0)
    a = (rng.random((128, 600)) * 50).astype(dtype)
    row = (rng.random((1, 600)) * 50).astype(dtype)
    out, prof = nki.simulate(_add_rows, profile=True)(a, row)
    np.testing.assert_array_equal(out, (a.astype(np.float32) + row.astype(np.float32)).astype(dtype))
    engines = {e.engine for e in prof.timeline}
    # the partition broadcast is data movement with a cost: TensorE for floats, DMA for integers
    assert ("tensor" in engines) == (dtype != np.int32)


@nki.jit
def _broadcast_mod_var(x, row):
    b = nl.broadcast_to(nl.load(row), (128, 64))
    m = nl.mod(nl.load(x), 3.0)
    v = nl.var(nl.load(x), axis=1)
    e = nl.expand_dims(nl.load(x), 1)
    outs = []
    for t in (b, m, v):
        o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nl.store(o, t)
        outs.append(o)
    assert e.shape == (128, 1, 64)
    return tuple(outs)


def test_broadcast_to_mod_var_expand_dims():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((128, 64)) * 7).astype(np.float32)
    row = rng.standard_normal((1, 64)).astype(np.float32)
    b, m, v = nki.simulate(_broadcast_mod_var)(x, row)
    np.testing.assert_array_equal(b, np.broadcast_to(row, (128, 64)))
    np.testing.assert_allclose(m, np.mod(x, 3.0), atol=1e-5)
    np.testing.assert_allclose(v, x.var(axis=1, keepdims=True), rtol=1e-4)


@nki.jit
def _cascaded_max(x):
    out = nl.ndarray((1, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(x[:, 0:4]))
    return out.reshape((1, 4, 1))  # returning a reshaped HBM tensor, as rotational_topk does


def test_returning_a_reshaped_hbm_tensor(tmp_path):
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    out = nki.simulate(_cascaded_max)(x)
    assert out.shape == (1, 4, 1)
    np.testing.assert_array_equal(out.ravel(), x[0, :4])


def test_shared_constant_from_a_npy_path(tmp_path):
    path = tmp_path / "rot.npy"
    np.save(path, np.arange(128 * 4, dtype=np.float32).reshape(128, 4))

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        c = nl.load(nl.shared_constant(str(path)))
        nl.store(out, nl.add(nl.load(x), c))
        return out

    x = np.ones((128, 4), np.float32)
    np.testing.assert_array_equal(nki.simulate(k)(x), x + np.load(path))


def test_isa_names_of_nki_0_6():
    assert nisa.get_nc_sub_version is not None and issubclass(nisa.NkiInstruction, object)
    with pytest.raises(TypeError):
        bool(nisa.VirtualRegister())

    @nki.jit
    def k(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        val = nl.ndarray((16, 8), dtype=nl.bfloat16, buffer=nl.sbuf)
        idx = nl.ndarray((16, 8), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.topk(val, idx, t, 8)  # NKI 0.6's topk reads a bf16 snake
        return x

    with pytest.raises(DtypeError, match=r"test_api_names.py:\d+: nisa.topk: src must be bfloat16"):
        nki.simulate(k)(np.ones((16, 8), np.float32))


def test_partition_mismatch_other_than_one_is_still_an_error():
    @nki.jit
    def k(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.add(nl.load(a), nl.load(b)))
        return out

    with pytest.raises(ConstraintError, match="partitions"):
        nki.simulate(k)(np.ones((128, 4), np.float32), np.ones((64, 4), np.float32))


def test_isa_enums_take_aws_integer_values():
    """AWS's nki.isa enums are ints; the library passes dge_mode=3 (none) from a helper."""
    assert nisa.dge_mode(3) is nisa.dge_mode.none and nisa.dge_mode(1) is nisa.dge_mode.swdge
    assert nisa.oob_mode(1) is nisa.oob_mode.skip and nisa.engine(5) is nisa.engine.vector
    assert nisa.reduce_cmd(3) is nisa.reduce_cmd.reset_reduce
    with pytest.raises(ValueError):
        nisa.dge_mode(7)


def test_on_chip_views_stay_two_dimensional():
    """The language guide: an int index on a free dim drops it unless that would leave an on-chip
    tensor < 2-D, then the last free dim stays at size 1 (attention_cte's bound[:n, g][:n, :1])."""

    @nki.jit
    def k(a):
        t = nl.ndarray((128, 64, 32), dtype=nl.float32, buffer=nl.sbuf)
        u = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
        assert t[:, 0].shape == (128, 32) and t[:, 0, 10].shape == (128, 1)
        assert u[:64, 3].shape == (64, 1) and u[:64, 3][:64, :1].shape == (64, 1)
        return a

    k.specialize((np.zeros((2, 2), np.float32),))

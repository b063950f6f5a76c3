"""What the families declare (neuronsim/kernels/registry.py): the table their @native decorators
fill, and the manifest generated from it."""

from __future__ import annotations

from pathlib import Path

from neuronsim.kernels import manifest, registry


def test_the_manifest_is_the_one_the_decorators_give():
    derived = registry.derive_manifest()
    assert manifest.FAMILIES == derived, "stale manifest: run `python -m neuronsim.kernels`"
    assert registry.render_manifest(derived) == Path(manifest.__file__).read_text()


def test_each_table_entry_names_the_family_that_registered_it():
    registry.derive_manifest()
    for module, names in manifest.FAMILIES.items():
        for name in names:
            spec = registry.TABLE[name]
            assert spec.family == module and spec.planner.__module__ == module, name


def test_the_table_holds_what_the_options_say():
    registry.derive_manifest()
    table = registry.TABLE
    assert table["aten::native_dropout.default"].seeded
    assert table["aten::_fused_sdp_choice.default"].answers
    assert table["aten::_fused_adam_.tensor_lr"].redirect is not None
    assert table["aten::_fused_adam_.default"].runtime == ("lr",)
    plain = table["aten::add.Tensor"]
    assert not (plain.seeded or plain.answers or plain.redirect or plain.runtime)


"""The text model: sharding and mesh attributes, signatures of printed
functions, reshape groups and leaf paths."""

import jax
import pytest

from polymesh_jax import format_path
from polymesh_jax._attrs import (AttrSyntaxError, AxisRef, DimSharding, MeshDef, Sharding, _quote, _unquote,
                                 parse_functions, parse_mesh, parse_meshes, parse_sharding, parse_sharding_list,
                                 symbol_text)
from polymesh_jax._emit import reassociation


@pytest.mark.parametrize("text", [
    '#polymesh.sharding<@mesh1, [{"a"}, {"b"}]>',
    '#polymesh.sharding<@m, [{"a", "b"}, {?}], replicated={"c"}>',
    '#polymesh.sharding<@m, [{"x":(1)2}, {}], unreduced={"y"}>',
    '#polymesh.sharding<@m, [{"a", ?}, {}, {"x":(2)4, "b"}]>',
    '#polymesh.sharding<@dev5, []>',
    '#polymesh.sharding<@m, [{"a b\\22c"}]>',
    '#polymesh.sharding<@"my mesh", [{"caf\\C3\\A9", "back\\\\slash"}, {"new\\0Aline"}]>',
])
def test_sharding_round_trip(text):
    sharding, inline = parse_sharding(text)
    assert inline is None
    assert sharding.attr_text() == text


@pytest.mark.parametrize("name, literal", [
    ("plain", '"plain"'),
    ('q"uote', '"q\\22uote"'),
    ("back\\slash", '"back\\\\slash"'),
    ("new\nline", '"new\\0Aline"'),
    ("tab\there", '"tab\\09here"'),
    ("café", '"caf\\C3\\A9"'),
    ("軸", '"\\E8\\BB\\B8"'),
    ("", '""'),
])
def test_names_are_escaped_as_mlir_prints_them(name, literal):
    """Byte for byte what llvm::printEscapedString writes (and so what
    polymesh-opt prints back): the bridge's text and polymesh-opt's agree."""
    assert _quote(name) == literal
    assert _unquote(literal) == name
    mesh = MeshDef(((name, 2), ("b", 2)))
    assert parse_mesh(mesh.text()) == mesh
    sharding = Sharding("m", (DimSharding((AxisRef(name),)), DimSharding()))
    assert parse_sharding(sharding.attr_text())[0] == sharding


def test_other_escapes_and_symbols():
    # MLIR's lexer also reads \", \n and \t; they print back as \XX.
    assert _unquote('"a\\"b\\nc\\td"') == 'a"b\nc\td'
    assert symbol_text("mesh_a2.x$") == "@mesh_a2.x$"
    assert symbol_text("my mesh") == '@"my mesh"'
    assert symbol_text("2d") == '@"2d"'
    sharding = Sharding("my mesh", (DimSharding(),))
    assert sharding.attr_text() == '#polymesh.sharding<@"my mesh", [{}]>'
    assert parse_sharding(sharding.attr_text())[0] == sharding
    with pytest.raises(AttrSyntaxError, match="must be a str"):
        _quote(3)
    with pytest.raises(AttrSyntaxError, match="not valid Unicode"):
        _quote("\ud800")
    with pytest.raises(AttrSyntaxError, match="unknown escape"):
        _unquote('"a\\qb"')
    with pytest.raises(AttrSyntaxError, match="not UTF-8"):
        _unquote('"\\FF"')


def test_shardy_forms():
    sharding, _ = parse_sharding('#sdy.sharding<@mesh_0, [{"x"}p1, {"y", ?}], replicated={"z"}>')
    assert sharding == Sharding("mesh_0", (DimSharding((AxisRef("x"),)), DimSharding((AxisRef("y"),), True)),
                                (AxisRef("z"),))
    _, inline = parse_sharding('#sdy.sharding<mesh<["a"=2], device_ids=[1, 0]>, [{"a"}]>')
    assert inline == MeshDef((("a", 2),), (1, 0))
    per_value = parse_sharding_list('#sdy.sharding_per_value<[<@m, [{"a"}]>, <@n, []>]>')
    assert [s.mesh for s in per_value] == ["m", "n"]
    assert parse_mesh('#sdy.mesh<["a"=2, "b"=4]>') == MeshDef((("a", 2), ("b", 4)))


def test_mesh_text():
    assert MeshDef((("a", 2), ("b", 4))).text() == '<["a"=2, "b"=4]>'
    assert MeshDef((("tp", 2),), (4, 5)).text() == '<["tp"=2], device_ids=[4, 5]>'
    assert MeshDef((), (0,)).text() == "<[], device_ids=[0]>"
    assert MeshDef((("x", 2),), (0, 1)).text() == '<["x"=2]>'


def test_bad_attributes_are_errors():
    for text in ['#polymesh.sharding<@m, [{"a"}', '#polymesh.sharding<@m, [{a}]>',
                 '#polymesh.sharding<@m, [{}], colour={"a"}>']:
        with pytest.raises(AttrSyntaxError):
            parse_sharding(text)


PRINTED = '''module {
  polymesh.mesh @m = <["a"=2, "b"=4]>
  polymesh.mesh @dev3 = <[], device_ids=[3]>
  func.func @f(%arg0: tensor<16x16xf32> {polymesh.leaf = "x", polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>}, %arg1: tensor<4xf32>) -> (tensor<16x16xf32> {polymesh.leaf = "out->[0]", polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}, tensor<4xf32> {polymesh.sharding = #polymesh.sharding<@dev3, [{}]>}) attributes {polymesh.ambient_mesh = @m} {
    return %arg0, %arg1 : tensor<16x16xf32>, tensor<4xf32>
  }
  func.func @g(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    return %arg0 : tensor<2xf32>
  }
}
'''


def test_printed_module():
    meshes = parse_meshes(PRINTED)
    assert meshes == {"m": MeshDef((("a", 2), ("b", 4))), "dev3": MeshDef((), (3,))}
    functions = parse_functions(PRINTED)
    f = functions["f"]
    assert f.attributes == {"polymesh.ambient_mesh": "@m"}
    assert [a.leaf() for a in f.arguments] == ["x", None]
    assert f.arguments[1].sharding() is None
    assert [r.leaf() for r in f.results] == ["out->[0]", None]
    assert f.results[1].sharding().mesh == "dev3"
    assert functions["g"].results[0].type == "tensor<2xf32>"


@pytest.mark.parametrize("source,target,expected", [
    ((16, 6), (2, 8, 6), ([[0], [1]], [[0, 1], [2]], [16, 6])),
    ((4, 12), (8, 6), ([[0, 1]], [[0, 1]], [48])),
    ((2, 3, 4), (6, 4), ([[0, 1], [2]], [[0], [1]], [6, 4])),
    ((1, 64), (64,), ([[0, 1]], [[0]], [64])),
    ((64,), (1, 64), ([[0]], [[0, 1]], [64])),
    ((4, 1, 8), (4, 8, 1), ([[0, 1], [2]], [[0], [1, 2]], [4, 8])),
    ((3, 4), (5, 3), None),
])
def test_reassociation(source, target, expected):
    assert reassociation(source, target) == (None if expected is None else tuple(expected))


def test_leaf_paths():
    tree = {"params": {"dense": {"kernel": 1}}, "source_device_map[0]": 2, "layers": [3, (4,)]}
    paths = [format_path(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]
    assert paths == ["layers[0]", "layers[1][0]", "params.dense.kernel", "source_device_map[0]"]

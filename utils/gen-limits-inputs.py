#!/usr/bin/env python3
"""Generates large Polymesh inputs for the resource-limit and determinism
tests (test/limits/, test/determinism.test) and for docs/limits.md.

Every kind writes one module to stdout (or to -o FILE); the output depends
only on the arguments (random kinds take a --seed).

  mesh       one function that reshards a tensor on one mesh:
             --axes a=1024,b=1024 --shape 1024x1024
             --from '{"a"}, {"b"}' --to '{"b"}, {"a"}' [--ids reversed]
             (--ids reversed lists the device ids N-1..0 explicitly;
             --copies N writes N such functions, @f0 to @fN-1)
  nested     --depth N builtin.modules nested in each other, the innermost
             holding a mesh and a function with a reshard
             (--form generic: N nested regions of an unregistered op instead)
  chain      one function of --ops N elementwise ops on two meshes, with a
             reshard to the other mesh every --reshard-every K ops
  random     --functions N random multi-mesh functions (elementwise ops,
             constraints, reshards, a matmul), --seed S

usage: gen-limits-inputs.py KIND [options]
"""
import argparse
import random
import sys


def parse_axes(text):
    axes = []
    for item in text.split(','):
        name, size = item.split('=')
        axes.append((name, int(size)))
    return axes


def gen_mesh(args, out):
    axes = parse_axes(args.axes)
    devices = 1
    for _, size in axes:
        devices *= size
    axes_text = ', '.join('"%s"=%d' % axis for axis in axes)
    ids = ''
    if args.ids == 'reversed':
        ids = ', device_ids=[%s]' % ', '.join(
            str(devices - 1 - i) for i in range(devices))
    ttype = 'tensor<%sx%s>' % (args.shape, args.dtype)
    out.write('polymesh.mesh @m = <[%s]%s>\n' % (axes_text, ids))
    for copy in range(args.copies):
        name = 'f' if args.copies == 1 else 'f%d' % copy
        out.write('func.func @%s(%%x: %s {polymesh.sharding = '
                  '#polymesh.sharding<@m, [%s]>}) -> (%s {polymesh.sharding = '
                  '#polymesh.sharding<@m, [%s]>}) {\n' %
                  (name, ttype, args.source, ttype, args.to))
        out.write('  %%y = arith.negf %%x : %s\n' % ttype)
        out.write('  return %%y : %s\n}\n' % ttype)


INNER = '''polymesh.mesh @m = <["a"=2, "b"=4]>
func.func @f(%x: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> tensor<16x16xf32> {
  %y = polymesh.reshard %x <@m, [{"b"}, {"a"}]> : tensor<16x16xf32>
  return %y : tensor<16x16xf32>
}
'''


def gen_nested(args, out):
    if args.form == 'generic':
        out.write('"t.region"() ({\n' * args.depth)
        out.write('"t.leaf"() : () -> ()\n')
        out.write('}) : () -> ()\n' * args.depth)
        return
    out.write('module {\n' * args.depth)
    out.write(INNER)
    out.write('}\n' * args.depth)


def gen_chain(args, out):
    ttype = 'tensor<16x16xf32>'
    out.write('polymesh.mesh @m = <["a"=2, "b"=4]>\n')
    out.write('polymesh.mesh @n = <["c"=8], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>\n')
    out.write('func.func @chain(%%x: %s {polymesh.sharding = '
              '#polymesh.sharding<@m, [{"a"}, {"b"}]>}) -> %s {\n' %
              (ttype, ttype))
    previous = '%x'
    ops = ['arith.negf', 'math.exp', 'math.absf']
    for i in range(args.ops):
        name = '%%v%d' % i
        if args.reshard_every and i % args.reshard_every == args.reshard_every - 1:
            if (i // args.reshard_every) % 2 == 0:
                target = '<@n, [{"c"}, {}]>'
            else:
                target = '<@m, [{"a"}, {"b"}]>'
            out.write('  %s = polymesh.reshard %s %s : %s\n' %
                      (name, previous, target, ttype))
        else:
            out.write('  %s = %s %s : %s\n' %
                      (name, ops[i % len(ops)], previous, ttype))
        previous = name
    out.write('  return %s : %s\n}\n' % (previous, ttype))


RANDOM_MESHES = [
    ('m1', '["a"=2, "b"=4]', ['a', 'b']),
    ('m2', '["x"=2, "y"=2, "z"=2]', ['x', 'y', 'z']),
    ('m3', '["c"=8], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]', ['c']),
    ('stage', '["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]', ['dp', 'tp']),
    ('pair', '["p"=2], device_ids=[0, 1]', ['p']),
    ('dev3', '[], device_ids=[3]', []),
]


def random_sharding_body(rng, rank=2):
    name, _, axes = rng.choice(RANDOM_MESHES)
    free = list(axes)
    rng.shuffle(free)
    dims = []
    for _ in range(rank):
        take = rng.randint(0, min(2, len(free)))
        dims.append(free[:take])
        free = free[take:]
    text = ', '.join('{%s}' % ', '.join('"%s"' % a for a in d) for d in dims)
    return '<@%s, [%s]>' % (name, text)


def gen_random(args, out):
    rng = random.Random(args.seed)
    ttype = 'tensor<16x16xf32>'
    for name, text, _ in RANDOM_MESHES:
        out.write('polymesh.mesh @%s = <%s>\n' % (name, text))
    for f in range(args.functions):
        num_args = rng.randint(1, 4)
        arg_text = []
        for i in range(num_args):
            attr = ''
            if rng.random() < 0.8:
                attr = (' {polymesh.sharding = #polymesh.sharding%s}' %
                        random_sharding_body(rng))
            arg_text.append('%%a%d: %s%s' % (i, ttype, attr))
        values = ['%%a%d' % i for i in range(num_args)]
        body = []
        for i in range(rng.randint(3, 12)):
            name = '%%v%d' % i
            kind = rng.random()
            if kind < 0.35:
                op = rng.choice(['arith.addf', 'arith.mulf', 'arith.subf'])
                body.append('%s = %s %s, %s : %s' % (
                    name, op, rng.choice(values), rng.choice(values), ttype))
            elif kind < 0.55:
                op = rng.choice(['math.exp', 'arith.negf', 'math.sqrt'])
                body.append('%s = %s %s : %s' %
                            (name, op, rng.choice(values), ttype))
            elif kind < 0.7:
                body.append('%s = polymesh.sharding_constraint %s %s : %s' % (
                    name, rng.choice(values), random_sharding_body(rng),
                    ttype))
            elif kind < 0.85:
                body.append('%s = polymesh.reshard %s %s : %s' % (
                    name, rng.choice(values), random_sharding_body(rng),
                    ttype))
            elif kind < 0.93:
                body.append('%s_init = arith.constant dense<0.0> : %s' %
                            (name, ttype))
                body.append('%s = linalg.matmul ins(%s, %s : %s, %s) '
                            'outs(%s_init : %s) -> %s' % (
                                name, rng.choice(values), rng.choice(values),
                                ttype, ttype, name, ttype, ttype))
            else:
                body.append('%s = arith.constant dense<%d.0> : %s' %
                            (name, i, ttype))
            values.append(name)
        results = []
        for i in range(rng.randint(1, 4)):
            attr = ['polymesh.leaf = "f%d.leaf%d"' % (f, i)]
            if rng.random() < 0.3:
                attr.append('polymesh.sharding = #polymesh.sharding%s' %
                            random_sharding_body(rng))
            results.append((rng.choice(values), ', '.join(attr)))
        # An ambient mesh places what nothing annotates: every function
        # propagates and plans.
        ambient = ' attributes {polymesh.ambient_mesh = @%s}' % rng.choice(
            RANDOM_MESHES)[0]
        out.write('func.func @f%d(%s) -> (%s)%s {\n' % (
            f, ', '.join(arg_text),
            ', '.join('%s {%s}' % (ttype, attr) for _, attr in results),
            ambient))
        for line in body:
            out.write('  %s\n' % line)
        out.write('  return %s : %s\n}\n' % (
            ', '.join(v for v, _ in results),
            ', '.join(ttype for _ in results)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('kind', choices=['mesh', 'nested', 'chain', 'random'])
    parser.add_argument('-o', '--output')
    parser.add_argument('--axes', default='a=1024,b=1024')
    parser.add_argument('--shape', default='1024x1024')
    parser.add_argument('--dtype', default='f32')
    parser.add_argument('--from', dest='source', default='{"a"}, {"b"}')
    parser.add_argument('--to', default='{"b"}, {"a"}')
    parser.add_argument('--ids', choices=['default', 'reversed'],
                        default='default')
    parser.add_argument('--copies', type=int, default=1)
    parser.add_argument('--depth', type=int, default=1000)
    parser.add_argument('--form', choices=['module', 'generic'],
                        default='module')
    parser.add_argument('--ops', type=int, default=100000)
    parser.add_argument('--reshard-every', type=int, default=0)
    parser.add_argument('--functions', type=int, default=100)
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args()
    out = open(args.output, 'w') if args.output else sys.stdout
    {'mesh': gen_mesh, 'nested': gen_nested, 'chain': gen_chain,
     'random': gen_random}[args.kind](args, out)
    if args.output:
        out.close()


if __name__ == '__main__':
    main()

#!/usr/bin/env python3
"""Order-independence check for --polymesh-propagate.

Generates random multi-mesh programs (seeded), runs the pass on each program
and on copies whose arguments and results are permuted (and the operands of
commutative ops swapped), and checks that every leaf (named by its
polymesh.leaf path) gets the same sharding and that every op gets the same
placement whatever the order. With --controls the programs also carry user
priorities on dimension shardings (`{"a"}p1`), sharding groups and
propagation barriers. With --calls they also call private helpers (some
with declared argument shardings), and a permuted copy also reorders the
helpers in the module and the parameters of each helper (with its calls'
operands).

usage: permutation-check.py POLYMESH_OPT [--programs N] [--perms K] [--seed S]
                            [--controls] [--calls]
"""
import argparse
import random
import re
import subprocess
import sys

MESHES = [
    ('m1', '["a"=2, "b"=4]', ['a', 'b']),
    ('m2', '["x"=2, "y"=2, "z"=2]', ['x', 'y', 'z']),
    ('m3', '["c"=8], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]', ['c']),
    ('pair', '["p"=2], device_ids=[0, 1]', ['p']),
    ('dev3', '[], device_ids=[3]', []),
]
SHAPE = (16, 16)
TYPE = 'tensor<16x16xf32>'


def random_sharding(rng, priorities=False):
    name, _, axes = rng.choice(MESHES)
    free = list(axes)
    rng.shuffle(free)
    dims = []
    for _ in range(2):
        take = rng.randint(0, min(2, len(free)))
        dims.append(free[:take])
        free = free[take:]
    text = ', '.join(
        '{%s}%s' % (', '.join('"%s"' % a for a in d),
                    'p%d' % rng.randint(0, 2)
                    if priorities and rng.random() < 0.5 else '')
        for d in dims)
    return '#polymesh.sharding<@%s, [%s]>' % (name, text)


COMMUTATIVE = ('arith.addf', 'arith.mulf')


def random_helper(rng, controls):
    """A private function of two parameters: (param shardings, body, result)
    with the body in the form random_program uses."""
    params = [random_sharding(rng, controls) if rng.random() < 0.3 else None
              for _ in range(2)]
    values = ['p0', 'p1']
    body = []
    for i in range(rng.randint(1, 3)):
        name = 'h%d' % i
        if rng.random() < 0.6:
            op = rng.choice(['arith.addf', 'arith.mulf', 'arith.subf'])
            body.append((name, (op, rng.choice(values), rng.choice(values))))
        else:
            op = rng.choice(['math.exp', 'arith.negf'])
            body.append(('%%%s = %s %%%s : %s'
                         % (name, op, rng.choice(values), TYPE), None))
        values.append(name)
    return params, body, values[-1]


def random_program(rng, controls=False, calls=False):
    """Returns (args, body, results, helpers) with symbolic names. Body
    entries are (text, None), (name, (op, x, y)) for binary ops, rendered
    with their operands in either order (commutative ones may be swapped),
    or (name, ('call', helper, x, y))."""
    helpers = ([random_helper(rng, controls)
                for _ in range(rng.randint(1, 2))] if calls else [])
    num_args = rng.randint(2, 5)
    args = []
    for i in range(num_args):
        sharding = (random_sharding(rng, controls)
                    if rng.random() < 0.8 else None)
        args.append(('a%d' % i, sharding))
    values = [a for a, _ in args]
    body = []
    for i in range(rng.randint(3, 10)):
        kind = rng.random()
        name = 'v%d' % i
        if helpers and rng.random() < 0.3:
            body.append((name, ('call', rng.randrange(len(helpers)),
                                rng.choice(values), rng.choice(values))))
        elif kind < 0.4:
            x, y = rng.choice(values), rng.choice(values)
            op = rng.choice(['arith.addf', 'arith.mulf', 'arith.subf'])
            body.append((name, (op, x, y)))
        elif kind < 0.7:
            x = rng.choice(values)
            op = rng.choice(['math.exp', 'arith.negf', 'math.sqrt'])
            body.append(('%%%s = %s %%%s : %s' % (name, op, x, TYPE), None))
        elif kind < 0.85:
            x = rng.choice(values)
            sharding = random_sharding(rng, controls)[len('#polymesh.sharding'):]
            body.append(('%%%s = polymesh.sharding_constraint %%%s %s : %s'
                         % (name, x, sharding, TYPE), None))
        elif controls and kind < 0.92:
            x = rng.choice(values)
            direction = rng.choice(['FORWARD', 'BACKWARD', 'BOTH', 'NONE'])
            body.append(('%%%s = polymesh.propagation_barrier %%%s '
                         'allowed_direction=%s : %s'
                         % (name, x, direction, TYPE), None))
        else:
            body.append(('%%%s = arith.constant dense<%d.0> : %s'
                         % (name, i, TYPE), None))
        values.append(name)
    if controls:
        for group in range(rng.randint(0, 2)):
            for member in rng.sample(values, min(len(values),
                                                 rng.randint(2, 3))):
                body.append(('polymesh.sharding_group %%%s group_id=%d : %s'
                             % (member, group, TYPE), None))
    results = []
    for i in range(rng.randint(1, 5)):
        declared = (random_sharding(rng, controls)
                    if rng.random() < 0.3 else None)
        results.append(('leaf%d' % i, rng.choice(values), declared))
    return args, body, results, helpers


def render_body(body, swapped, flipped=()):
    """The lines of a body; `flipped` helpers take their parameters in the
    other order, so their calls pass the operands swapped."""
    lines = []
    for index, (text, operands) in enumerate(body):
        if operands and operands[0] == 'call':
            _, helper, x, y = operands
            if helper in flipped:
                x, y = y, x
            text = '%%%s = func.call @helper%d(%%%s, %%%s) : (%s, %s) -> %s' % (
                text, helper, x, y, TYPE, TYPE, TYPE)
        elif operands:
            op, x, y = operands
            if op in COMMUTATIVE and index in swapped:
                x, y = y, x
            text = '%%%s = %s %%%s, %%%s : %s' % (text, op, x, y, TYPE)
        lines.append('  ' + text)
    return lines


def render_helper(index, helper, flipped):
    params, body, result = helper
    order = [1, 0] if flipped else [0, 1]
    param_text = ', '.join(
        '%%p%d: %s%s' % (i, TYPE, ' {polymesh.sharding = %s}' % params[i]
                         if params[i] else '') for i in order)
    lines = ['func.func private @helper%d(%s) -> %s {'
             % (index, param_text, TYPE)]
    lines += render_body(body, ())
    lines.append('  return %%%s : %s' % (result, TYPE))
    lines.append('}')
    return lines


def render(args, body, results, arg_order, result_order, swapped=(),
           helpers=(), helper_order=(), flipped=()):
    meshes = '\n'.join('polymesh.mesh @%s = <%s>' % (n, m) for n, m, _ in MESHES)
    arg_text = ', '.join(
        '%%%s: %s%s' % (args[i][0], TYPE,
                        ' {polymesh.sharding = %s}' % args[i][1] if args[i][1] else '')
        for i in arg_order)
    res_text = ', '.join(
        '%s {polymesh.leaf = "%s"%s}' % (
            TYPE, results[i][0],
            ', polymesh.sharding = %s' % results[i][2] if results[i][2] else '')
        for i in result_order)
    ret = ', '.join('%%%s' % results[i][1] for i in result_order)
    ret_types = ', '.join(TYPE for _ in result_order)
    lines = [meshes]
    called = {operands[1] for _, operands in body
              if operands and operands[0] == 'call'}
    for index in helper_order:
        if index in called:  # An uncalled private helper would be unplaced.
            lines += render_helper(index, helpers[index], index in flipped)
    lines.append(
        'func.func @f(%s) -> (%s) attributes {polymesh.ambient_mesh = @m1} {'
        % (arg_text, res_text))
    lines += render_body(body, swapped, flipped)
    lines.append('  return %s : %s' % (ret, ret_types))
    lines.append('}')
    return '\n'.join(lines) + '\n'


LEAF = re.compile(r'polymesh\.leaf = "(leaf\d+)", polymesh\.sharding = (#polymesh\.sharding<[^>]*>)')
OP = re.compile(r'^\s*%\S+ = (\S+) .*?\{polymesh\.sharding = (.*?)\} :')
RESHARD = re.compile(r'^\s*%\S+ = polymesh\.reshard %\S+ (<.*>) :')


def summarize(output):
    leaves = dict(LEAF.findall(output))
    # Placements of computing ops by their source order: the pass never
    # reorders ops, and SSA names are renumbered identically.
    ops = []
    for line in output.splitlines():
        m = OP.match(line) or RESHARD.match(line)
        if m:
            ops.append(' '.join(m.groups()))
    reshards = output.count('polymesh.reshard')
    return leaves, sorted(ops), reshards


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('tool')
    parser.add_argument('--programs', type=int, default=40)
    parser.add_argument('--perms', type=int, default=4)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--controls', action='store_true',
                        help='priorities, sharding groups and barriers')
    parser.add_argument('--calls', action='store_true',
                        help='calls of private helpers')
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    failures = 0
    checked = 0
    for program in range(opts.programs):
        args, body, results, helpers = random_program(rng, opts.controls,
                                                      opts.calls)
        base = None
        for perm in range(opts.perms + 1):
            arg_order = list(range(len(args)))
            result_order = list(range(len(results)))
            helper_order = list(range(len(helpers)))
            swapped, flipped = set(), set()
            if perm:
                rng.shuffle(arg_order)
                rng.shuffle(result_order)
                rng.shuffle(helper_order)
                swapped = {i for i in range(len(body)) if rng.random() < 0.5}
                flipped = {i for i in helper_order if rng.random() < 0.5}
            text = render(args, body, results, arg_order, result_order,
                          swapped, helpers, helper_order, flipped)
            run = subprocess.run([opts.tool, '--polymesh-propagate', '-'],
                                 input=text.encode(), capture_output=True)
            if run.returncode != 0:
                print('program %d perm %d: polymesh-opt failed:\n%s\n%s'
                      % (program, perm, run.stderr.decode(), text))
                failures += 1
                break
            summary = summarize(run.stdout.decode())
            if len(summary[0]) != len(results):
                print('program %d: %d leaves placed, expected %d\n%s'
                      % (program, len(summary[0]), len(results), run.stdout.decode()))
                failures += 1
                break
            if base is None:
                base = (summary, text)
            elif summary != base[0]:
                print('program %d: permutation %d changes decisions\n'
                      'original:\n%s\npermuted:\n%s\n%s\nvs\n%s'
                      % (program, perm, base[1], text, base[0], summary))
                failures += 1
                break
            checked += 1
    print('%d passed, %d failed' % (opts.programs - failures, failures))
    print('(%d propagations compared)' % checked, file=sys.stderr)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())

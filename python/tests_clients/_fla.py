"""fla (flash-linear-attention, `fla-core` on PyPI) as an oracle: its
pure-torch references and its own tolerance rule, without importing the
package (`import fla` loads its Triton kernels, which need a GPU build of
triton that a CPU machine does not install)."""
import ast
import importlib.util
import os


def package_dir():
    spec = importlib.util.find_spec("fla")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def load_naive():
    """fla.ops.gated_delta_rule.naive (naive_chunk_gated_delta_rule,
    naive_recurrent_gated_delta_rule), loaded from its file."""
    path = os.path.join(package_dir(), "ops", "gated_delta_rule", "naive.py")
    spec = importlib.util.spec_from_file_location("fla_gated_delta_rule_naive", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chunk_signature():
    """fla's chunk_gated_delta_rule, read from its source: ([(name, default
    source or None)], the keys its body reads from **kwargs)."""
    path = os.path.join(package_dir(), "ops", "gated_delta_rule", "chunk.py")
    tree = ast.parse(open(path).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "chunk_gated_delta_rule")
    args = fn.args.args
    defaults = [None] * (len(args) - len(fn.args.defaults)) + [ast.unparse(d) for d in fn.args.defaults]
    params = [(a.arg, d) for a, d in zip(args, defaults)]
    kwarg_keys = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop") \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == fn.args.kwarg.arg and node.args \
                and isinstance(node.args[0], ast.Constant):
            kwarg_keys.add(node.args[0].value)
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.ops[0], ast.In) \
                and isinstance(node.comparators[0], ast.Name) and node.comparators[0].id == fn.args.kwarg.arg:
            kwarg_keys.add(node.left.value)
    return params, kwarg_keys


def err_ratio(ref, x):
    """fla's tolerance measure (fla/utils.py get_err_ratio): RMS of the error
    over RMS of the reference; its tests assert it below 0.005 or so."""
    ref, x = ref.double().flatten(), x.double().flatten()
    return float((ref - x).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-8))

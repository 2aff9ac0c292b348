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


def load_kda():
    """fla.ops.kda's pure-torch references as one namespace: naive.py's
    naive_recurrent_kda and naive_chunk_kda (loaded from its file), and
    gate.py's naive_kda_gate and naive_kda_lowerbound_gate (gate.py imports
    triton at the top, so the two functions are taken from its source and run
    with torch and torch.nn.functional only)."""
    import types

    import torch
    import torch.nn.functional as F
    base = os.path.join(package_dir(), "ops", "kda")
    spec = importlib.util.spec_from_file_location("fla_kda_naive", os.path.join(base, "naive.py"))
    naive = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(naive)
    tree = ast.parse(open(os.path.join(base, "gate.py")).read())
    gates = [n for n in tree.body if isinstance(n, ast.FunctionDef)
             and n.name in ("naive_kda_gate", "naive_kda_lowerbound_gate")]
    namespace = {"torch": torch, "F": F}
    exec(compile(ast.Module(body=gates, type_ignores=[]), "fla/ops/kda/gate.py", "exec"), namespace)
    return types.SimpleNamespace(naive_recurrent_kda=naive.naive_recurrent_kda, naive_chunk_kda=naive.naive_chunk_kda,
                                 naive_kda_gate=namespace["naive_kda_gate"],
                                 naive_kda_lowerbound_gate=namespace["naive_kda_lowerbound_gate"])


def chunk_signature(module=("gated_delta_rule", "chunk.py"), name="chunk_gated_delta_rule"):
    """fla's chunk_gated_delta_rule (or `name` in fla/ops/<module>), read from
    its source: ([(name, default source or None)], the keys its body reads
    from **kwargs)."""
    path = os.path.join(package_dir(), "ops", *module)
    tree = ast.parse(open(path).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
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

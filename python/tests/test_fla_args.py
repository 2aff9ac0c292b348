"""cgdr.chunk_gated_delta_rule speaks fla's argument names and defaults
(fla.ops.gated_delta_rule.chunk_gated_delta_rule, 0.6): what cgdr has is
accepted, what it lacks is refused with a message naming the argument.
(python/tests_clients/test_fla_oracle.py checks the same against fla's own
source and numbers.)"""
import warnings

import numpy as np
import pytest

import cgdr
from _helpers import gdr_fp64, packed_inputs, rel_err

B, T, H, HV, K, V = 1, 20, 1, 2, 8, 8


def args(seed=1):
    x = packed_inputs(np.random.default_rng(seed), T, H, HV, K, V, 2)
    q, k, v, beta, g = (x[n][None].astype(np.float32) for n in ("q", "k", "v", "beta", "g"))
    return q, k, v, g, beta, x["state"].astype(np.float32)


def test_positional_call_in_fla_order():
    """fla's positional order: ..., initial_state, output_final_state, use_qk_l2norm_in_kernel."""
    q, k, v, g, beta, h0 = args()
    o, s = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, None, h0[:1], True, True)
    ro, rs = gdr_fp64(q[0], k[0], v[0], beta[0], g[0], h0[:1], [T], l2norm=True, layout="kv")
    assert rel_err(o[0], ro) <= 2e-5 and rel_err(s, rs) <= 2e-5


def test_state_v_first_is_the_vk_layout():
    q, k, v, g, beta, h0 = args()
    cu = np.array([0, 7, 20])
    o1, s1 = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                         state_v_first=True, cu_seqlens=cu, cu_seqlens_cpu=cu, chunk_indices=None)
    o2, s2 = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                         state_layout="vk", cu_seqlens=cu)
    np.testing.assert_array_equal(o1, o2)
    np.testing.assert_array_equal(s1, s2)
    with pytest.warns(DeprecationWarning, match="transpose_state_layout"):
        o3, s3 = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                             transpose_state_layout=True, cu_seqlens=cu)
    np.testing.assert_array_equal(s3, s1)


def test_tuning_keywords_are_accepted():
    q, k, v, g, beta, _ = args()
    want, _ = cgdr.chunk_gated_delta_rule(q, k, v, g, beta)
    for extra in ({"chunk_size": 16}, {"chunk_size": 64}, {"A_log": None, "dt_bias": None},
                  {"use_gate_in_kernel": False}, {"cp_context": None}, {"use_beta_sigmoid_in_kernel": False}):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got, _ = cgdr.chunk_gated_delta_rule(q, k, v, g, beta, **extra)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("extra,message", [
    ({"use_gate_in_kernel": True}, r"A_log: required with the raw gate a"),
    ({"allow_neg_eigval": True}, r"allow_neg_eigval: not supported by cgdr"),
    ({"cp_context": object()}, r"cp_context: not supported by cgdr \(context parallelism"),
    ({"head_first": False}, r"head_first: removed from fla and not supported"),
    ({"chunk_size": 128}, r"chunk_size: expected 16, 32 or 64 as fla"),
    ({"state_v_first": True, "state_layout": "kv"}, r"state_layout: state_v_first=True means 'vk'"),
    ({"state_v_first": True, "transpose_state_layout": True}, r"state_v_first: cannot pass both"),
    ({"cu_seqlens_cpu": [0, 20]}, r"cu_seqlens_cpu: given without cu_seqlens"),
    ({"cu_seqlens": [0, 5, 20], "cu_seqlens_cpu": [0, 6, 20]}, r"cu_seqlens_cpu: expected the same offsets"),
])
def test_missing_features_are_refused_by_name(extra, message):
    q, k, v, g, beta, _ = args()
    with pytest.raises(ValueError, match=message):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, **extra)


def test_unknown_keyword_is_a_type_error():
    q, k, v, g, beta, _ = args()
    with pytest.raises(TypeError, match="unexpected keyword argument 'use_gate'"):
        cgdr.chunk_gated_delta_rule(q, k, v, g, beta, use_gate=True)

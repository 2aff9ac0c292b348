"""The mutations of `make mutants` (tools/mutants/run.py): single-point bugs
of the kinds that slip through front ends (issue 24): a setter or keyword
that drops its value, a flag parsed and not used, a limit off by one, an
output check skipped, a plan whose pieces no longer add up, and bugs in the
core for comparison. Each is a file, a snippet that occurs exactly once in
it, and its replacement; `tests` is a ctest -R regex of the tests expected
to catch it (run first, to save time; the whole suite runs if they pass);
`why`, for a mutation known to survive, says why it cannot change what a
caller gets. `run.py --check` (ctest mutants_list) checks that every snippet
still applies.
"""
from collections import namedtuple

Mutant = namedtuple("Mutant", "id file original replacement tests why", defaults=("", ""))

CONF = "Conformance|Boundaries"
PY = "python_tests"
CLI = "cli_"

MUTANTS = [
    # ---- src/api: the C API and Run
    Mutant("api-threads-setter-drops", "src/api/c_api.cc",
           "opt->options.threads = threads;", "opt->options.threads = 0;", CONF),
    Mutant("api-v_step-setter-drops", "src/api/c_api.cc",
           "opt->options.v_step = v_step;", "opt->options.v_step = 0;", CONF),
    Mutant("api-dk_bucket-setter-drops", "src/api/c_api.cc",
           "opt->options.dk_bucket = dk_bucket;  // whether", "opt->options.dk_bucket = 0;  // whether", CONF),
    Mutant("api-chunk32-is-chunk64", "src/api/c_api.cc",
           "case 32: opt->options.algo = cgdr::Algo::kChunk32;", "case 32: opt->options.algo = cgdr::Algo::kChunk64;",
           CONF),
    Mutant("api-check_values-setter-drops", "src/api/c_api.cc",
           "opt->options.check_values = enable != 0;", "opt->options.check_values = false;", CONF),
    Mutant("api-l2norm-setter-drops", "src/api/c_api.cc",
           "opt->options.use_qk_l2norm = enable != 0;", "opt->options.use_qk_l2norm = false;", CONF),
    Mutant("api-handle-ignored", "src/api/c_api.cc",
           "return opt ? opt->options : cgdr::Options();", "return cgdr::Options();", CONF + "|c_api"),
    Mutant("api-rank-limit-off-by-one", "src/api/c_api.cc",
           "t.rank > CGDR_MAX_RANK", "t.rank > CGDR_MAX_RANK + 1", CONF),
    Mutant("api-final_state-check-skipped", "src/api/run.cc",
           "return s.ok() ? CheckOutputFinite(\"final_state\", out.final_state, opt.threads) : s;", "return s;",
           CONF + "|ExtremeValues"),
    # ---- src/validate
    Mutant("validate-threads-limit", "src/validate/checks.cc",
           "opt.threads <= 4096", "opt.threads <= 4097", CONF),
    Mutant("validate-elements-limit", "src/validate/checks.cc",
           "std::numeric_limits<int64_t>::max() / 16", "std::numeric_limits<int64_t>::max() / 8", CONF + "|SizeLimits"),
    Mutant("validate-overlap-touching", "src/validate/checks.cc",
           "return a.begin < b.end && b.begin < a.end", "return a.begin < b.end && b.begin + 1 < a.end", CONF),
    Mutant("validate-g-positive-at-0", "src/validate/checks.cc",
           "const int64_t i = FirstPositive(g, threads);\n    if (i >= 0) {",
           "const int64_t i = FirstPositive(g, threads);\n    if (i > 0) {", CONF + "|CheckValues"),
    Mutant("validate-dk-limit", "src/validate/checks.cc",
           "if (Dk < 1 || Dk > kMaxHeadDim)", "if (Dk < 1 || Dk > kMaxHeadDim + 1)", CONF),
    Mutant("validate-v_step-limit", "src/validate/validate.cc",
           "opt.v_step > kMaxHeadDim", "opt.v_step > kMaxHeadDim + 1", CONF),
    Mutant("validate-dk_bucket-below-dk", "src/validate/validate.cc",
           "&& opt.dk_bucket >= Dk))", "&& opt.dk_bucket + 1 >= Dk))", CONF),
    Mutant("validate-lengths-short-sum", "src/validate/validate.cc",
           "if (total != T)", "if (total > T)", CONF + "|Validate"),
    Mutant("validate-negative-length", "src/validate/validate.cc",
           "if (lens[b] < 0)", "if (lens[b] < -1)", CONF + "|Validate"),
    # ---- src/decode
    Mutant("decode-index-limit", "src/validate/checks.cc",  # the slot check decode and prefill pools share
           "if (v[i] >= slots) {", "if (v[i] > slots) {", CONF + "|Decode"),
    Mutant("decode-options-unchecked", "src/decode/decode_validate.cc",
           "CGDR_TRY(CheckCommonOptions(opt));", "(void)0;", CONF + "|Decode"),
    Mutant("decode-skipped-row-not-zeroed", "src/decode/decode.cc",
           "static_cast<size_t>(p.Dv) * DTypeSize(out.out.dtype));",
           "size_t{0});", CONF + "|Decode"),
    Mutant("decode-g-ignored", "src/decode/decode.cc",
           "sc.decay[j] = p.has_g ? LoadAsF32(in.g.data, p.g_dtype, (n * K + j) * Nv + h)",
           "sc.decay[j] = false ? LoadAsF32(in.g.data, p.g_dtype, (n * K + j) * Nv + h)", CONF + "|Decode"),
    # ---- src/io: the readers and writers
    Mutant("io-header-limit", "src/io/safetensors.cc",
           "if (n > kMaxSafetensorsHeaderBytes)", "if (n > kMaxSafetensorsHeaderBytes + 1)", CONF),
    Mutant("io-offsets-past-buffer", "src/io/safetensors.cc",
           "if (b > e || e > data_size_)", "if (b > e || e > data_size_ + 1)", CONF + "|safetensors"),
    Mutant("io-rank-limit", "src/io/safetensors.cc",
           "field == Field::kShape ? static_cast<size_t>(kMaxSafetensorsRank) : 2",
           "field == Field::kShape ? static_cast<size_t>(kMaxSafetensorsRank) + 1 : 2",
           CONF),
    Mutant("io-trailing-bytes", "src/io/safetensors.cc",
           "if (pos != data_size)", "if (pos + 1 < data_size)", CONF + "|safetensors"),
    Mutant("io-case-l2norm-dropped", "src/io/case_file.cc",
           "CGDR_TRY(ParseBool(path, key, v, &opt->use_qk_l2norm));",
           "CGDR_TRY(ParseBool(path, key, v, &opt->check_values));", CLI),  # check_values: the flag's, set after
    Mutant("io-npy-header-limit", "src/io/npy.cc",
           "if (*dict_len > kMaxHeaderBytes)", "if (*dict_len > kMaxHeaderBytes + 1)", CONF),
    Mutant("io-manifest-dim-limit", "src/io/tensor_files.cc",
           "d.get<uint64_t>() > kMaxDim", "d.get<uint64_t>() > kMaxDim + 1", CONF),
    Mutant("io-temporary-left-behind", "src/io/file_util.cc",
           "if (!tmp_.empty()) ::unlink(tmp_.c_str());", "(void)0;", "safetensors|" + CLI),
    # ---- src/plan
    Mutant("plan-threads-ignored", "src/plan/plan.cc",
           "out.threads = ResolveThreadCount(p.options.threads);", "out.threads = ResolveThreadCount(0);", CONF),
    Mutant("plan-v_step-ignored", "src/plan/plan.cc",
           "    w = p.options.v_step;\n", "    w = RoundUp(p.Dv, kLaneMultiple);\n", CONF + "|Plan"),
    Mutant("plan-dk_bucket-ignored", "src/plan/plan.cc",
           "out.dk_bucket = forced == 0 ? DkBucket(p.Dk) : (forced < 0 ? 0 : forced);",
           "out.dk_bucket = DkBucket(p.Dk);", "Plan|" + CONF),
    Mutant("plan-stream_out-threshold", "src/plan/plan.cc",
           "out_bytes >= prof.stream_out_bytes", "out_bytes > prof.stream_out_bytes", "Plan|" + CONF),
    # ---- src/kernels
    Mutant("kernels-one-worker", "src/kernels/kernels.cc",
           "std::min<int64_t>(plan.threads, plan.groups())", "std::min<int64_t>(1, plan.groups())", CONF),
    Mutant("kernels-bf16x4-drops-lolo", "src/kernels/gemm_bf16.cc",
           "pj.lolo = prec == Precision::kBf16x4;", "pj.lolo = false;", CONF + "|Precision"),
    Mutant("kernels-bf16-pair-out-of-order", "src/kernels/load-inl.h",
           "_mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0))",
           "_mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 2, 1, 0))", "Precision|Decode"),
    Mutant("kernels-bf16-pair-stream-halves-swapped", "src/kernels/load-inl.h",
           "_mm_stream_si128(to, _mm256_castsi256_si128(ordered));",
           "_mm_stream_si128(to, _mm256_extracti128_si256(ordered, 1));", "Verify"),
    Mutant("decode-verify-reads-back-unrounded", "src/decode/decode.cc",
           "if (next) nacc[r] = hn::MulAdd(stored, vak1, nacc[r]);",
           "if (next) nacc[r] = hn::MulAdd(s, vak1, nacc[r]);", "Verify"),
    Mutant("decode-vk-two-pass-u-reassociated", "src/decode/decode.cc",
           "h.u[j0 + r] = h.beta[0] * (h.v[j0 + r] - h.u[j0 + r]);",
           "h.u[j0 + r] = h.beta[0] * h.v[j0 + r] - h.beta[0] * h.u[j0 + r];", "Verify"),
    # ---- src/core
    Mutant("core-threads-resolve", "src/core/threads.cc",
           "return requested > 0 ? requested : std::max(1, omp_get_max_threads());",
           "return std::max(1, omp_get_max_threads());", CONF),
    Mutant("core-scan-misses-last", "src/core/scan.cc",
           "const int64_t e = std::min(end, b + kBlock);", "const int64_t e = std::min(end - 1, b + kBlock);",
           "CheckValues|" + CONF),
    Mutant("core-numel-saturation-off-by-one", "src/core/tensor.cc",
           "n > std::numeric_limits<int64_t>::max() / d)", "n > std::numeric_limits<int64_t>::max() / d + 1)",
           CONF + "|SizeLimits"),
    # ---- src/reference: the judge
    Mutant("reference-l2norm-eps", "src/reference/reference.cc",
           "const double inv = 1.0 / std::sqrt(ss + eps);", "const double inv = 1.0 / std::sqrt(ss + 1e-3);", CONF),
    # ---- src/golden
    Mutant("golden-nonfinite-not-failed", "src/golden/compare.cc",
           "if (a.nonfinite > b.nonfinite) fails.push_back", "if (false) fails.push_back", "golden"),  # golden.*, cli_golden*
    # ---- src/bench
    Mutant("bench-peak-threads", "src/bench/peak.cc",
           "FmaPeak r;\n  r.threads = threads;", "FmaPeak r;\n  r.threads = 1;", "Peak|cli_plan"),
    # ---- tools/cli
    Mutant("cli-threads-unused", "tools/cli/run.cc",
           "c.options.threads = req.threads;", "(void)req.threads;", CLI),
    Mutant("cli-engine-unused", "tools/cli/run.cc",
           "c.options.engine = req.engine;", "(void)req.engine;", CLI),
    Mutant("cli-check-values-unused", "tools/cli/run.cc",
           "c.options.check_values = req.check_values;", "(void)req.check_values;", CLI),
    Mutant("cli-output-on-error", "tools/cli/run.cc",
           "  if (!s.ok()) return Status(s.code(), Prefixed(req.input, s));\n  report->problem = out.problem;",
           "  if (!s.ok()) {\n    (void)SaveResult(req.output, out.views, c.options);\n"
           "    return Status(s.code(), Prefixed(req.input, s));\n  }\n  report->problem = out.problem;", CLI),
    Mutant("cli-plan-split-short", "tools/cli/run.cc",
           "p->seq_lens.push_back(p->T / p->B + (b < p->T % p->B ? 1 : 0));", "p->seq_lens.push_back(p->T / p->B);", CLI),
    Mutant("cli-int-range", "tools/cli/args.h",
           "v < lo || v > hi)", "v < lo || v > hi + 1)", CLI),
    Mutant("cli-golden-operands-default", "tools/cli/golden.cc",
           "r.profile.operands = in.query.dtype == DType::kF16 ? golden::Operands::kF16 : golden::Operands::kBf16;",
           "r.profile.operands = golden::Operands::kBf16;", "cli_golden"),
    # ---- python/cgdr and python/src
    Mutant("py-engine-dropped", "python/cgdr/__init__.py",
           "_precision(precision), _engine(engine), _int_option(\"v_step\", v_step),",
           "_precision(precision), \"auto\", _int_option(\"v_step\", v_step),", PY),
    Mutant("py-tnd-threads-dropped", "python/cgdr/__init__.py",
           "             _threads(threads), _algo(algo), check_values, _precision(precision), _engine(engine), v_step, dk_bucket,",
           "             0, _algo(algo), check_values, _precision(precision), _engine(engine), v_step, dk_bucket,", PY),
    Mutant("py-fla-l2norm-dropped", "python/cgdr/__init__.py",
           "packed(o), final, _scale(scale), use_qk_l2norm_in_kernel, layout, _threads(threads), _algo(algo),",
           "packed(o), final, _scale(scale), False, layout, _threads(threads), _algo(algo),", PY),
    Mutant("py-step-check_values-dropped", "python/cgdr/__init__.py",
           "_threads(threads), bool(check_values),", "_threads(threads), False,", PY),
    Mutant("py-cu_seqlens-last-offset", "python/cgdr/__init__.py",
           "if cu[-1] != T:", "if cu[-1] > T:", PY),
    Mutant("py-torch-state_v_first-dropped", "python/cgdr/torch.py",
           "return \"vk\" if state_v_first else \"kv\"", "return \"kv\"", PY),
    Mutant("py-dropin-unasked-state", "python/cgdr/torch.py",
           "return out.to(query.dtype), (state if output_final_state else None)", "return out.to(query.dtype), state", PY),
    Mutant("py-strided-input-not-copied", "python/cgdr/_tensors.py",
           "return x if x.is_contiguous() else x.contiguous()", "return x", PY),
    Mutant("py-golden-operands-default", "python/cgdr/_golden.py",
           "operands = \"f16\" if qd == \"f16\" else \"bf16\"", "operands = \"bf16\"", PY),
    Mutant("py-native-v_step-dropped", "python/src/module.cc",
           "o.v_step = v_step;", "o.v_step = 0;", PY),
    Mutant("py-native-decode-check_values", "python/src/module.cc",
           "MakeOptions(scale, use_qk_l2norm, state_layout, threads, \"auto\", check_values);",
           "MakeOptions(scale, use_qk_l2norm, state_layout, threads, \"auto\", false);", PY),
]

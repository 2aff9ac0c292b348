#!/usr/bin/env bash
# End-to-end tests of the `cgdr` binary (SPEC 3 and 7): usage, run + FP64
# check, layouts and dtypes, bad inputs (exit 2, one stderr line, no output
# file), hostile files and output paths (issue 19), plan, the planner's
# profile, demo. Bash and coreutils only (mknod and mkfifo included).
#
#   cli_test.sh PATH/TO/cgdr [usage|run_and_check|layouts_and_dtypes|bad_inputs|hostile|plan|profile|demo|serving|
#                             serving_bad_inputs|kda|all]
set -euo pipefail

CGDR=${1:?usage: cli_test.sh PATH/TO/cgdr [section]}
SECTION=${2:-all}
W=$(mktemp -d "${TMPDIR:-/tmp}/cgdr_cli.XXXXXX")
trap 'rm -rf "$W"' EXIT

fail() {
  echo "FAIL [$SECTION]: $*" >&2
  exit 1
}

# expect_ok WHAT CMD...: exit 0 and nothing on stderr; stdout kept in $W/stdout.
expect_ok() {
  local what=$1 rc=0
  shift
  "$@" >"$W/stdout" 2>"$W/stderr" || rc=$?
  [ "$rc" -eq 0 ] || fail "$what: exit $rc, expected 0; stderr: $(cat "$W/stderr")"
  [ ! -s "$W/stderr" ] || fail "$what: unexpected stderr: $(cat "$W/stderr")"
}

# expect_error WHAT SUBSTRING CMD...: exit 2, exactly one stderr line
# "cgdr: error: ..." containing SUBSTRING.
expect_error() {
  local what=$1 want=$2 rc=0 lines
  shift 2
  "$@" >"$W/stdout" 2>"$W/stderr" || rc=$?
  [ "$rc" -eq 2 ] || fail "$what: exit $rc, expected 2; stderr: $(cat "$W/stderr")"
  lines=$(wc -l <"$W/stderr")
  [ "$lines" -eq 1 ] || fail "$what: $lines lines on stderr, expected exactly 1: $(cat "$W/stderr")"
  grep -q '^cgdr: error: ' "$W/stderr" || fail "$what: stderr does not start with 'cgdr: error: ': $(cat "$W/stderr")"
  grep -qF -- "$want" "$W/stderr" || fail "$what: stderr lacks '$want': $(cat "$W/stderr")"
}

expect_stdout_has() {
  grep -qF -- "$2" "$W/stdout" || fail "$1: stdout lacks '$2': $(cat "$W/stdout")"
}

# expect_stdout_line WHAT REGEX: a line of stdout matches the extended regex.
expect_stdout_line() {
  grep -qE -- "$2" "$W/stdout" || fail "$1: no line of stdout matches '$2': $(cat "$W/stdout")"
}

# No temporary files may survive a write, failed or not.
expect_no_temporaries() {
  local left
  left=$(find "$W" -name '.*.tmp-*' | head -n 3)
  [ -z "$left" ] || fail "$1: temporary files left behind: $left"
}

# run_and_check NAME MAKE-CASE-FLAGS... : make a case, run it, check it against FP64.
# RUN_FLAGS (words, split on purpose): extra flags for `cgdr run`.
RUN_FLAGS=""
run_and_check() {
  local name=$1
  shift
  expect_ok "make-case $name" "$CGDR" make-case --out "$W/$name.case" "$@"
  # shellcheck disable=SC2086 # RUN_FLAGS: words
  expect_ok "run $name" "$CGDR" run --input "$W/$name.case" --output "$W/$name.result" $RUN_FLAGS
  [ -s "$W/$name.result" ] || fail "run $name: no result file"
  expect_ok "check $name" "$CGDR" check --input "$W/$name.case" --result "$W/$name.result"
  expect_stdout_has "check $name" "final_state"
}

section_usage() {
  for h in --help help -h; do
    expect_ok "cgdr $h" "$CGDR" "$h"
    for word in "usage: cgdr" " run " " plan " " bench " " tune " " demo " "--input" "--output"; do
      expect_stdout_has "cgdr $h" "$word"
    done
  done
  for sub in run plan bench tune demo make-case check golden compare; do
    expect_ok "cgdr $sub --help" "$CGDR" "$sub" --help
    expect_stdout_has "cgdr $sub --help" "usage: cgdr $sub"
    ! grep -qF '%%' "$W/stdout" || fail "cgdr $sub --help prints a literal %%"
    cp "$W/stdout" "$W/sub_help"
    expect_ok "cgdr help $sub" "$CGDR" help "$sub"
    cmp -s "$W/stdout" "$W/sub_help" || fail "cgdr help $sub differs from cgdr $sub --help"
  done
  ! grep -qF '%%' "$W/stdout" || fail "cgdr --help prints a literal %%"
  expect_error "help for an unknown command" "'cgdr help' takes one command name" "$CGDR" help frobnicate
  expect_ok "cgdr --version" "$CGDR" --version
  grep -qE '^cgdr [0-9]+\.[0-9]+\.[0-9]+$' "$W/stdout" || fail "cgdr --version: $(cat "$W/stdout")"
  expect_error "no command" "no command" "$CGDR"
  expect_error "unknown command" "unknown command 'frobnicate'" "$CGDR" frobnicate
  expect_error "unknown flag" "unknown flag '--bogus'" "$CGDR" run --bogus
  expect_error "stray word" "unexpected argument 'extra'" "$CGDR" run extra
  expect_error "unknown bench row" "no row 'npu-nope' (rows: qwen3-next," "$CGDR" bench --shape npu-nope
  expect_error "unknown bench target" "--target: 'avx9' is not a target this build runs on this CPU (" "$CGDR" bench --target avx9
  expect_error "skip outside a timing build" "--skip-emulated-products: only in a timing build" "$CGDR" bench --skip-emulated-products
  expect_error "flag without value" "--input needs a value" "$CGDR" run --input
  expect_error "missing --output" "needs --output" "$CGDR" run --input "$W/x"
  expect_error "bad --threads" "--threads: expected an integer" "$CGDR" run --input a --output b --threads -1
  expect_error "bad --algo" "--algo: expected" "$CGDR" run --input a --output b --algo fast
  expect_error "bad --precision" "--precision: expected" "$CGDR" run --input a --output b --precision fp16
  expect_error "repeated flag" "given twice" "$CGDR" run --input a --input b --output c
  expect_error "switch with value" "takes no value" "$CGDR" run --check-values=1 --input a --output b
}

section_run_and_check() {
  run_and_check varlen --lens 3,0,5 --nk 2 --nv 4 --dk 16 --dv 16
  # One line on success, with units; none with --quiet.
  expect_ok "run summary" "$CGDR" run --input "$W/varlen.case" --output "$W/summary" --algo chunk16 --threads 2
  [ "$(wc -l <"$W/stdout")" -eq 1 ] || fail "run summary: $(wc -l <"$W/stdout") lines on stdout, expected 1"
  grep -qE '^cgdr run: 8 tokens \(B=3 Nk=2 Nv=4 Dk=16 Dv=16 f32\), plan chunk16, fp32 on [a-z0-9_-]+, 2 threads: [0-9.]+ ms, [0-9]+ tokens/s; wrote .*/summary$' \
    "$W/stdout" || fail "run summary: $(cat "$W/stdout")"
  expect_ok "run --quiet" "$CGDR" run --input "$W/varlen.case" --output "$W/summary" --quiet
  [ ! -s "$W/stdout" ] || fail "run --quiet printed: $(cat "$W/stdout")"
  # Every formulation passes the same check, and thread counts give identical bytes (SPEC 5).
  for algo in auto recurrent chunk16 chunk32 chunk64; do
    expect_ok "run --algo $algo" "$CGDR" run --input "$W/varlen.case" --output "$W/varlen.$algo" --algo "$algo" --threads 2
    expect_ok "check --algo $algo" "$CGDR" check --input "$W/varlen.case" --result "$W/varlen.$algo"
  done
  # Precision modes run (the bf16 one is checked by tests/precision_test.cc with its own tolerance).
  for prec in fp32 bf16x3 bf16x4; do
    expect_ok "run --precision $prec" "$CGDR" run --input "$W/varlen.case" --output "$W/varlen.$prec" --precision "$prec" --algo chunk16
    expect_ok "check --precision $prec" "$CGDR" check --input "$W/varlen.case" --result "$W/varlen.$prec"
  done
  expect_ok "run --precision bf16" "$CGDR" run --input "$W/varlen.case" --output "$W/varlen.bf16" --precision bf16
  expect_ok "run --threads 1" "$CGDR" run --input "$W/varlen.case" --output "$W/t1" --threads 1
  expect_ok "run --threads 3" "$CGDR" run --input "$W/varlen.case" --output "$W/t3" --threads 3
  cmp -s "$W/t1" "$W/t3" || fail "results differ between --threads 1 and --threads 3"
  # Over an existing file: replaced whole.
  echo "old" >"$W/t1"
  expect_ok "run over an existing result" "$CGDR" run --input "$W/varlen.case" --output "$W/t1" --threads 1
  cmp -s "$W/t1" "$W/t3" || fail "overwritten result differs"
  # A multi-chunk sequence with a partial last chunk, and --check-values on good data.
  run_and_check long --t 150 --nk 1 --nv 2 --dk 32 --dv 32
  expect_ok "run --check-values" "$CGDR" run --input "$W/long.case" --output "$W/long.cv" --check-values
  # check refuses a result that does not belong to the case, and flags a wrong one.
  expect_error "check mismatched result" "expected shape" "$CGDR" check --input "$W/long.case" --result "$W/varlen.result"
  local rc=0
  "$CGDR" check --input "$W/long.case" --result "$W/long.case" >"$W/stdout" 2>"$W/stderr" || rc=$?
  [ "$rc" -eq 2 ] || fail "check with a case as the result: exit $rc, expected 2"
  # A result of another case with the same shapes: check must notice (exit 1, FAIL).
  expect_ok "make-case other seed" "$CGDR" make-case --out "$W/other.case" --lens 3,0,5 --nk 2 --nv 4 --dk 16 --dv 16 --seed 7
  rc=0
  "$CGDR" check --input "$W/other.case" --result "$W/varlen.result" >"$W/stdout" 2>"$W/stderr" || rc=$?
  [ "$rc" -eq 1 ] || fail "check of a wrong result: exit $rc, expected 1; $(cat "$W/stdout" "$W/stderr")"
  expect_stdout_has "check of a wrong result" "FAIL"
  expect_no_temporaries "run_and_check"
}

section_layouts_and_dtypes() {
  run_and_check f16 --t 70 --dtype f16 --state-dtype f32
  run_and_check f16state --t 40 --dtype f16 --g-dtype f16
  run_and_check bf16 --t 40 --dtype bf16 --l2norm --scale 0.2
  run_and_check kv --lens 5,17 --layout kv
  run_and_check nog --t 33 --no-g
  run_and_check nostate --lens 4,0,9 --no-state --dtype f16
  run_and_check wide --t 20 --nk 1 --nv 3 --dk 80 --dv 48
  run_and_check gate --lens 19,0,40 --nk 2 --nv 4 --raw-gate --beta-sigmoid --dtype bf16  # SPEC 6d: the gate in the kernel
  run_and_check empty --lens 0 --dtype bf16
  expect_no_temporaries "layouts_and_dtypes"
}

# bad_run WHAT SUBSTRING CASE: `cgdr run` must refuse with exit 2, one line,
# and leave the output as it was (absent, or a pre-existing file untouched).
bad_run() {
  local what=$1 want=$2 case_file=$3
  rm -f "$W/out.safetensors"
  expect_error "$what" "$want" "$CGDR" run --input "$case_file" --output "$W/out.safetensors"
  [ ! -e "$W/out.safetensors" ] || fail "$what: an output file was created"
  echo "keep me" >"$W/kept.safetensors"
  expect_error "$what (existing output)" "$want" "$CGDR" run --input "$case_file" --output "$W/kept.safetensors"
  [ "$(cat "$W/kept.safetensors")" = "keep me" ] || fail "$what: the existing output file was modified"
}

# bad_run_flags WHAT SUBSTRING CASE FLAGS...: bad_run with extra flags for `cgdr run`.
bad_run_flags() {
  local what=$1 want=$2 case_file=$3
  shift 3
  rm -f "$W/out.safetensors"
  expect_error "$what" "$want" "$CGDR" run --input "$case_file" --output "$W/out.safetensors" "$@"
  [ ! -e "$W/out.safetensors" ] || fail "$what: an output file was created"
}

section_bad_inputs() {
  expect_ok "make good case" "$CGDR" make-case --out "$W/good.case" --t 12
  local size
  size=$(wc -c <"$W/good.case")

  cp "$W/good.case" "$W/json.case"  # the header's opening '{' becomes 'X'
  printf 'X' | dd of="$W/json.case" bs=1 seek=8 conv=notrunc status=none
  bad_run "corrupt header JSON" "not valid JSON" "$W/json.case"

  cp "$W/good.case" "$W/len.case"  # header length far past the end of the file
  printf '\xff\xff\xff\x7f\x00\x00\x00\x00' | dd of="$W/len.case" bs=1 seek=0 conv=notrunc status=none
  bad_run "header length past EOF" "exceeds the limit" "$W/len.case"
  printf '\x00\x00\x10\x00\x00\x00\x00\x00' | dd of="$W/len.case" bs=1 seek=0 conv=notrunc status=none
  bad_run "header length past EOF (small)" "runs past the end of the file" "$W/len.case"

  head -c $((size - 10)) "$W/good.case" >"$W/trunc.case"
  bad_run "truncated file" "outside the data buffer" "$W/trunc.case"
  head -c 5 "$W/good.case" >"$W/tiny.case"
  bad_run "5-byte file" "too short" "$W/tiny.case"
  : >"$W/empty.case"
  bad_run "empty file" "too short" "$W/empty.case"
  bad_run "missing file" "cannot open" "$W/does-not-exist.case"
  bad_run "directory as input" "not a regular file (a directory)" "$W"

  local kind want
  while read -r kind want; do
    expect_ok "make-case --break $kind" "$CGDR" make-case --out "$W/$kind.case" --t 12 --break "$kind"
    bad_run "broken case $kind" "$want" "$W/$kind.case"
  done <<'EOF'
beta-i32 beta: expected dtype f32
key-shape key: expected shape
seq-lens seq_lens: expected the lengths to sum to T
missing-beta missing required tensor 'beta'
bad-layout metadata 'state_layout' is "xy"
unknown-tensor unknown tensor 'querry'
EOF

  expect_error "output in a missing directory" "cannot create a temporary file" \
    "$CGDR" run --input "$W/good.case" --output "$W/no/such/dir/out.safetensors"
  [ ! -e "$W/no" ] || fail "a directory was created for the output"
  mkdir "$W/outdir"
  expect_error "output is a directory" "outdir: is a directory" "$CGDR" run --input "$W/good.case" --output "$W/outdir"
  [ -z "$(ls -A "$W/outdir")" ] || fail "output directory was written into"
  expect_no_temporaries "bad_inputs"
}

# st_file HEADER OUT: a safetensors file of the JSON in HEADER and no data.
st_file() {
  local n i
  n=$(wc -c <"$1")
  { for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(( (n >> (8 * i)) & 255 )))"; done; cat "$1"; } >"$2"
}

# Issue 19's defects, end to end: each input gets exit 2 and one short line,
# quickly; outputs that are not regular files are refused and left alone.
# `timeout` bounds what used to hang or take hours (the fixed code takes
# well under a second on each).
section_hostile() {
  expect_ok "make good case" "$CGDR" make-case --out "$W/good.case" --t 12

  # 1. Arrays nested 100,000 deep in a shape (a 200 kB file): was SIGSEGV.
  { printf '{"x":{"dtype":"F32","shape":'; head -c 100000 /dev/zero | tr '\0' '['; printf 1
    head -c 100000 /dev/zero | tr '\0' ']'; printf ',"data_offsets":[0,4]}}'; } >"$W/deep.json"
  st_file "$W/deep.json" "$W/deep.case"
  expect_error "deep nesting" "tensor 'x': JSON nested deeper than 3 levels" \
    timeout 60 "$CGDR" run --input "$W/deep.case" --output "$W/out.safetensors"
  [ "$(wc -c <"$W/stderr")" -lt 400 ] || fail "deep nesting: the message is $(wc -c <"$W/stderr") bytes long"

  # 2. 100,000 entries: was quadratic (64k entries took 45 s). The error names every tensor a case may carry.
  seq 0 99999 | sed 's/.*/"t&":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}/' | paste -sd, |
    sed 's/^/{/; s/$/}/' | tr -d '\n' >"$W/many.json"
  st_file "$W/many.json" "$W/many.case"
  expect_error "100,000 entries" \
    "unknown tensor 't0' (expected query, key, value, beta, g, a, A_log, dt_bias, initial_state, seq_lens, state_indices, dst_indices, out, final_state)" \
    timeout 60 "$CGDR" run --input "$W/many.case" --output "$W/out.safetensors"

  # 3. A FIFO as the input: open() blocked forever.
  mkfifo "$W/fifo"
  expect_error "FIFO input" "fifo: not a regular file (a FIFO)" \
    timeout 60 "$CGDR" run --input "$W/fifo" --output "$W/out.safetensors"
  expect_error "device input" "/dev/null: not a regular file (a character device)" \
    "$CGDR" run --input /dev/null --output "$W/out.safetensors"
  [ ! -e "$W/out.safetensors" ] || fail "an output was written for a refused input"

  # 4. Outputs: a FIFO, a device node, a link to a device are refused and stay what they were.
  expect_error "FIFO output" "fifo: is a FIFO" timeout 60 "$CGDR" run --input "$W/good.case" --output "$W/fifo"
  [ -p "$W/fifo" ] || fail "FIFO output: the FIFO was replaced"
  if mknod "$W/null" c 1 3 2>/dev/null; then
    expect_error "device output" "null: is a character device" "$CGDR" run --input "$W/good.case" --output "$W/null"
    [ -c "$W/null" ] || fail "device output: the device node was replaced"
  fi
  ln -s /dev/null "$W/devlink"
  expect_error "link to a device" "devlink: is a character device (where the symbolic link leads: '/dev/null')" \
    "$CGDR" run --input "$W/good.case" --output "$W/devlink"
  [ -L "$W/devlink" ] && [ -c /dev/null ] || fail "link to a device: the link or /dev/null was replaced"
  mkdir "$W/outdir"
  expect_error "directory output" "outdir: is a directory" "$CGDR" run --input "$W/good.case" --output "$W/outdir"
  # A link to a file (or to where one will be) is followed: the file gets the result, the link stays.
  expect_ok "direct output" "$CGDR" run --input "$W/good.case" --output "$W/direct.safetensors" --quiet
  echo old >"$W/target.safetensors"
  ln -s target.safetensors "$W/link.safetensors"
  ln -s new.safetensors "$W/dangling.safetensors"
  for link in link dangling; do
    expect_ok "output through a $link symlink" "$CGDR" run --input "$W/good.case" --output "$W/$link.safetensors" --quiet
    [ -L "$W/$link.safetensors" ] || fail "output through a $link symlink: the link was replaced"
  done
  cmp -s "$W/direct.safetensors" "$W/target.safetensors" || fail "output through a symlink: target not written"
  cmp -s "$W/direct.safetensors" "$W/new.safetensors" || fail "output through a dangling symlink: target not created"
  expect_no_temporaries "hostile"
}

section_plan() {
  expect_ok "plan flagship" "$CGDR" plan --t 8192 --nk 16 --nv 32 --dk 128 --dv 128
  expect_stdout_has "plan flagship" "CGDR_PLAN T=8192 B=1 Nk=16 Nv=32 Dk=128 Dv=128 dtype=f16"
  expect_stdout_has "plan flagship" "why:"
  expect_ok "plan varlen" "$CGDR" plan --t 1001 --b 4 --nk 2 --nv 4 --dk 64 --dv 32 --threads 3 --algo chunk16 --dtype bf16
  for word in "B=4" "chunk=16" "threads=3" "dtype=bf16" "groups: 16 of 1..1 items" "by 3 threads"; do expect_stdout_has "plan varlen" "$word"; done
  expect_ok "plan huge T" "$CGDR" plan --t 1000000000000 --nk 16 --nv 32 --dk 128 --dv 128
  expect_stdout_has "plan huge T" "T=1000000000000"
  expect_error "plan Nv % Nk" "--nv: expected a multiple of --nk" "$CGDR" plan --t 8 --nk 2 --nv 3 --dk 16 --dv 16
  expect_error "plan Dk = 0" "--dk: expected an integer in [1, 256]" "$CGDR" plan --t 8 --nk 1 --nv 1 --dk 0 --dv 16
  expect_error "plan Dv too big" "--dv: expected an integer in [1, 256]" "$CGDR" plan --t 8 --nk 1 --nv 1 --dk 16 --dv 300
  expect_error "plan missing --t" "needs --t" "$CGDR" plan --nk 1 --nv 1 --dk 16 --dv 16
  # The bench's JSON carries the peak measured again after the rows (no timing asserted).
  expect_ok "bench json" "$CGDR" bench --shape npu-B1-H8-T64-D64x64 --reps 3 --json "$W/bench.json"
  expect_stdout_has "bench json" "FMA peak measured again after the rows"
  for key in '"pct_peak"' '"peak_gflops_after"' '"pct_peak_conservative"' '"pct_peak_best_conservative"'; do
    grep -qF -- "$key" "$W/bench.json" || fail "bench json: no $key in $W/bench.json"
  done
  # The AMX peak measured again where a tile row ran; nothing of it elsewhere.
  if "$CGDR" plan --t 64 --nk 1 --nv 1 --dk 64 --dv 64 --algo chunk32 --precision bf16x3 | grep -q "engine=amx "; then
    expect_ok "bench amx json" "$CGDR" bench --shape npu-B1-H8-T64-D64x64 --reps 3 --algo chunk32 --precision bf16x3 \
      --engine amx --json "$W/bench-amx.json"
    expect_stdout_has "bench amx json" "AMX bf16 peak measured again after the rows"
    grep -qF '"amx_peak_gflops_after"' "$W/bench-amx.json" || fail "bench amx json: no amx_peak_gflops_after"
  else
    if grep -qF '"amx_peak_gflops_after"' "$W/bench.json"; then fail "bench json: amx_peak_gflops_after without AMX"; fi
  fi
}

# The planner's profile (`cgdr tune`, $CGDR_PROFILE): the precision modes'
# cost moves the plan's pick to C = 1 (FP32 products) where the chunked
# products are slower; a profile saying they cost as much keeps C = 16; a
# broken one falls back to the built-in defaults; tune writes one plan reads;
# the AMX engine's constants steer its chunk per mode.
# stream_out_bytes (optional) moves the size from which out is streamed.
section_profile() {
  local flagship="plan --t 8192 --nk 16 --nv 32 --dk 128 --dv 128 --threads 2"
  export CGDR_PROFILE="$W/absent.json"
  expect_ok "plan fp32" "$CGDR" $flagship --precision fp32
  for word in "chunk=16" "profile: built-in defaults" "stream_out=1" "written past the caches" "engine vector"; do
    expect_stdout_has "plan fp32" "$word"
  done
  # The vector engine's precision modes (the AMX engine has its own costs).
  expect_ok "plan bf16x3" "$CGDR" $flagship --precision bf16x3 --engine vector
  for word in "chunk=1 " "C=1 keeps FP32 products"; do expect_stdout_has "plan bf16x3" "$word"; done
  expect_ok "plan bf16x3 forced" "$CGDR" $flagship --precision bf16x3 --engine vector --algo chunk16
  for word in "chunk=16" "C=16 forced" "precision=bf16x3" "engine vector (asked for)"; do
    expect_stdout_has "plan bf16x3 forced" "$word"
  done
  # The AMX engine's emulation, on any CPU; precision auto by default.
  expect_ok "plan amx-emu" "$CGDR" $flagship --engine amx-emu --algo chunk64
  for word in "engine=amx-emu" "precision=bf16x3" "precision bf16x3 (auto:"; do expect_stdout_has "plan amx-emu" "$word"; done
  expect_ok "plan f32 auto" "$CGDR" $flagship --dtype f32
  for word in "precision=fp32" "f32 inputs need 2e-5"; do expect_stdout_has "plan f32 auto" "$word"; done
  expect_error "plan bad engine" "--engine: expected auto, vector, amx or amx-emu, got 'tiles'" "$CGDR" $flagship --engine tiles

  local costs='"state_fma_cost": [2.2, 1, 1, 1], "inchunk_fma_cost": [0, 1, 1.5, 1]'
  echo "{$costs, \"precision_cost\": [1, 1, 1, 1]}" >"$W/even.json"
  CGDR_PROFILE="$W/even.json" expect_ok "plan even profile" "$CGDR" $flagship --precision bf16x3 --engine vector
  for word in "chunk=16" "profile: $W/even.json"; do expect_stdout_has "plan even profile" "$word"; done
  echo "{$costs, \"stream_out_bytes\": 1000000000000}" >"$W/no_stream.json"
  CGDR_PROFILE="$W/no_stream.json" expect_ok "plan no_stream profile" "$CGDR" $flagship --precision fp32
  for word in "stream_out=0" "profile: $W/no_stream.json"; do expect_stdout_has "plan no_stream profile" "$word"; done
  # A profile measured on another CPU is not this one's; the plan says so.
  echo "{$costs, \"stream_out_bytes\": 1000000000000, \"cpu\": \"Another CPU (family 1 model 2)\"}" >"$W/other_cpu.json"
  CGDR_PROFILE="$W/other_cpu.json" expect_ok "plan other CPU's profile" "$CGDR" $flagship --precision fp32
  for word in "stream_out=1" "profile: built-in defaults ($W/other_cpu.json was measured on Another CPU (family 1 model 2), not on this "; do
    expect_stdout_has "plan other CPU's profile" "$word"
  done
  echo "{$costs, \"precision_cost\": [1, -2, 1, 1]}" >"$W/broken.json"
  CGDR_PROFILE="$W/broken.json" expect_ok "plan broken profile" "$CGDR" $flagship --precision bf16x3 --engine vector
  for word in "chunk=1 " "profile: built-in defaults"; do expect_stdout_has "plan broken profile" "$word"; done

  # The AMX engine's per-chunk pass costs are per mode: dear for bf16 only
  # moves bf16 alone to the longest chunk (bf16x3, with no pass cost, runs
  # the shortest the tiles weigh: C = 32, SPEC 6c); one number (older
  # profiles) is every mode's.
  local amx='"amx_fma_cost": [0, 1, 1, 1], "amx_state_pass_cost"'
  echo "{$costs, $amx: [0, 1000, 0, 0]}" >"$W/amx_per_mode.json"
  echo "{$costs, $amx: 1000}" >"$W/amx_one_pass.json"
  local mode profile want
  for profile in amx_per_mode amx_one_pass; do
    for mode in bf16 bf16x3; do
      want="chunk=128"
      [ "$profile.$mode" = amx_per_mode.bf16x3 ] && want="chunk=32"
      CGDR_PROFILE="$W/$profile.json" expect_ok "plan $profile $mode" "$CGDR" $flagship --engine amx-emu --precision $mode
      for word in "$want" "profile: $W/$profile.json"; do expect_stdout_has "plan $profile $mode" "$word"; done
    done
  done

  expect_ok "tune" "$CGDR" tune --quick --out "$W/tuned.json"
  for word in "precision_cost" "wrote $W/tuned.json"; do expect_stdout_has "tune" "$word"; done
  grep -q '"precision_cost"' "$W/tuned.json" || fail "tune: no precision_cost in $W/tuned.json"
  grep -q '"cpu": ".*(family [0-9]* model [0-9]*)"' "$W/tuned.json" || fail "tune: no cpu in $W/tuned.json"
  CGDR_PROFILE="$W/tuned.json" expect_ok "plan tuned profile" "$CGDR" $flagship --precision bf16
  expect_stdout_has "plan tuned profile" "profile: $W/tuned.json"
  unset CGDR_PROFILE
}

# expect_exit WHAT CODE CMD...: exit CODE (0 pass / 1 fail of a verdict); stdout kept in $W/stdout.
expect_exit() {
  local what=$1 want=$2 rc=0
  shift 2
  "$@" >"$W/stdout" 2>"$W/stderr" || rc=$?
  [ "$rc" -eq "$want" ] || fail "$what: exit $rc, expected $want; $(cat "$W/stdout" "$W/stderr")"
  [ ! -s "$W/stderr" ] || fail "$what: unexpected stderr: $(cat "$W/stderr")"
}

# cgdr golden + compare (docs/golden.md) in the three file kinds: the
# benchmark passes against itself, every planted fault fails (exit 1) and the
# breakdown names where; JSON for machines; fp16 through the emulation.
section_golden() {
  local shape="--lens 200,0,137 --nk 2 --nv 4 --dk 32 --dv 32 --check-heads 1"
  local kind actual
  for kind in safetensors npy bin; do
    expect_ok "golden --generate $kind" "$CGDR" golden --generate $shape --format "$kind" --fault dropped-state --out "$W/g_$kind"
    for word in "golden " "benchmark " "FP64 check, value head 0" "fault dropped-state"; do
      expect_stdout_has "golden $kind" "$word"
    done
    case $kind in safetensors) actual="$W/g_$kind/actual.safetensors" ;; npy) actual="$W/g_$kind/actual" ;; bin) actual="$W/g_$kind/actual.json" ;; esac
    expect_exit "compare $kind fault" 1 "$CGDR" compare --dir "$W/g_$kind" --actual "$actual"
    for word in "out [337, 4, 32], thresholds of bf16: FAIL at L1" "seq 0 chunk 2 (tokens 128-191)" "verdict at L1: FAIL"; do
      expect_stdout_has "compare $kind fault" "$word"
    done
    local bench
    case $kind in safetensors) bench="$W/g_$kind/benchmark.safetensors" ;; npy) bench="$W/g_$kind/benchmark" ;; bin) bench="$W/g_$kind/benchmark.json" ;; esac
    expect_exit "compare $kind benchmark" 0 "$CGDR" compare --dir "$W/g_$kind" --actual "$bench" --level L2
    expect_stdout_has "compare $kind benchmark" "verdict at L2: PASS"
    # A case in this kind read back gives the same golden bytes.
    local case_path
    case $kind in safetensors) case_path="$W/g_$kind/case.safetensors" ;; npy) case_path="$W/g_$kind/case" ;; bin) case_path="$W/g_$kind/case.json" ;; esac
    expect_ok "golden --input $kind" "$CGDR" golden --input "$case_path" --out "$W/g2_$kind" --check-heads 0
  done
  cmp -s "$W/g_safetensors/golden.safetensors" "$W/g2_safetensors/golden.safetensors" || fail "golden from safetensors differs"
  cmp -s "$W/g_bin/golden.out.bin" "$W/g2_bin/golden.out.bin" || fail "golden from a .bin manifest differs"
  cmp -s "$W/g_npy/golden/out.npy" "$W/g2_npy/golden/out.npy" || fail "golden from a .npy directory differs"

  local fault want
  while read -r fault want; do
    expect_ok "golden --fault $fault" "$CGDR" golden --input "$W/g_safetensors/case.safetensors" --out "$W/f_$fault" --fault "$fault" --check-heads 0
    expect_exit "compare $fault" 1 "$CGDR" compare --dir "$W/f_$fault" --actual "$W/f_$fault/actual.safetensors" --level L0
    expect_stdout_has "compare $fault" "$want"
  done <<'EOF2'
tail-mask final_state [3, 4, 32, 32], thresholds of bf16: FAIL at L0
swapped-heads heads:      0:
g-sign non-finite
EOF2
  # Machines: --json carries the verdict, the metrics and the breakdown; the exit status still says it.
  expect_exit "compare --json" 1 "$CGDR" compare --dir "$W/f_swapped-heads" --actual "$W/f_swapped-heads/actual.safetensors" --json
  for key in '"pass": false' '"mare"' '"mere"' '"rmse"' '"small_value_errors"' '"cosine_similarity"' '"max_abs_index"' '"worst_chunks"' '"L2"'; do
    expect_stdout_has "compare --json" "$key"
  done
  # Without the case: sequences unknown, said so; --seq-lens restores them.
  expect_exit "compare no case" 1 "$CGDR" compare --golden "$W/f_tail-mask/golden.safetensors" \
    --benchmark "$W/f_tail-mask/benchmark.safetensors" --actual "$W/f_tail-mask/actual.safetensors"
  expect_stdout_has "compare no case" "sequences:  unknown"
  expect_exit "compare --seq-lens" 1 "$CGDR" compare --golden "$W/f_tail-mask/golden.safetensors" \
    --benchmark "$W/f_tail-mask/benchmark.safetensors" --actual "$W/f_tail-mask/actual.safetensors" --seq-lens 200,0,137
  expect_stdout_has "compare --seq-lens" "(tokens 200-336)"
  # fp16: the emulation engine, f16 results; threads do not change its bytes.
  expect_ok "golden f16" "$CGDR" golden --generate --t 150 --nk 1 --nv 2 --dk 32 --dv 32 --dtype f16 --out "$W/h1" --threads 1 --check-heads 0
  expect_stdout_has "golden f16" "f16 operands, FP32 accumulation, C=64; emulation"
  expect_ok "golden f16 2 threads" "$CGDR" golden --input "$W/h1/case.safetensors" --out "$W/h2" --threads 2 --check-heads 0
  cmp -s "$W/h1/benchmark.safetensors" "$W/h2/benchmark.safetensors" || fail "f16 benchmark differs between 1 and 2 threads"
  # An f32 case the NPU ran in bf16: --dtype rounds the inputs as the NPU saw them.
  expect_ok "make f32 case" "$CGDR" make-case --out "$W/f32.case" --t 70 --nk 1 --nv 2 --dk 16 --dv 16
  cp "$W/f32.case" "$W/f32.safetensors"
  expect_ok "golden --dtype bf16" "$CGDR" golden --input "$W/f32.safetensors" --out "$W/d" --dtype bf16 --state-dtype f32
  expect_stdout_has "golden --dtype bf16" "bf16 in, state f32"
  expect_no_temporaries "golden"
}

# Bad input to golden/compare: exit 2, one line naming the file or flag.
section_golden_bad_inputs() {
  expect_ok "golden small" "$CGDR" golden --generate --t 100 --nk 1 --nv 2 --dk 16 --dv 16 --out "$W/s" --format bin --check-heads 0
  expect_error "golden no input" "needs either --input CASE or --generate" "$CGDR" golden --out "$W/x"
  expect_error "golden both" "needs either --input CASE or --generate" "$CGDR" golden --generate --input a --out "$W/x"
  expect_error "golden shape flag with input" "--t: only with --generate" "$CGDR" golden --input "$W/s/case.json" --t 5 --out "$W/x"
  expect_error "golden bad fault" "--fault: expected" "$CGDR" golden --generate --out "$W/x" --fault typo
  expect_error "golden bad dist" "--dist: expected" "$CGDR" golden --generate --out "$W/x" --dist wide
  expect_error "golden bad format" "--format: expected safetensors, npy or bin" "$CGDR" golden --generate --out "$W/x" --format csv
  expect_error "golden missing case" "cannot open" "$CGDR" golden --input "$W/none.safetensors" --out "$W/x"
  expect_error "golden single npy" "give the directory" "$CGDR" golden --input "$W/q.npy" --out "$W/x"
  expect_error "golden fault that cannot apply" "fault tail-mask: needs a sequence longer than 64" \
    "$CGDR" golden --generate --t 64 --nk 1 --nv 2 --dk 16 --dv 16 --out "$W/x" --fault tail-mask
  expect_error "golden kernels f16" "the kernels have bf16 operands only" \
    "$CGDR" golden --input "$W/s/case.json" --out "$W/x" --operands f16 --engine kernels
  # A .bin tensor of the wrong size, a manifest naming a missing file.
  head -c 10 "$W/s/case.query.bin" >"$W/s/short.bin" && cp "$W/s/case.json" "$W/s/bad.json"
  sed -i 's/"case.query.bin"/"short.bin"/' "$W/s/bad.json"
  expect_error "golden short .bin" "tensor 'query': $W/s/short.bin holds 10 bytes, expected" "$CGDR" golden --input "$W/s/bad.json" --out "$W/x"
  sed -i 's/"short.bin"/"gone.bin"/' "$W/s/bad.json"
  expect_error "golden missing .bin" "gone.bin: cannot open" "$CGDR" golden --input "$W/s/bad.json" --out "$W/x"
  # A .npy that is not one.
  mkdir -p "$W/n" && echo "not numpy" >"$W/n/query.npy"
  expect_error "golden bad npy" "$W/n/query.npy: not a .npy file" "$CGDR" golden --input "$W/n" --out "$W/x"
  # Issue 19's rules in golden's readers and writers: a FIFO named by a manifest is refused without
  # blocking; a manifest nested past its depth limit is refused in one short line; an output file
  # that is a FIFO or a link to a device is refused before anything is written, and stays what it was.
  mkfifo "$W/s/fifo.bin" && cp "$W/s/case.json" "$W/s/fifo.json"
  sed -i 's/"case.query.bin"/"fifo.bin"/' "$W/s/fifo.json"
  expect_error "golden FIFO .bin" "fifo.bin: not a regular file (a FIFO)" \
    timeout 60 "$CGDR" golden --input "$W/s/fifo.json" --out "$W/x"
  { printf '{"tensors": {"query": {"file": "q.bin", "dtype": "bf16", "shape": '
    head -c 100000 /dev/zero | tr '\0' '['; head -c 100000 /dev/zero | tr '\0' ']'; printf '}}}'; } >"$W/s/deep.json"
  expect_error "golden deep manifest" "deep.json: JSON nested deeper than 4 levels" \
    timeout 60 "$CGDR" golden --input "$W/s/deep.json" --out "$W/x"
  [ "$(wc -c <"$W/stderr")" -lt 400 ] || fail "golden deep manifest: the message is $(wc -c <"$W/stderr") bytes long"
  mkdir -p "$W/fo" && mkfifo "$W/fo/golden.safetensors"
  expect_error "golden FIFO output" "golden.safetensors: is a FIFO" timeout 60 "$CGDR" golden --generate --t 20 --nk 1 \
    --nv 2 --dk 16 --dv 16 --out "$W/fo" --check-heads 0
  [ -p "$W/fo/golden.safetensors" ] || fail "golden FIFO output: the FIFO was replaced"
  mkdir -p "$W/lo" && ln -s /dev/null "$W/lo/golden.out.bin"
  expect_error "golden output linked to a device" "(where the symbolic link leads: '/dev/null')" \
    "$CGDR" golden --generate --t 20 --nk 1 --nv 2 --dk 16 --dv 16 --out "$W/lo" --format bin --check-heads 0
  [ -L "$W/lo/golden.out.bin" ] && [ -c /dev/null ] || fail "golden output linked to a device: the link was replaced"
  # compare: missing flags, results that do not match, bad level.
  local g="$W/s/golden.json" b="$W/s/benchmark.json"
  expect_error "compare no actual" "needs --actual" "$CGDR" compare --golden "$g" --benchmark "$b"
  expect_error "compare bad level" "--level: expected L0, L1 or L2" "$CGDR" compare --golden "$g" --benchmark "$b" --actual "$b" --level L3
  expect_error "compare bad eps" "--eps: expected a number >= 0" "$CGDR" compare --golden "$g" --benchmark "$b" --actual "$b" --eps -1
  expect_error "compare case and seq-lens" "not both" "$CGDR" compare --dir "$W/s" --actual "$b" --case "$W/s/case.json" --seq-lens 100
  expect_error "compare seq-lens sum" "seq_lens: expected the lengths to sum to T = 100" "$CGDR" compare --golden "$g" --benchmark "$b" --actual "$b" --seq-lens 50
  expect_ok "golden other shape" "$CGDR" golden --generate --t 90 --nk 1 --nv 2 --dk 16 --dv 16 --out "$W/o" --check-heads 0
  expect_error "compare other shape" "golden $g: 'out' has shape [100, 2, 16], actual $W/o/benchmark.safetensors has [90, 2, 16]" \
    "$CGDR" compare --golden "$g" --benchmark "$b" --actual "$W/o/benchmark.safetensors"
  expect_error "compare a case as a result" "unknown tensor 'beta' (expected out, final_state, checkpoint_states)" \
    "$CGDR" compare --golden "$g" --benchmark "$b" --actual "$W/s/case.json"
  expect_error "compare empty dir" "expected golden and benchmark results there" "$CGDR" compare --dir "$W/n" --actual "$b"
  expect_no_temporaries "golden_bad_inputs"
}

# Serving cases (docs/SPEC.md 6d, 7.1): a prefill on a state pool, checkpoints
# (case metadata or --checkpoint-every), decode and verify cases; each run
# checked against FP64 by `cgdr check`, which knows the pool's untouched slots.
section_serving() {
  # A pool of 5 slots: slots 3 and 0 rewritten, 1, 2 and 4 must keep their values (check judges the whole pool).
  run_and_check pool --lens 9,0,21 --slots 3,-1,0 --pool 5
  run_and_check ckpt --lens 40,7,33 --checkpoint-every 16 --dtype f16 --state-dtype f32
  expect_stdout_has "check ckpt" "checkpoint_states"
  run_and_check ckpt_odd --lens 40,7,33 --checkpoint-every 5 --layout kv
  expect_stdout_has "check ckpt_odd" "checkpoint_states"
  # --checkpoint-every on a case without the key; check reads E from the result.
  expect_ok "make-case plain" "$CGDR" make-case --out "$W/plain.case" --lens 30,12
  expect_ok "run --checkpoint-every" "$CGDR" run --input "$W/plain.case" --output "$W/plain.ckpt" --checkpoint-every 8
  expect_ok "check --checkpoint-every" "$CGDR" check --input "$W/plain.case" --result "$W/plain.ckpt"
  expect_stdout_has "check --checkpoint-every" "checkpoint_states"
  # --checkpoint-every 0 overrides the case's key: no checkpoints.
  expect_ok "run --checkpoint-every 0" "$CGDR" run --input "$W/ckpt.case" --output "$W/ckpt.none" --checkpoint-every 0
  expect_ok "check --checkpoint-every 0" "$CGDR" check --input "$W/ckpt.case" --result "$W/ckpt.none"
  ! grep -qF checkpoint_states "$W/stdout" || fail "checkpoints written with --checkpoint-every 0"
  run_and_check poolckpt --lens 20,13 --slots 1,0 --checkpoint-every 4 --raw-gate --beta-sigmoid
  # Decode: one token per sequence (query [N, Nk, Dk]), the pool updated in place.
  run_and_check step --decode --slots 2,-1,0 --pool 4
  run_and_check step16 --decode --slots 1,0 --dtype f16 --state-dtype f32 --layout kv
  # Verify: K tokens per sequence, the state after each into dst slots, or dense states.
  run_and_check verify --decode --tokens 3 --slots 0,-1,1 --pool 12 --dst 2,3,-1,4,5,6,7,8,9 --raw-gate
  run_and_check verify_inplace --decode --tokens 4 --slots 1,0 --beta-sigmoid
  run_and_check verify_states --decode --tokens 2 --slots 3,-1,0 --output-states --layout kv
  expect_stdout_has "check verify_states" "states"
  # A 16-bit pool is rounded after every token: check judges each token from the
  # state written for the one before (16 tokens, no decay: one FP64 run of the 16
  # tokens put a correct result at 1.4x the bf16 limit and 100x f32's for out).
  run_and_check verify_bf16_states --decode --tokens 16 --slots 0,-1,2 --state-dtype bf16 --no-g --output-states
  run_and_check verify_f16_dst --decode --tokens 16 --slots 0,1 --pool 40 --state-dtype f16 --no-g \
    --dst "$(seq -s, 2 33)"
  run_and_check verify_bf16_inplace --decode --tokens 16 --slots 1,0 --dtype bf16 --state-dtype bf16 --no-g
  expect_ok "make-case other verify_bf16" "$CGDR" make-case --out "$W/verify_bf16_other.case" --decode --tokens 16 \
    --slots 0,-1,2 --state-dtype bf16 --no-g --output-states --seed 9
  local rc16=0
  "$CGDR" check --input "$W/verify_bf16_other.case" --result "$W/verify_bf16_states.result" >"$W/stdout" 2>"$W/stderr" ||
    rc16=$?
  [ "$rc16" -eq 1 ] || fail "check of a wrong bf16-pool verify result: exit $rc16, expected 1"
  expect_ok "decode summary" "$CGDR" run --input "$W/verify.case" --output "$W/verify.again" --print-plan
  for word in "decode of 3 sequences x 3 tokens" "P=12" "no plan" "run: "; do expect_stdout_has "decode summary" "$word"; done
  cmp -s "$W/verify.result" "$W/verify.again" || fail "two decode runs of one case differ"
  # A wrong decode result is noticed (exit 1): another seed's result.
  expect_ok "make-case other verify" "$CGDR" make-case --out "$W/verify2.case" --decode --tokens 3 --slots 0,-1,1 \
    --pool 12 --dst 2,3,-1,4,5,6,7,8,9 --raw-gate --seed 9
  local rc=0
  "$CGDR" check --input "$W/verify2.case" --result "$W/verify.result" >"$W/stdout" 2>"$W/stderr" || rc=$?
  [ "$rc" -eq 1 ] || fail "check of a wrong decode result: exit $rc, expected 1; $(cat "$W/stdout" "$W/stderr")"
  expect_no_temporaries "serving"
}

# Each bad serving input: exit 2, one line naming the tensor or key, no output (bad_run).
section_serving_bad_inputs() {
  local name want args
  while IFS='|' read -r name want args; do
    # shellcheck disable=SC2086 # args: make-case flags, split on purpose
    expect_ok "make-case $name" "$CGDR" make-case --out "$W/$name.case" $args
    bad_run "serving case $name" "$want" "$W/$name.case"
  done <<'EOF'
slots_f32|state_indices: expected dtype i32|--lens 4,5 --slots 0,1 --break slots-f32
slots_shape|state_indices: expected shape [B] with B of seq_lens = [2], got [3]|--lens 4,5 --slots 0,1,2
slots_dup|state_indices: expected distinct non-negative indices|--lens 4,5 --slots 1,1
slots_range|state_indices: expected indices < P = 3 (pool size) or negative|--lens 4,5 --slots 0,7 --pool 3
slots_nopool|initial_state: required with state_indices|--lens 4,5 --slots 0,1 --no-state
ckpt_neg|metadata 'checkpoint_every' is "-1"|--lens 4,5 --checkpoint-every -1
dst_prefill|dst_indices: only in a decode case|--lens 4,5 --dst 0,1
states_prefill|metadata 'output_states': only in a decode case|--lens 4,5 --output-states
decode_ckpt|metadata 'checkpoint_every': only in a prefill case|--decode --slots 0,1 --checkpoint-every 2
decode_nopool|missing required tensor 'initial_state'|--decode --slots 0,1 --no-state
decode_slots_f32|state_indices: expected dtype i32|--decode --slots 0,1 --break slots-f32
decode_dup|state_indices: expected distinct non-negative indices|--decode --slots 1,1
dst_f32|dst_indices: expected dtype i32|--decode --tokens 2 --slots 0,1 --dst 2,3,4,5 --pool 6 --break dst-f32
dst_shape|dst_indices: expected rank 2 [N, K]|--decode --tokens 2 --slots 0,1 --dst 2,3,4 --pool 6
dst_range|dst_indices: expected indices < P = 6 (pool size)|--decode --tokens 2 --slots 0,1 --dst 2,3,4,9 --pool 6
dst_and_states|expected either dst_indices (states into pool slots) or states (dense), got both|--decode --tokens 2 --slots 0,1 --dst 2,3,4,5 --pool 6 --output-states
tokens_17|query: expected K in [1, 16] tokens per sequence|--decode --tokens 17 --slots 0
EOF
  expect_error "--checkpoint-every -1" "--checkpoint-every: expected an integer in [0, " \
    "$CGDR" run --input "$W/slots_f32.case" --output "$W/out.safetensors" --checkpoint-every -1
  expect_ok "make-case step" "$CGDR" make-case --out "$W/step.safetensors" --decode --slots 0,1
  bad_run_flags "--checkpoint-every on a decode case" "--checkpoint-every: only for a prefill case" "$W/step.safetensors" \
    --checkpoint-every 4
  # golden / compare take prefill cases with dense states: a serving case is refused by name.
  expect_ok "make-case pool" "$CGDR" make-case --out "$W/pool.safetensors" --lens 4,5 --slots 1,0
  expect_error "golden of a pool case" "a state pool (state_indices) has no golden data" \
    "$CGDR" golden --input "$W/pool.safetensors" --out "$W/gpool" --check-heads 0
  [ ! -e "$W/gpool/golden.safetensors" ] || fail "golden of a pool case: golden written"
  expect_error "golden of a decode case" "a decode case has no golden data" \
    "$CGDR" golden --input "$W/step.safetensors" --out "$W/gstep" --check-heads 0
  expect_no_temporaries "serving_bad_inputs"
}

# KDA (docs/SPEC.md 10): make-case's per-channel gate (g or a [T, Nv, Dk],
# dt_bias [Nv * Dk]) and the bounded gate (metadata gate_lower_bound, A_log
# optional then), run on every formulation (C = 1 and the chunked kernel) and
# checked against FP64; decode and verify cases; bad cases refused by name.
section_kda() {
  local algo
  for algo in recurrent chunk16 chunk64 auto; do
    RUN_FLAGS="--algo $algo"
    run_and_check "kda_g_$algo" --lens 19,0,40 --per-channel-gate
    run_and_check "kda_raw_$algo" --lens 9,30 --per-channel-gate --raw-gate --beta-sigmoid --dtype bf16
    run_and_check "kda_bound_$algo" --lens 33 --per-channel-gate --raw-gate --gate-lower-bound -5 --layout kv
    run_and_check "kda_noalog_$algo" --lens 20,5 --per-channel-gate --raw-gate --gate-lower-bound -3 --no-a-log
  done
  RUN_FLAGS=""
  run_and_check kda_pool --lens 9,0,21 --slots 3,-1,0 --pool 5 --per-channel-gate --checkpoint-every 4
  expect_stdout_has "check kda_pool" "checkpoint_states"
  run_and_check kda_step --decode --slots 2,-1,0 --pool 4 --per-channel-gate --raw-gate --gate-lower-bound -5
  run_and_check kda_verify --decode --tokens 3 --slots 0,-1,1 --pool 12 --dst 2,3,-1,4,5,6,7,8,9 --per-channel-gate
  run_and_check kda_verify_states --decode --tokens 2 --slots 1,0 --output-states --per-channel-gate --raw-gate
  # The bound is in the case's metadata only when given.
  grep -qF gate_lower_bound "$W/kda_bound_auto.case" || fail "kda_bound: no gate_lower_bound in the case"
  ! grep -qF gate_lower_bound "$W/kda_g_auto.case" || fail "kda_g: a gate_lower_bound key without --gate-lower-bound"
  # A result of another seed's case is noticed (exit 1).
  expect_ok "make-case other kda" "$CGDR" make-case --out "$W/kda_other.case" --lens 19,0,40 --per-channel-gate --seed 9
  local rc=0
  "$CGDR" check --input "$W/kda_other.case" --result "$W/kda_g_auto.result" >"$W/stdout" 2>"$W/stderr" || rc=$?
  [ "$rc" -eq 1 ] || fail "check of a wrong KDA result: exit $rc, expected 1; $(cat "$W/stdout" "$W/stderr")"
  local name want args
  while IFS='|' read -r name want args; do
    # shellcheck disable=SC2086 # args: make-case flags, split on purpose
    expect_ok "make-case $name" "$CGDR" make-case --out "$W/$name.case" $args
    bad_run "KDA case $name" "$want" "$W/$name.case"
  done <<'EOF'
kda_bound_pos|options.gate_lower_bound: expected 0 (none) or a finite bound < 0, got 0.5|--lens 4,5 --per-channel-gate --raw-gate --gate-lower-bound 0.5
kda_bound_g|options.gate_lower_bound: given without the raw gate 'a' it applies to|--lens 4,5 --per-channel-gate --gate-lower-bound -5
kda_noalog|A_log: required tensor is missing|--lens 4,5 --per-channel-gate --raw-gate --no-a-log
kda_decode_bound_pos|options.gate_lower_bound: expected 0 (none)|--decode --slots 0,1 --per-channel-gate --raw-gate --gate-lower-bound 2
EOF
  expect_error "--no-a-log without --raw-gate" "--no-a-log: only with --raw-gate" \
    "$CGDR" make-case --out "$W/x.case" --per-channel-gate --no-a-log
  expect_error "--gate-lower-bound nan" "--gate-lower-bound: expected a finite number" \
    "$CGDR" make-case --out "$W/x.case" --raw-gate --gate-lower-bound nan
  [ ! -e "$W/x.case" ] || fail "make-case wrote a case after a bad flag"
  expect_no_temporaries "kda"
}

# The demo at a short length: writes its files to --dir, times (the median
# of 5 calls, against the FP32 peak measured in the run and the recurrent
# form), checks against FP64, passes. No progress on stderr: not a terminal.
section_demo() {
  expect_ok "demo" "$CGDR" demo --t 300 --dir "$W"
  for word in "case:" "run:" "GFLOP/s" "rel err" "demo: PASS"; do expect_stdout_has "demo" "$word"; done
  expect_stdout_line "demo" '^time: +[0-9]+\.[0-9]+ ms, the median of 5 calls after a warm-up'
  expect_stdout_line "demo" '^peak: +[0-9]+\.[0-9] GFLOP/s, the FP32 FMA peak of this .* \(family [0-9]+ model [0-9]+\) on [0-9]+ threads?'
  expect_stdout_line "demo" '^speed: +[0-9]+\.[0-9] GFLOP/s algorithmic .*: [0-9]+\.[0-9]% of FP32 peak$'
  expect_stdout_line "demo" '^baseline: the recurrent form \(algo recurrent, C = 1\) .* runs [0-9]+\.[0-9]+x as fast$'
  expect_stdout_line "demo" '^check vs FP64 '
  expect_stdout_line "demo" '^  out +rel err .* ok$'
  expect_stdout_line "demo" '^  final_state +rel err .* ok$'
  [ -s "$W/demo_case.safetensors" ] && [ -s "$W/demo_result.safetensors" ] || fail "demo: case or result file missing"
  expect_ok "check demo result" "$CGDR" check --input "$W/demo_case.safetensors" --result "$W/demo_result.safetensors" --heads 0,31
  # The baseline itself: the ratio is the run against itself, and said so.
  expect_ok "demo recurrent" "$CGDR" demo --t 64 --threads 1 --algo recurrent --dir "$W"
  expect_stdout_line "demo recurrent" '^plan: +recurrent, .* 1 thread \(.cgdr plan .* --threads 1 --algo recurrent. says why\)$'
  expect_stdout_has "demo recurrent" "(the run is the recurrent form itself)"
}

SECTIONS="usage run_and_check layouts_and_dtypes bad_inputs hostile plan profile demo golden golden_bad_inputs serving serving_bad_inputs kda"
case " $SECTIONS all " in
  *" $SECTION "*) ;;
  *) fail "unknown section '$SECTION' (one of: $SECTIONS all)" ;;
esac
case "$SECTION" in
  all) for s in $SECTIONS; do SECTION=$s "section_$s"; done ;;
  *) "section_$SECTION" ;;
esac
echo "PASS [$SECTION]"

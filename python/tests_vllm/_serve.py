"""One vllm.LLM run of a tiny Qwen3-Next, offline, in its own process:
`python _serve.py MODEL_DIR CONFIG_JSON` prints one JSON line with, per
prompt, the greedy tokens, each step's top-2 logprobs and the prompt's
logprobs, and cgdr's call counts when its plugin is in this process.

CONFIG_JSON: prompts (lists of token ids), max_tokens, and optionally
llm (extra vllm.LLM arguments), prompt_logprobs (bool), exact (bool: the
GDN ops computed exactly, _exact_ops.py), timing (bool: also
time the prompts' prefill, as a 1-token generation, and their decode, as the
rest of a max_tokens one; the best of 3 each, after a warm-up)."""
import time
import json
import os
import sys


def top2(step):
    """(best logprob, second best) of one step's logprob dict."""
    lps = sorted((lp.logprob for lp in step.values()), reverse=True)
    return lps[0], (lps[1] if len(lps) > 1 else float("-inf"))


def main():
    model_dir, cfg = sys.argv[1], json.loads(sys.argv[2])
    from vllm import LLM, SamplingParams
    if cfg.get("exact"):
        sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)),
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")]
        import _exact_ops
        _exact_ops.install()

    args = dict(model=model_dir, dtype="bfloat16", enforce_eager=True, skip_tokenizer_init=True,
                max_model_len=4096, seed=0)
    args.update(cfg.get("llm", {}))
    llm = LLM(**args)
    params = SamplingParams(temperature=0.0, max_tokens=cfg["max_tokens"], logprobs=2, detokenize=False,
                            prompt_logprobs=1 if cfg.get("prompt_logprobs", True) else None, ignore_eos=True)
    requests = [{"prompt_token_ids": p} for p in cfg["prompts"]]
    outs = llm.generate(requests, params, use_tqdm=False)
    result = {"prompts": []}
    for prompt, out in zip(cfg["prompts"], outs):
        gen = out.outputs[0]
        plp = []
        if out.prompt_logprobs:
            plp = [None if d is None else d[tok].logprob for tok, d in zip(prompt, out.prompt_logprobs)]
        result["prompts"].append({"tokens": list(gen.token_ids), "top2": [top2(s) for s in (gen.logprobs or [])],
                                  "prompt_logprobs": plp})
    if cfg.get("timing"):
        def best(max_tokens):
            sp = SamplingParams(temperature=0.0, max_tokens=max_tokens, detokenize=False, ignore_eos=True)
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                llm.generate(requests, sp, use_tqdm=False)
                times.append(time.perf_counter() - t0)
            return min(times)
        prefill = best(1)
        result["timing"] = {"prefill_s": prefill, "decode_s": best(cfg["max_tokens"]) - prefill}
    if "cgdr.vllm" in sys.modules:
        vllm_plugin = sys.modules["cgdr.vllm"]
        result["installed"] = vllm_plugin.installed()
        result["counts"] = vllm_plugin.call_counts()
    print("RESULT " + json.dumps(result), flush=True)
    import psutil  # a vLLM requirement
    for child in psutil.Process().children(recursive=True):  # the multiprocess engine's EngineCore and Worker
        child.kill()
    os._exit(0)  # skip vLLM's slow teardown


if __name__ == "__main__":
    main()

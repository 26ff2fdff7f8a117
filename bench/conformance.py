"""`make conformance`: the clients people install today, run for real, read back by us.

Installs the current PyPI releases of AIPerf and GuideLLM into their own virtualenvs (under
.conformance/, kept between runs), runs each against the loopback mock server
(bench/mock_openai_server.py) with a local byte-level BPE tokenizer (the clients' default
tokenizers download files), ingests the output folder as written with `--strict`, and compares
our figures with the client's own summary: request counts and mean TTFT. Exit 1 on a mismatch.

    python bench/conformance.py [--aiperf 0.13.0] [--guidellm 0.8.1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from mock_openai_server import serve  # noqa: E402

PORT = 8765
MODEL = "mock-llm-8b"
TOKENIZER = """
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
words = ("the quick brown fox jumps over the lazy dog serving tokens latency batch prefill "
         "decode queue model server request response stream chunk").split()
corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(400)]
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>", "</s>"]))
out = sys.argv[1]
tok.save(out + "/tokenizer.json")
json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
           "model_max_length": 100000}, open(out + "/tokenizer_config.json", "w"))
json.dump({"model_type": "gpt2"}, open(out + "/config.json", "w"))
"""


def run_client(cmd: list[str]) -> None:
    """Run a client; on failure show the end of what it said (not just its exit status)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode:
        tail = (r.stdout + r.stderr)[-3000:]
        raise RuntimeError(f"{Path(cmd[0]).name} exited {r.returncode}:\n{tail}")


def client_venv(root: Path, package: str, version: str) -> Path:
    """A virtualenv with ``package==version`` (created once, reused)."""
    d = root / f"{package}-{version}"
    py = d / "bin" / "python"
    if not (d / ".installed").exists():
        venv.create(d, with_pip=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", f"{package}=={version}"], check=True)
        (d / ".installed").write_text(version)
    return d


def pipeline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, cwd=REPO
    )


def ours(wh: Path, sql: str) -> list[dict]:
    r = pipeline("query", "-w", str(wh), "--sql", sql, "--format", "json")
    if r.returncode:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout)


def run_aiperf(env: Path, tok: Path, out: Path) -> dict:
    cmd = [
        str(env / "bin" / "aiperf"), "profile", "--model", MODEL, "--url",
        f"http://127.0.0.1:{PORT}", "--endpoint-type", "chat", "--streaming", "--tokenizer",
        str(tok), "--isl", "500", "--isl-stddev", "50", "--osl", "100", "--osl-stddev", "10",
        "--concurrency", "8", "--request-count", "100", "--warmup-request-count", "8",
        "--random-seed", "42", "--artifact-dir", str(out), "--ui", "none",
    ]  # fmt: skip
    run_client(cmd)
    summary = json.loads(next(out.rglob("profile_export_aiperf.json")).read_text())
    ttft = summary.get("time_to_first_token") or summary["records"]["time_to_first_token"]
    count = summary.get("request_count") or summary["records"]["request_count"]
    return {"requests": int(count["avg"]), "ttft_mean_ms": float(ttft["avg"])}


def run_guidellm(env: Path, tok: Path, out: Path) -> dict:
    # GuideLLM 0.8's `run` takes kind=...,key=value specs (its benchmarks.json echoes them under
    # config.spec); the command of ../shared/real_traces/CLIENT_RUNS.md.
    cmd = [
        str(env / "bin" / "guidellm"), "run",
        "--backend", f"kind=openai_http,target=http://127.0.0.1:{PORT},model={MODEL}",
        "--tokenizer", f"kind=huggingface_auto,model={tok}",
        "--data", "kind=synthetic_text,prompt_tokens=500,prompt_tokens_stdev=50,"
                  "output_tokens=100,output_tokens_stdev=10",
        "--profile", "kind=sweep,sweep_size=4",
        "--constraint", "kind=max_requests,count=40",
        "--seed", "kind=static,value=42",
        "--output", f"kind=json,path={out / 'benchmarks.json'}",
    ]  # fmt: skip
    run_client(cmd)
    doc = json.loads((out / "benchmarks.json").read_text())
    benches = doc["benchmarks"]
    ttft = [b["metrics"]["time_to_first_token_ms"]["successful"] for b in benches]
    n = [t.get("count") or 0 for t in ttft]
    return {
        "benchmarks": len(benches),
        "requests": sum(len((b.get("requests") or {}).get("successful") or []) for b in benches),
        # the request-weighted mean of GuideLLM's per-benchmark means = the mean over all
        "ttft_mean_ms": sum(t["mean"] * k for t, k in zip(ttft, n, strict=True)) / sum(n),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--aiperf", default="0.13.0")
    ap.add_argument("--guidellm", default="0.8.1")
    ap.add_argument("--keep", type=Path, default=None, help="Keep the outputs here.")
    a = ap.parse_args()
    root = REPO / ".conformance"
    work = Path(a.keep or tempfile.mkdtemp(prefix="conformance-"))
    work.mkdir(parents=True, exist_ok=True)
    server = serve(PORT, MODEL)
    failures, rows = [], []
    try:
        for name, version, runner in (
            ("aiperf", a.aiperf, run_aiperf),
            ("guidellm", a.guidellm, run_guidellm),
        ):
            env = client_venv(root, name, version)
            tok = work / f"tokenizer-{name}"
            tok.mkdir(exist_ok=True)
            subprocess.run([str(env / "bin" / "python"), "-c", TOKENIZER, str(tok)], check=True)
            out = work / name
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            theirs = runner(env, tok, out)
            wh = work / f"wh-{name}"
            shutil.rmtree(wh, ignore_errors=True)
            args = ("-w", str(wh), "--strict", "--quiet", "--format", "json")
            r = pipeline("ingest", str(out), *args)
            if r.returncode:
                failures.append(f"{name} {version}: ingest --strict failed: {r.stderr[-400:]}")
                continue
            (mine,) = ours(
                wh,
                "SELECT count(*) AS requests, avg(ttft_s) * 1000 AS ttft_mean_ms, "
                "count(DISTINCT run_id) AS runs FROM requests WHERE status = 'ok'",
            )
            row = {"client": f"{name} {version}", "theirs": theirs, "ours": mine}
            rows.append(row)
            if theirs["requests"] != mine["requests"]:
                failures.append(f"{name}: {mine['requests']} requests, the client says "
                                f"{theirs['requests']}")  # fmt: skip
            if (
                "ttft_mean_ms" in theirs
                and abs(mine["ttft_mean_ms"] / theirs["ttft_mean_ms"] - 1) > 1e-3
            ):
                failures.append(f"{name}: TTFT mean {mine['ttft_mean_ms']:.3f} ms, the client "
                                f"says {theirs['ttft_mean_ms']:.3f}")  # fmt: skip
            if "benchmarks" in theirs and theirs["benchmarks"] != mine["runs"]:
                failures.append(f"{name}: {mine['runs']} runs, {theirs['benchmarks']} benchmarks")
    finally:
        server.shutdown()
    print(json.dumps({"results": rows, "failures": failures, "outputs": str(work)}, indent=1))
    if not a.keep and not failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

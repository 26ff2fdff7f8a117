"""Generator: records valid and self-consistent with metrics.md, truth reproduces the data."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pipeline import catalog
from pipeline.commands.generate import command
from pipeline.physics import StepCost
from pipeline.schema.record import RequestRecord
from pipeline.sim.config import kv_capacity_tokens
from pipeline.sim.generator import GenerateSpec, generate
from pipeline.sim.workload import SyntheticWorkload, inter_arrivals

US = 1e-6  # records are rounded to microseconds


def _records(path: Path) -> list[RequestRecord]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [RequestRecord.model_validate_json(line) for line in fh]


def test_records_follow_metrics_definitions(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    truth = generate(GenerateSpec(requests=400, seed=3), out)
    recs = _records(out)
    assert len(recs) == 400 and truth["summary"]["requests"] == 400
    for r in recs:
        tt = r.token_times
        assert tt is not None and len(tt) == r.output_tokens
        assert r.arrival_ts <= r.scheduled_ts <= r.first_token_ts <= r.finish_ts
        # token_k are seconds since arrival; first = first_token, last = finish (metrics.md).
        assert tt[0] == pytest.approx(r.first_token_ts - r.arrival_ts, abs=2 * US)
        assert tt[-1] == pytest.approx(r.finish_ts - r.arrival_ts, abs=2 * US)
        assert all(b >= a for a, b in itertools.pairwise(tt))
        assert r.model == "meta-llama/Llama-3.1-8B" and r.gpu == "H100-SXM" and r.run_id == "t"
        assert r.prompt_tokens + r.output_tokens <= 131072


def test_truth_reproduces_an_unqueued_request(tmp_path: Path) -> None:
    # At a tiny rate the first request is alone: TTFT = prefill step, token gaps = decode steps.
    out = tmp_path / "lone.jsonl"
    truth = generate(GenerateSpec(requests=3, rate=1e-4, seed=5), out)
    c = truth["cost"]
    cost = StepCost(
        catalog.model(truth["model"]),
        catalog.gpu(truth["gpu"]),
        mfu=c["mfu"],
        mbu=c["mbu"],
        step_overhead=c["step_overhead"],
        seq_overhead=c["seq_overhead"],
    )
    assert 0.40 <= c["mfu"] <= 0.60 and 0.60 <= c["mbu"] <= 0.80
    r = _records(out)[0]
    assert r.scheduled_ts == r.arrival_ts  # nothing to wait for
    assert r.token_times[0] == pytest.approx(float(cost.prefill_time(r.prompt_tokens)), abs=US)
    gap = float(cost.decode_step_time(1, r.prompt_tokens))
    assert r.token_times[1] - r.token_times[0] == pytest.approx(gap, abs=2 * US)


def test_same_seed_same_bytes_and_pinned_efficiency(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a, b = tmp_path / "x" / "t.jsonl.gz", tmp_path / "y" / "t.jsonl.gz"
    generate(GenerateSpec(requests=200, seed=9), a)
    generate(GenerateSpec(requests=200, seed=9), b)
    assert a.read_bytes() == b.read_bytes()
    c = tmp_path / "c.jsonl"
    truth = generate(GenerateSpec(requests=200, seed=9, efficiencies={"mfu": 0.55}), c)
    assert truth["cost"]["mfu"] == 0.55
    # Pinning an efficiency leaves the sampled workload (lengths) unchanged.
    assert [r.prompt_tokens for r in _records(c)] == [r.prompt_tokens for r in _records(a)]


def test_no_token_times_and_start(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    out = tmp_path / "n.jsonl"
    start = datetime(2026, 3, 1, 12, tzinfo=UTC)
    generate(GenerateSpec(requests=50, token_times=False, start=start), out)
    first = json.loads(out.read_text().splitlines()[0])
    assert "token_times" not in first
    assert start.timestamp() <= first["arrival_ts"] < start.timestamp() + 60


def test_bursty_arrivals_are_overdispersed() -> None:
    rng = np.random.default_rng(0)
    gaps = inter_arrivals(SyntheticWorkload(requests=50_000, rate=10, arrivals="bursty"), rng)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)
    poisson = inter_arrivals(SyntheticWorkload(requests=50_000, rate=10), rng)
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, rel=0.05)


def test_mha_holds_a_quarter_of_the_gqa_kv_tokens() -> None:
    # Llama-2-7B (MHA, 512 KiB/token) vs Llama-3-8B (GQA-4, 128 KiB/token) on one H100.
    gpu = catalog.gpu("H100-SXM")
    mha = kv_capacity_tokens(catalog.model("llama-2-7b"), gpu)
    gqa = kv_capacity_tokens(catalog.model("llama-3-8b"), gpu)
    free_mha = 0.9 * 80 * 2**30 - 2 * 6_738_415_616 - 2 * 2**30
    assert mha == int(free_mha // (512 * 1024))
    assert gqa / mha == pytest.approx(
        4 * (0.9 * 80 * 2**30 - 2 * 8_030_261_248 - 2 * 2**30) / free_mha, rel=1e-3
    )


def test_cli_writes_trace_and_truth(tmp_path: Path) -> None:
    out = tmp_path / "cli.jsonl"
    res = CliRunner().invoke(
        command, ["--out", str(out), "-n", "30", "--model", "llama-2-7b", "--seed", "2"]
    )
    assert res.exit_code == 0, res.output
    assert len(out.read_text().splitlines()) == 30
    assert json.loads(out.read_text().splitlines()[0])["run_id"] == "cli"
    truth = json.loads(Path(f"{out}.truth.json").read_text())
    assert (truth["model"], truth["attention_kind"], truth["seed"]) == ("Llama-2-7B", "MHA", 2)


def test_cli_unknown_model_is_a_usage_error(tmp_path: Path) -> None:
    res = CliRunner().invoke(command, ["--out", str(tmp_path / "x.jsonl"), "--model", "lama-3"])
    assert res.exit_code == 2
    assert "unknown model 'lama-3'" in res.output


def test_help_has_an_example() -> None:
    res = CliRunner().invoke(command, ["--help"])
    assert "Example:" in res.output and "pipeline generate --out" in res.output


@pytest.mark.parametrize(
    "spec",
    [
        GenerateSpec(model="llama-2-7b", chunked_prefill=False, requests=150, seed=4),
        # Small KV (24 GiB L4 holding 16 GB of weights) at 3x capacity: preemption happens.
        GenerateSpec(gpu="L4", requests=150, rate=3.0, arrivals="bursty", seed=6),
        GenerateSpec(model="opt-13b", attention="eager", weight_dtype="fp8", requests=100),
    ],
    ids=["no-chunking", "tight-kv", "eager-fp8"],
)
def test_other_configurations_stay_consistent(tmp_path: Path, spec: GenerateSpec) -> None:
    out = tmp_path / "o.jsonl"
    truth = generate(spec, out)
    for r in _records(out):
        assert len(r.token_times) == r.output_tokens
        assert r.token_times[-1] == pytest.approx(r.finish_ts - r.arrival_ts, abs=2 * US)
        assert r.prompt_tokens + r.output_tokens - 1 <= truth["config"]["kv_capacity_tokens"]
    if spec.gpu == "L4":
        assert truth["summary"]["preemptions"] > 0


def test_a_pool_of_replicas_is_written_server_by_server(tmp_path: Path) -> None:
    """`pipeline generate --replicas 2` (round-robin): request i goes to sim-(i % 2), each
    server's requests are the ones a lone server would serve on that share of the arrivals
    (a consistency test: the pool against the single-server engine), ids stay global, and
    the records follow metrics.md."""
    from pipeline.sim.config import EngineConfig
    from pipeline.sim.engine import simulate

    out = tmp_path / "pool.jsonl"
    truth = generate(GenerateSpec(requests=300, seed=5, replicas=2), out)
    recs = _records(out)
    assert len(recs) == 300 and truth["summary"]["requests"] == 300
    assert (truth["replicas"], truth["routing"]) == (2, "round-robin")
    by_id = {int(r.request_id.split("-")[1]): r for r in recs}
    assert sorted(by_id) == list(range(300))
    assert all(r.server == f"sim-{i % 2}" for i, r in by_id.items())
    # sim-0 alone: the even requests through the same engine give the same timestamps
    even = [by_id[i] for i in range(0, 300, 2)]
    t0 = even[0].arrival_ts
    arrival = np.array([r.arrival_ts - t0 for r in even])
    prompt = np.array([r.prompt_tokens for r in even])
    output = np.array([r.output_tokens for r in even])
    cost = StepCost(catalog.model("llama-3.1-8b"), catalog.gpu("H100-SXM"), **{
        k: truth["cost"][k] for k in ("mfu", "mbu", "step_overhead", "seq_overhead")
    })  # fmt: skip
    config = EngineConfig(**truth["config"])
    alone = simulate(arrival, prompt, output, config, cost)
    first = np.array([r.first_token_ts - t0 for r in even])
    finish = np.array([r.finish_ts - t0 for r in even])
    assert np.allclose(alone.first_token, first, atol=2 * US)
    assert np.allclose(alone.finish, finish, atol=2 * US)


def test_generate_replicas_on_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"
    args = ["-o", str(out), "-n", "60", "--replicas", "3", "--routing", "least-loaded"]
    r = CliRunner().invoke(command, args)
    assert r.exit_code == 0, r.output
    servers = {rec.server for rec in _records(out)}
    assert servers == {"sim-0", "sim-1", "sim-2"}
    assert json.loads((tmp_path / "p.jsonl.truth.json").read_text())["routing"] == "least-loaded"

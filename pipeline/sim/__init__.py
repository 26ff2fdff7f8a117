"""Discrete-event simulation of a continuous-batching LLM server (generator now, replay later)."""

from pipeline.sim.config import EngineConfig, kv_capacity_tokens
from pipeline.sim.engine import simulate
from pipeline.sim.result import SimResult

__all__ = ["EngineConfig", "SimResult", "kv_capacity_tokens", "simulate"]

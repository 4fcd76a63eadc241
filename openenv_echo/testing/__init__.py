"""Scaffolding for tests, examples and benchmarks, not for training runs: CPU stand-ins and recipe helpers.

* ``recipes``         – the example recipes' shared helpers (tiny causal LMs, terminal worlds, scripted actions)
* ``generate_server`` – a token-in/token-out generate endpoint over an HF model (a CPU stand-in for vLLM)
* ``skyrl_cpu``       – SkyRL 0.4's policy worker step on a CPU (``CPUPolicyWorker``, ``training_batch``; Python >= 3.12)
* ``tinker_server``   – ``LocalTinkerServer``: SkyRL's local Tinker-API server (JAX on CPU; Python >= 3.12)
* ``load``            – ``run_load``: a load generator for the env servers (benchmarks and hardening tests)
"""

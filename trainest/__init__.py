"""trainest: analytic estimates of LLM training step time, memory, bottleneck and cost."""

__version__ = "0.1.0"

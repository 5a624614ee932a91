"""trainest: analytic estimates of LLM training step time, memory, bottleneck and cost."""

__version__ = "0.1.0"

SCHEMA_VERSION = "1.0"   # of every JSON document trainest prints (docs/schema/, CHANGELOG.md)

"""The version of every JSON document trainest prints (docs/schema/, CHANGELOG.md)."""

SCHEMA_VERSION = "1.0"

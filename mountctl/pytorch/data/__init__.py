"""Data: shards, the exactly-once plan, datasets, the manifest, source kinds and ``make``."""

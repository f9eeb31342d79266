"""Data: a dataset's index, the exactly-once plan, datasets, read-ahead, decoding, source kinds and ``make``."""

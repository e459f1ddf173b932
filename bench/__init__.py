"""Benchmarks: side-by-side ratios against a baseline run in the same process."""

"""The pieces of `bench/gpu_bench.py`: its records, tables, time budget, child processes and cases."""

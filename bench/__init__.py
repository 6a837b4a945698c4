"""ragline's benchmarks: `python3 bench/run.py` (see its docstring). One module per section, a shared harness and workload."""

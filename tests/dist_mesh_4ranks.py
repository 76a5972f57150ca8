"""A 2-D device mesh on 4 ranks: FSDP2 over 'dp' x tensor + sequence parallelism over 'tp'.

Not part of `make test` (the name does not match pytest's test_*.py, and 4 ranks on 2 cores
are slow); run it with `make test-dist-4` (= pytest tests/dist_mesh_4ranks.py). The ranks run
tests/dist_stacks.py's `mesh_2d` scenario: the main job's GPT split by the tensor-parallel
plan of test_distributed_stacks over each 'tp' pair and sharded by FSDP2 over each 'dp' pair,
trained against one CPU process on the whole batch; no CPU fallback.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_distributed import describe, run_ranks  # noqa: E402

WORLD = 4


def test_fsdp_x_tensor_parallel_on_a_2x2_mesh():
    reports, codes, outputs, _ = run_ranks("mesh_2d", world=WORLD, timeout=300,
                                           worker=os.path.join(HERE, "dist_stacks.py"))
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    for rank, rep in sorted(reports.items()):
        assert rep["fallback_ops"] == [], f"rank {rank}: CPU fallbacks {rep['fallback_ops']}"
        result = rep["checks"]["mesh_2d_fsdp_tp"]
        assert "error" not in result, f"rank {rank}:\n{result['error']}"
        assert rep["device"] == rank % 2  # 4 ranks share the 2 virtual cores: neuron:(LOCAL_RANK % 2)

"""ember.bench: engines in their own processes, taking turns in short timing blocks."""
from __future__ import annotations

import pytest

from ember.bench import compare
from ember.support.errors import EmberError
from tests.conftest import EXAMPLES

LENET = str(EXAMPLES / "lenet.onnx")


def test_compare_pairs_blocks_and_reports_ratio_with_quartiles():
    pytest.importorskip("onnxruntime")
    result = compare(LENET, 1, rounds=4, seconds=0.05)
    assert result["runs"]["ember"] >= 4 * 5 and result["runs"]["onnxruntime"] >= 4 * 5
    assert result["ember"] > 0 and result["onnxruntime"] > 0
    assert result["ratio_q1"] <= result["ratio"] <= result["ratio_q3"]
    # Per-block ratios, not a ratio of overall medians, yet the two agree on a model this steady.
    assert 0.2 < result["ratio"] / (result["ember"] / result["onnxruntime"]) < 5
    assert result["compile_first"] > 0 and result["compile_cached"] > 0


def test_compare_ember_alone_has_no_ratio():
    result = compare(LENET, 1, rounds=2, seconds=0.02, engines=("ember",), fresh_cache=False)
    assert "ratio" not in result and result["runs"]["ember"] >= 10


def test_worker_failure_is_reported_with_the_engine_and_reason(tmp_path):
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(EmberError, match="ember failed"):
        compare(str(broken), 1, rounds=1, seconds=0.01, engines=("ember",), fresh_cache=False)

"""`ember quantize` and what it is made of: calibration files (quant/data.py: folders of .npz /
.npy, an .npz of batches, reference .npz files), the held-out split, the accuracy report
(quant/report.py), and bad input refused with a clear error before any work."""
from __future__ import annotations

import numpy as np
import pytest

from ember.cli import main
from ember.quant import (
    CalibrationError,
    Profile,
    accuracy_report,
    compare_outputs,
    cosine,
    load_calibration,
    split_held_out,
)
from ember.types import DType, TensorType
from tests.test_quant_ort import _small_model

X = TensorType(DType.FLOAT32, (2, 3))
TWO = {"a": X, "b": TensorType(DType.INT64, (1,))}


def _arrays(n, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 2, 3)).astype(np.float32)


def test_a_folder_of_npz_and_npy_files_in_name_order(tmp_path):
    data = _arrays(3)
    np.save(tmp_path / "s1.npy", data[1])
    np.savez(tmp_path / "s0.npz", x=data[0])
    np.save(tmp_path / "s2.npy", data[2])
    (tmp_path / "notes.txt").write_text("ignored")
    feeds = load_calibration(tmp_path, {"x": X})
    assert len(feeds) == 3 and all(np.array_equal(f["x"], d) for f, d in zip(feeds, data, strict=True))


def test_an_npz_of_batches_stacked_or_concatenated(tmp_path):
    data = _arrays(4)
    np.savez(tmp_path / "stacked.npz", x=data)
    feeds = load_calibration(tmp_path / "stacked.npz", {"x": X})
    assert len(feeds) == 4 and np.array_equal(feeds[3]["x"], data[3])
    np.savez(tmp_path / "rows.npz", x=data.reshape(8, 3))  # four samples of two rows each
    feeds = load_calibration(tmp_path / "rows.npz", {"x": X})
    assert len(feeds) == 4 and np.array_equal(feeds[1]["x"], data[1])
    np.savez(tmp_path / "two.npz", a=data[:2], b=np.array([[1], [2]]))
    feeds = load_calibration(tmp_path / "two.npz", TWO)
    assert [int(f["b"][0]) for f in feeds] == [1, 2]


def test_a_reference_npz_with_in_and_out_arrays(tmp_path):
    data = _arrays(1)[0]
    np.savez(tmp_path / "ref.npz", in_x=data, out_0=np.zeros(5))
    (feed,) = load_calibration(tmp_path / "ref.npz", {"x": X})
    assert np.array_equal(feed["x"], data)


def test_calibration_files_that_do_not_fit_are_refused(tmp_path):
    np.savez(tmp_path / "names.npz", y=_arrays(2))
    with pytest.raises(CalibrationError, match=r"names.npz.*unknown inputs \['y'\]; missing inputs \['x'\]"):
        load_calibration(tmp_path / "names.npz", {"x": X})
    np.savez(tmp_path / "shape.npz", x=np.zeros((3, 4), np.float32))
    with pytest.raises(CalibrationError, match=r"input 'x': shape \[3, 4\] is not the model's \[2, 3\]"):
        load_calibration(tmp_path / "shape.npz", {"x": X})
    np.save(tmp_path / "one.npy", _arrays(1)[0])
    with pytest.raises(CalibrationError, match="holds one array, the model takes 2 inputs"):
        load_calibration(tmp_path / "one.npy", TWO)
    np.savez(tmp_path / "counts.npz", a=_arrays(3), b=np.zeros((2, 1), np.int64))
    with pytest.raises(CalibrationError, match="different numbers of samples"):
        load_calibration(tmp_path / "counts.npz", TWO)
    np.save(tmp_path / "objects.npy", np.array([{"x": 1}], dtype=object))
    with pytest.raises(CalibrationError, match="cannot read calibration file"):
        load_calibration(tmp_path / "objects.npy", {"x": X})
    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    with pytest.raises(CalibrationError, match="cannot read calibration file"):
        load_calibration(tmp_path / "broken.npz", {"x": X})
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationError, match="holds no samples"):
        load_calibration(tmp_path / "empty", {"x": X})
    with pytest.raises(CalibrationError, match="does not exist"):
        load_calibration(tmp_path / "absent", {"x": X})
    (tmp_path / "data.csv").write_text("1,2")
    with pytest.raises(CalibrationError, match="give a folder of .npy/.npz files"):
        load_calibration(tmp_path / "data.csv", {"x": X})


def test_held_out_split():
    feeds = [{"x": np.full(1, i)} for i in range(10)]
    calibration, held = split_held_out(feeds, 0.2)
    assert [int(f["x"][0]) for f in held] == [8, 9] and len(calibration) == 8
    assert split_held_out(feeds[:1], 0.2) == (feeds[:1], [])
    assert len(split_held_out(feeds[:2], 0.2)[1]) == 1
    with pytest.raises(CalibrationError, match="held-out fraction 1"):
        split_held_out(feeds, 1.0)


def test_report_figures_hand_checked():
    assert cosine([1, 0], [0, 1]) == 0.0 and cosine([0, 0], [0, 0]) == 1.0 and cosine([0, 0], [1, 0]) == 0.0
    assert np.isclose(cosine([1, 1], [1, 0]), 1 / np.sqrt(2))
    reference = [{"logits": np.array([[1.0, 2.0], [3.0, 0.0]]), "v": np.array([1.0, 0.0, 0.0])},
                 {"logits": np.array([[0.0, 1.0], [1.0, 0.0]]), "v": np.array([1.0, 1.0, 0.0])}]
    actual = [{"logits": np.array([[1.0, 2.5], [3.0, 0.0]]), "v": np.array([1.0, 0.0, 0.0])},
              {"logits": np.array([[0.0, 1.0], [0.0, 1.0]]), "v": np.array([0.0, 1.0, 0.0])}]
    report = compare_outputs(reference, actual)
    logits, v = report.outputs
    assert logits.max_abs_error == 1.0 and logits.max_abs_float == 3.0
    assert logits.top1_agreement == 0.75 and logits.top1_rows == 4  # the last row's arg-max moved
    assert v.top1_agreement is None and v.cosine_min == pytest.approx(1 / np.sqrt(2))
    assert v.cosine_mean == pytest.approx((1 + 1 / np.sqrt(2)) / 2)
    text = report.format()
    assert "output 'logits' [2, 2]: max |error| 1" in text and "top-1 agreement 75.00% (3/4)" in text
    assert compare_outputs(reference, actual, class_axes={"v": 0}).outputs[1].top1_agreement == 0.5
    with pytest.raises(CalibrationError, match="same number"):
        compare_outputs(reference, actual[:1])


def test_accuracy_report_runs_both_models_and_copies_their_outputs():
    class Model:
        def __init__(self, scale):
            self.scale, self.out = scale, np.zeros((1, 3))

        def run(self, feed):  # hands back the same buffer every run, as a backend may
            self.out[...] = feed["x"] * self.scale
            return {"y": self.out}

    feeds = [{"x": np.array([[1.0, 2.0, 3.0]])}, {"x": np.array([[3.0, 2.0, 1.0]])}]
    report = accuracy_report(Model(1.0), Model(1.1), feeds)
    (y,) = report.outputs
    assert y.max_abs_error == pytest.approx(0.3) and y.top1_agreement == 1.0 and y.cosine_min == pytest.approx(1.0)
    with pytest.raises(CalibrationError, match="at least one held-out input"):
        accuracy_report(Model(1.0), Model(1.0), [])


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "m.onnx"
    _small_model(path)
    return path


def _batches(path, n=10, seed=0):
    np.savez(path, x=np.random.default_rng(seed).standard_normal((n, 2, 3, 8, 8)).astype(np.float32))
    return path


def test_cli_quantize_writes_the_profile_and_reports_on_held_out_samples(tmp_path, model, capsys):
    data = _batches(tmp_path / "cal.npz")
    assert main(["quantize", str(model), "--calibration", str(data), "--schema", "symmetric",
                 "--calibration-method", "entropy", "-o", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "profile of 8 calibration sample(s)" in out and "'MatMulInteger': 2, 'QLinearConv': 2" in out
    assert "on 2 held-out sample(s)" in out and "output 'y' [2, 10]: max |error|" in out and "top-1" in out
    cos = float(out.split("cosine mean ")[1].split()[0])
    assert cos > 0.99
    assert Profile.load(tmp_path / "p.json").samples == 8


def test_cli_quantize_with_eval_data_and_keep_float(tmp_path, model, capsys):
    folder = tmp_path / "cal"
    folder.mkdir()
    for i in range(3):
        np.savez(folder / f"{i}.npz", x=np.random.default_rng(i).standard_normal((2, 3, 8, 8)).astype(np.float32))
    evaluation = _batches(tmp_path / "eval.npz", n=4, seed=9)
    assert main(["quantize", str(model), "--calibration", str(folder), "--eval", str(evaluation), "--backend",
                 "interpreter", "--keep-float", "Conv", "-o", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "profile of 3 calibration sample(s)" in out and "on 4 held-out sample(s)" in out
    assert "integer ops {'MatMulInteger': 2}" in out
    assert "2 node(s) float: kept float (keep_float): Conv_0, Conv_2" in out
    assert "1 node(s) int8 (asymmetric), result float (read in float): MatMul_7" in out
    assert "1 node(s) int8 (asymmetric), result requantized: Gemm_5" in out


@pytest.mark.parametrize("bad, message", [
    ("nan", "sample 1, input 'x': 1 NaN/Inf values"),
    ("dtype", "input 'x': dtype float64, the model takes float32"),
    ("shape", r"input 'x': shape \[10, 2, 3, 8, 7\]"),
    ("name", r"unknown inputs \['image'\]"),
    ("empty", "holds no samples"),
])
def test_cli_quantize_refuses_bad_calibration_before_any_work(tmp_path, model, capsys, bad, message):
    data = np.random.default_rng(0).standard_normal((10, 2, 3, 8, 8)).astype(np.float32)
    path = tmp_path / "cal.npz"
    if bad == "nan":
        data[1, 0, 0, 0, 0] = np.nan
        np.savez(path, x=data)
    elif bad == "dtype":
        np.savez(path, x=data.astype(np.float64))
    elif bad == "shape":
        np.savez(path, x=data[..., :7])
    elif bad == "name":
        np.savez(path, image=data)
    else:
        path = tmp_path / "empty"
        path.mkdir()
    assert main(["quantize", str(model), "--calibration", str(path), "-o", str(tmp_path / "p.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ember: error:") and __import__("re").search(message, err), err
    assert not (tmp_path / "p.json").exists()


def test_cli_quantize_refuses_bad_eval_data_before_profiling(tmp_path, model, capsys):
    data = _batches(tmp_path / "cal.npz", n=3)
    bad = np.ones((1, 2, 3, 8, 8), np.float32)
    bad[0, 0, 0, 0, 0] = np.inf
    np.savez(tmp_path / "eval.npz", x=bad)
    assert main(["quantize", str(model), "--calibration", str(data), "--eval", str(tmp_path / "eval.npz"),
                 "-o", str(tmp_path / "p.json")]) == 1
    assert "NaN/Inf" in capsys.readouterr().err and not (tmp_path / "p.json").exists()


def test_the_profile_carries_the_options_it_was_reported_with(tmp_path, model, capsys):
    import ember

    data = _batches(tmp_path / "cal.npz", n=5)
    assert main(["quantize", str(model), "--calibration", str(data), "--schema", "power2", "--keep-float", "Conv",
                 "--backend", "interpreter", "-o", str(tmp_path / "p.json")]) == 0
    profile = Profile.load(tmp_path / "p.json")
    assert profile.options == {"schema": "power2", "method": "minmax", "percentile": 99.99, "keep_float": ["Conv"]}
    compiled = ember.compile(model, quantize=tmp_path / "p.json", backend="interpreter")
    ops = compiled.stats["ops"]["optimized"]
    assert "QLinearConv" not in ops and ops.get("MatMulInteger") == 2, ops  # Conv kept float, as recorded
    overridden = ember.compile(model, quantize=tmp_path / "p.json", quantize_options={"keep_float": []},
                               backend="interpreter")
    assert overridden.stats["ops"]["optimized"].get("QLinearConv") == 2
    text = (tmp_path / "p.json").read_text()
    (tmp_path / "bad.json").write_text(text.replace('"schema": "power2"', '"colour": "red"'))
    with pytest.raises(ember.quant.ProfileError, match="malformed.*option colour"):
        Profile.load(tmp_path / "bad.json")


def test_one_calibration_sample_and_no_eval_reports_on_that_sample(tmp_path, model, capsys):
    data = _batches(tmp_path / "one.npz", n=1)
    assert main(["quantize", str(model), "--calibration", str(data), "--backend", "interpreter",
                 "-o", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "no held-out inputs" in out and "on 1 calibration sample(s)" in out

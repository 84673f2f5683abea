"""Bad input to the torch frontend, refused before any code is generated, naming the op and
the model's Python source line: unsupported ATen ops (all of them at once), data-dependent
control flow, non-tensor outputs, complex numbers, training mode, grad-requiring inputs and
in-place mutation of inputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch frontend's tests need torch (pip install -e '.[torch]')")

import ember  # noqa: E402
from ember.support.errors import EmberError, ModelImportError, UnsupportedError  # noqa: E402

THIS_FILE = __file__


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


class TwoUnsupported(torch.nn.Module):
    def forward(self, x):
        y = torch.atan2(x, x + 1)  # LINE-ATAN2
        z = torch.erfinv(y / 4)  # LINE-ERFINV
        return torch.atan2(z, y)


def _line(marker: str) -> int:
    with open(THIS_FILE) as f:
        return next(i for i, text in enumerate(f, 1) if f"# {marker}" in text and "_line(" not in text)


def _compile(module, *inputs):
    return ember.compile(module.eval(), example_inputs=inputs)


def test_every_unsupported_op_is_reported_with_its_line():
    with pytest.raises(UnsupportedError) as caught:
        _compile(TwoUnsupported(), torch.randn(3, 4))
    message = str(caught.value)
    assert "unsupported ATen ops (2)" in message
    assert f"aten.atan2.default at {THIS_FILE}:{_line('LINE-ATAN2')}" in message
    assert f"aten.erfinv.default at {THIS_FILE}:{_line('LINE-ERFINV')}" in message
    assert "torch.erfinv(y / 4)" in message


class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # LINE-BRANCH
            return x * 2
        return x


def test_data_dependent_control_flow_names_the_line():
    with pytest.raises(ModelImportError) as caught:
        _compile(DataDependent(), torch.randn(3))
    message = str(caught.value)
    assert "data-dependent control flow" in message
    assert f"{THIS_FILE}:{_line('LINE-BRANCH')}" in message and "torch.compile" in message


def test_non_tensor_outputs_are_refused():
    with pytest.raises(UnsupportedError, match="output 'output_1' is not a tensor"):
        _compile(_Fn(lambda x: (x * 2, 3)), torch.randn(3))


def test_complex_inputs_are_refused():
    with pytest.raises(UnsupportedError, match="complex"):
        _compile(_Fn(lambda x: x * 2), torch.randn(3, dtype=torch.complex64))


def test_complex_ops_inside_are_refused_with_their_line():
    with pytest.raises(UnsupportedError, match="complex|unsupported ATen ops") as caught:
        _compile(_Fn(lambda x: torch.view_as_real(torch.fft.fft(x)).sum(-1)), torch.randn(8))
    assert "fft" in str(caught.value)


def test_training_mode_is_refused():
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    with pytest.raises(UnsupportedError, match="training mode .*call model.eval"):
        ember.compile(module, example_inputs=(torch.randn(2, 4),))


def test_inputs_requiring_grad_are_refused():
    with pytest.raises(UnsupportedError, match="requires grad"):
        _compile(torch.nn.Linear(4, 4), torch.randn(2, 4, requires_grad=True))


class MutatesInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


def test_in_place_mutation_of_inputs_is_refused():
    with pytest.raises(UnsupportedError, match="mutates state in place .*user_input_mutation"):
        _compile(MutatesInput(), torch.randn(3))


def test_example_inputs_are_required():
    with pytest.raises(EmberError, match="needs example_inputs"):
        ember.compile(torch.nn.Linear(2, 2).eval())
    with pytest.raises(EmberError, match="input_shapes: not for a torch.nn.Module"):
        ember.compile(torch.nn.Linear(2, 2).eval(), example_inputs=(torch.randn(1, 2),), input_shapes={"x": (1, 2)})


def test_converter_errors_name_the_op_and_line():
    with pytest.raises(UnsupportedError, match=r"aten\.max_pool2d_with_indices\.default at .*indices of max pooling"):
        _compile(_Fn(lambda x: torch.nn.functional.max_pool2d(x, 2, return_indices=True)[1].float()),
                 torch.randn(1, 2, 4, 4))

"""FileCheck tests as files: every tests/filecheck/*.ir (graph IR or LIR) holds a
`// RUN: ember opt %s --passes ...` line, its input IR and `// CHECK` lines; each file runs
`ember opt` on itself, matches the printed result and compares the IR's outputs before and
after the passes (tests/filecheck.py's check_file). Add a file to add a test."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.filecheck import FileCheckError, check_file, run_line

FILES = sorted((Path(__file__).parent / "filecheck").glob("*.ir"))


def test_the_folder_covers_both_irs():
    kinds = {path.name.split("-")[0] for path in FILES}
    assert {"graph", "lir"} <= kinds and len(FILES) >= 8


@pytest.mark.parametrize("path", FILES, ids=[path.stem for path in FILES])
def test_filecheck_file(path: Path):
    check_file(path)


def test_a_check_that_does_not_hold_fails(tmp_path):
    # The harness is not vacuous: the dce file with its CHECK-NOT turned around fails.
    text = (Path(__file__).parent / "filecheck" / "graph-dce.ir").read_text()
    broken = tmp_path / "graph-dce-broken.ir"
    broken.write_text(text.replace("// CHECK-NOT: Add", "// CHECK: Add"))
    with pytest.raises(FileCheckError, match="CHECK: 'Add' not found"):
        check_file(broken)


def test_run_lines_are_ember_opt_commands(tmp_path):
    path = tmp_path / "x.ir"
    assert run_line("// RUN: ember opt %s --passes dce\n", path) == (False, ["opt", str(path), "--passes", "dce"])
    assert run_line("// RUN: not ember opt %s --passes x\n", path)[0]
    with pytest.raises(ValueError, match="exactly one"):
        run_line("graph", path)
    with pytest.raises(ValueError, match="ember opt %s"):
        run_line("// RUN: ember run %s\n", path)

"""Expected failures end with one line on stderr, exit code 2 and no traceback."""

from pathlib import Path

import pytest

from xeoncluster.node.__main__ import main

from .training_helpers import SHARED_DATA, run_training


def _assert_one_line(returncode: int, stderr: str, *fragments: str) -> None:
    lines = stderr.strip().splitlines()
    assert returncode == 2, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("training: ")
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_model_offline_is_one_line(tmp_path: Path) -> None:
    result = run_training(
        [
            "squad",
            "--model", "bert-base-uncased",
            "--train-file", str(SHARED_DATA / "squad-v2-sample.json"),
            "--output-dir", str(tmp_path / "out"),
        ]
    )
    _assert_one_line(
        result.returncode, result.stderr,
        "model 'bert-base-uncased' is not available offline (HF_HUB_OFFLINE=1)", "--model",
    )
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--stack", "intel"], "intel_extension_for_pytorch"),
        (["--ddp-backend", "ccl"], "'ccl' needs --stack intel"),
        (["--no_such_trainer_option", "3"], "--no_such_trainer_option"),
        (["--dataset", "glue"], "either --dataset or --train-file"),
    ],
)
def test_bad_combinations_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], fragment: str
) -> None:
    argv = ["glue", "--train-file", str(SHARED_DATA / "mrpc-train.tsv"), "--output-dir", str(tmp_path), *extra]
    code = main(argv)
    _assert_one_line(code, capsys.readouterr().err, fragment)


def test_missing_data_file_is_reported_before_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["squad", "--model", "no/such-model", "--train-file", str(tmp_path / "nope.json"),
                 "--output-dir", str(tmp_path)])
    _assert_one_line(code, capsys.readouterr().err, "nope.json")


def test_missing_dataset_offline_is_one_line(
    demo_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["squad", "--model", str(demo_dir / "model"), "--dataset", "no-such/dataset", "--output-dir", str(tmp_path)]
    code = main(argv)
    _assert_one_line(code, capsys.readouterr().err, "dataset 'no-such/dataset' is not available offline")
